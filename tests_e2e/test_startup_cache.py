"""A second visit in the same browser profile reuses the first visit's downloads (the runtime, the
numpy and engine wheels come from the HTTP cache, as the worker reports) and its engine trains
like CPython's."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from playwright.sync_api import Playwright

from py_in_browser.testing import workloads
from tests_e2e.browsers import CHROMIUM, CHROMIUM_ARGS
from tests_e2e.conftest import BOOT_TIMEOUT_MS

STAGES = {"runtime", "numpy", "engine", "init"}
XOR = {"epochs": 20}
READY = f"""async () => {{
  await Promise.race([window.pib.ready, new Promise((_, reject) =>
    setTimeout(() => reject(new Error("pib.ready timed out")), {BOOT_TIMEOUT_MS}))]);
  return window.pib.startup;
}}"""


def visit(playwright: Playwright, profile: Path, url: str, code: str | None = None) -> Any:
    """Opens `url` in a browser on `profile` and closes it (its caches stay in the profile):
    pib.startup, and what `code` returned when given."""
    context = playwright.chromium.launch_persistent_context(
        profile, executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
    )
    try:
        page = context.new_page()
        page.goto(url)
        page.wait_for_function("() => window.pib !== undefined")
        startup = page.evaluate(READY)
        value = None if code is None else page.evaluate("(c) => window.pib.runPython(c)", code)
        return startup, value
    finally:
        context.close()


def test_second_visit_takes_its_downloads_from_the_cache_and_trains(
    playwright: Playwright, server_url: str, tmp_path: Path
) -> None:
    url = f"{server_url}/console?backend=cpu"
    first, _ = visit(playwright, tmp_path, url)
    assert first["http_cache"] == {"runtime": False, "numpy": False, "engine": False}, first
    assert set(first["stages"]) == STAGES and first["ready_ms"] > 0

    code = f"from py_in_browser.testing import workloads\nawait workloads.run_xor(**{XOR!r})"
    second, got = visit(playwright, tmp_path, url, code)
    print(f"ready: first visit {first}, second visit {second}")
    assert second["http_cache"] == {"runtime": True, "numpy": True, "engine": True}, second
    assert set(second["stages"]) == STAGES
    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API owns this thread's event loop
        expected = pool.submit(asyncio.run, workloads.run_xor(**XOR)).result()
    np.testing.assert_allclose(got["losses"], expected["losses"], rtol=0, atol=1e-5)
