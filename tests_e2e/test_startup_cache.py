"""A first visit restores the memory snapshot set-up made in headless Chromium (numpy and the
engine imported), trains like CPython, and keeps the snapshot for the next visit. On a server without one, a second visit in the same
browser profile reuses the first visit's work: the runtime and both packages come from the HTTP
cache, the runtime with numpy and the engine imported from the snapshot the first visit stored and
Python's bytecode from the origin-private file system (as the worker reports), and the engine trains like CPython's.
Bytecode stored for another build is refused and replaced, and so is a snapshot whose shared
libraries do not relink into the function table they were recorded with."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from playwright.sync_api import Playwright

from py_in_browser.testing import workloads
from server.background import background_dev_server
from tests_e2e.browsers import CHROMIUM, CHROMIUM_ARGS
from tests_e2e.conftest import BOOT_TIMEOUT_MS

STAGES = {"page", "runtime", "numpy", "engine", "init"}
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
  const folder = await (await navigator.storage.getDirectory()).getDirectoryHandle("pib-startup");
  const rewrite = async (name, edit) => {
    const file = await folder.getFileHandle(name);
    const bytes = new Uint8Array(await (await file.getFile()).arrayBuffer());
    const length = new DataView(bytes.buffer).getUint32(0, true);
    const header = JSON.parse(new TextDecoder().decode(bytes.subarray(4, 4 + length)));
    const encoded = new TextEncoder().encode(JSON.stringify(edit(header)));
    const prefix = new Uint8Array(4);
    new DataView(prefix.buffer).setUint32(0, encoded.length, true);
    const writable = await file.createWritable();
    await writable.write(new Blob([prefix, encoded, bytes.subarray(4 + length)]));
    await writable.close();
  };
  await rewrite("pib-bytecode", (header) => ({ ...header, version: "another build" }));
  await rewrite("pib-runtime-snapshot", (header) => {
    header.libraries.tableLength += 1;
    return header;
  });
}"""


def visit(
    playwright: Playwright, profile: Path, url: str, then: str | None = None, spoil: bool = False
) -> Any:
    """Opens `url` in a browser on `profile`, waits until the bytecode is stored, runs the Python
    `then`, spoils the stored entries if asked (SPOIL_CACHES), and closes the browser (its caches
    stay in the profile): pib.startup and the result."""
    context = playwright.chromium.launch_persistent_context(
        profile, executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
    )
    try:
        page = context.new_page()
        page.goto(url)
        page.wait_for_function("() => window.pib !== undefined")
        startup = page.evaluate(READY)
        page.wait_for_function(STORED)
        startup = page.evaluate("() => ({...window.pib.startup, cookie: document.cookie})")
        value = None if then is None else page.evaluate("(c) => window.pib.runPython(c)", then)
        if spoil:
            page.evaluate(SPOIL_CACHES)
        return startup, value
    finally:
        context.close()


def xor_in_cpython() -> Any:
    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API owns this thread's event loop
        return pool.submit(asyncio.run, workloads.run_xor(**XOR)).result()


def test_first_visit_restores_the_snapshot_set_up_made_and_trains(
    playwright: Playwright, server_url: str, tmp_path: Path
) -> None:
    startup, got = visit(playwright, tmp_path, f"{server_url}/console?backend=cpu", TRAIN)
    print(f"first visit {startup}")
    assert (startup["snapshot"], startup["snapshot_source"]) == ("loaded", "server"), startup
    assert startup["snapshot_store"] == "stored", startup  # kept as the browser's own copy
    # ...which the page tells the server, so its pages stop preloading the server's copy
    assert f"pib-snapshot={startup['build']}" in startup["cookie"], startup
    assert set(startup["stages"]) == STAGES
    expected = xor_in_cpython()
    np.testing.assert_allclose(got["losses"], expected["losses"], rtol=0, atol=1e-5)
    again, _ = visit(playwright, tmp_path, f"{server_url}/console?backend=cpu")
    assert (again["snapshot"], again["snapshot_source"]) == ("loaded", "browser"), again


def test_second_visit_reuses_downloads_snapshot_and_bytecode_and_trains(
    playwright: Playwright, tmp_path: Path
) -> None:
    with background_dev_server(env={"PIB_SERVER_SNAPSHOT": "off"}) as server_url:
        browser_made_snapshots(playwright, tmp_path, f"{server_url}/console?backend=cpu")


def browser_made_snapshots(playwright: Playwright, tmp_path: Path, url: str) -> None:
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
    assert second["snapshot_source"] == "browser", second
    assert set(second["stages"]) == STAGES
    expected = xor_in_cpython()
    np.testing.assert_allclose(got["losses"], expected["losses"], rtol=0, atol=1e-5)

    # The second visit spoiled both entries: each is refused, the engine starts afresh, and both
    # are stored anew.
    third, backend = visit(playwright, tmp_path, url, "pib.get_backend()")
    assert (third["bytecode"], third["bytecode_store"]) == ("stale", "stored"), third
    assert third["snapshot"].startswith("failed: relinked table differs"), third
    assert third["snapshot_store"] == "stored", third
    assert backend == "cpu"
