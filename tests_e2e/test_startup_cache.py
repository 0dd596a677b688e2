"""Start-up reuses work: a first visit restores the server's memory snapshot (numpy and the engine
imported, made with Node) and trains like CPython. Where the server's snapshot is not to be had,
the browser makes its own after ready, and a second visit in the same profile restores it, with
the runtime and both packages from the HTTP cache and Python's bytecode from the Cache API (as the
worker reports), and trains like CPython. Bytecode stored for another build is refused and
replaced, and so is a snapshot whose shared libraries do not relink into the function table they
were recorded with."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from playwright.sync_api import Playwright

from py_in_browser.testing import workloads
from server.background import background_dev_server
from server.settings import Paths
from tests_e2e.browsers import CHROMIUM, CHROMIUM_ARGS
from tests_e2e.conftest import BOOT_TIMEOUT_MS

STAGES = {"runtime", "numpy", "engine", "init"}
XOR = {"epochs": 20}
TRAIN = f"from py_in_browser.testing import workloads\nawait workloads.run_xor(**{XOR!r})"
READY = f"""async () => {{
  await Promise.race([window.pib.ready, new Promise((_, reject) =>
    setTimeout(() => reject(new Error("pib.ready timed out")), {BOOT_TIMEOUT_MS}))]);
  return window.pib.startup;
}}"""
# What the first visit stores after ready, for the next visit.
STORED = "() => [window.pib.startup.snapshot_store, window.pib.startup.bytecode_store].every((s) => s !== 'storing')"
# Bytecode-cache.js's entry rewritten as if an earlier engine build had stored it, and the
# snapshot's record of the function table made one slot longer than the libraries relink to.
SPOIL_CACHES = """async () => {
  const rewrite = async (name, edit) => {
    const cache = await caches.open(name);
    const bytes = new Uint8Array(await (await cache.match("/current")).arrayBuffer());
    const length = new DataView(bytes.buffer).getUint32(0, true);
    const header = JSON.parse(new TextDecoder().decode(bytes.subarray(4, 4 + length)));
    const encoded = new TextEncoder().encode(JSON.stringify(edit(header)));
    const prefix = new Uint8Array(4);
    new DataView(prefix.buffer).setUint32(0, encoded.length, true);
    await cache.put("/current", new Response(new Blob([prefix, encoded, bytes.subarray(4 + length)])));
  };
  await rewrite("pib-bytecode", (header) => ({ ...header, version: "another build" }));
  await rewrite("pib-runtime-snapshot", (header) => {
    header.libraries.tableLength += 1;
    return header;
  });
}"""


def visit(
    playwright: Playwright,
    profile: Path,
    url: str,
    then: str | None = None,
    spoil: bool = False,
) -> Any:
    """Opens `url` in a browser on `profile`, waits until what it stores is stored, runs the Python
    `then`, spoils the stored entries if asked, and closes the browser (its caches stay in the
    profile): pib.startup and the result."""
    context = playwright.chromium.launch_persistent_context(
        profile, executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
    )
    try:
        page = context.new_page()
        page.goto(url)
        page.wait_for_function("() => window.pib !== undefined")
        startup = page.evaluate(READY)
        page.wait_for_function(STORED)
        startup = page.evaluate("() => window.pib.startup")
        value = None if then is None else page.evaluate("(c) => window.pib.runPython(c)", then)
        if spoil:
            page.evaluate(SPOIL_CACHES)
        return startup, value
    finally:
        context.close()


def cpython_xor() -> Any:
    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API owns this thread's event loop
        return pool.submit(asyncio.run, workloads.run_xor(**XOR)).result()


def test_first_visit_restores_the_servers_snapshot_and_trains(
    playwright: Playwright, server_url: str, tmp_path: Path
) -> None:
    first, got = visit(playwright, tmp_path, f"{server_url}/console?backend=cpu", TRAIN)
    assert first["http_cache"] == {"runtime": False, "numpy": False, "engine": False}, first
    assert (first["snapshot"], first["snapshot_store"]) == ("served", None), first
    np.testing.assert_allclose(got["losses"], cpython_xor()["losses"], rtol=0, atol=1e-5)


@pytest.fixture(scope="module")
def nodeless_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A dev server on a machine without Node: it makes no snapshot (first visits start Python
    themselves). Its cache links the set-up runtime's files rather than fetching them again."""
    cache = tmp_path_factory.mktemp("cache")
    for name in ("runtime", "simd", "web-libraries"):
        shutil.copytree(Paths.default().cache / name, cache / name, copy_function=os.link)
    path = os.pathsep.join(
        folder
        for folder in os.environ["PATH"].split(os.pathsep)
        if not (Path(folder) / "node").exists()
    )
    with background_dev_server(env={"PIB_CACHE_DIR": str(cache), "PATH": path}) as url:
        yield url


def test_second_visit_restores_the_browsers_snapshot_and_bytecode_and_trains(
    playwright: Playwright, nodeless_server_url: str, tmp_path: Path
) -> None:
    url = f"{nodeless_server_url}/console?backend=cpu"
    first, _ = visit(playwright, tmp_path, url)
    assert first["http_cache"] == {"runtime": False, "numpy": False, "engine": False}, first
    assert (first["bytecode"], first["bytecode_store"]) == ("absent", "stored"), first
    assert (first["snapshot"], first["snapshot_store"]) == ("absent", "stored"), first
    assert set(first["stages"]) == STAGES and first["ready_ms"] > 0

    second, got = visit(playwright, tmp_path, url, TRAIN, spoil=True)
    print(f"first visit {first}\nsecond visit {second}")
    assert second["http_cache"] == {"runtime": True, "numpy": True, "engine": True}, second
    assert (second["bytecode"], second["bytecode_store"]) == ("loaded", None), second
    assert (second["snapshot"], second["snapshot_store"]) == ("loaded", None), second
    assert set(second["stages"]) == STAGES
    np.testing.assert_allclose(got["losses"], cpython_xor()["losses"], rtol=0, atol=1e-5)

    # The second visit spoiled both entries: each is refused, the engine starts afresh, and both
    # are stored anew.
    third, backend = visit(playwright, tmp_path, url, "pib.get_backend()")
    assert (third["bytecode"], third["bytecode_store"]) == ("stale", "stored"), third
    assert third["snapshot"].startswith("failed: relinked table differs"), third
    assert third["snapshot_store"] == "stored", third
    assert backend == "cpu"
