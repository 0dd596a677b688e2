"""Start-up across visits in WebKit (WebKitGTK's MiniBrowser through WebKitWebDriver), the WebKit
column beside startup_visits' Chromium rows, and the two side by side per stage.

A WebKitWebDriver session is an ephemeral profile that ends with the session, so a first visit is
a fresh session and a second visit is a later navigation in the first one's (its HTTP cache and
IndexedDB, where the snapshot and bytecode are kept, are the first visit's); Chromium's second
visits restart the browser on a persistent profile instead.

`python -m bench.startup_webkit [--backend cpu]` measures both browsers against one dev server and
prints the medians per stage. `make bench` adds the same WebKit column to its start-up notes for
ours on cpu and webgl2 (WebKit has no WebGPU).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Any

from playwright.async_api import async_playwright

from bench import startup_visits
from server.background import background_dev_server
from tests_e2e.webkit import WebKitBrowser, WebKitError, launch_webkit

STAGES = ("page", "runtime", "numpy", "engine", "init")
# The parts of start-up each visit times (web/js/runtime-parts.js), in the order they begin.
PARTS = (
    "worker",
    "gpu_probe",
    "wasm",
    "snapshot_download",
    "numpy_download",
    "engine_download",
    "snapshot",
    "script",
    "restore",
    "instantiate",
    "link",
    "libraries",
    "files",
    "relink",
    "fresh",
)
READY = startup_visits.ready_script(startup_visits.READY_PROMISE["ours"])


def _visit(browser: WebKitBrowser, url: str) -> dict[str, Any]:
    """One navigation to `url` in the session's window: pib.startup once what the visit stores is
    stored, or {"error": why}."""
    page = browser.pages[0] if browser.pages else browser.new_page()
    try:
        page.goto(url)
        page.wait_for_function("() => window.pib !== undefined")
        page.evaluate(READY)
        page.wait_for_function(startup_visits.STORED)
        startup: dict[str, Any] = page.evaluate("() => window.pib.startup")
        return startup
    except WebKitError as exc:
        return {"error": exc.message.splitlines()[0]}


def _cold_and_warm(base_url: str, backend: str) -> dict[str, list[dict[str, Any]]]:
    url = f"{base_url}/console?backend={backend}"
    cold: list[dict[str, Any]] = []
    warm: list[dict[str, Any]] = []
    for _ in range(startup_visits.COLD_VISITS):
        with launch_webkit() as browser:
            cold.append(_visit(browser, url))
            if not warm:
                warm = [_visit(browser, url) for _ in range(startup_visits.WARM_VISITS)]
    return {"cold": cold, "warm": warm}


async def cold_and_warm(base_url: str, backend: str) -> dict[str, list[dict[str, Any]]]:
    """{"cold": [visits], "warm": [visits]} in WebKit on `backend`, as startup_visits.cold_and_warm
    answers for Chromium (Selenium's calls block, so they run on a thread of their own)."""
    return await asyncio.to_thread(_cold_and_warm, base_url, backend)


def _median(visits: list[dict[str, Any]], key: str | None) -> float | None:
    values = [
        v["ready_ms"] if key is None else v["stages"][key] for v in visits if "error" not in v
    ]
    return statistics.median(values) if values else None


def _part_median(visits: list[dict[str, Any]], part: str) -> float | None:
    """The median length of runtime part `part` (web/js/runtime-parts.js) over the visits that
    timed it."""
    spans = [(v.get("runtime_parts") or {}).get(part) for v in visits if "error" not in v]
    lengths = [end - start for start, end in (s for s in spans if s and s[1] is not None)]
    return statistics.median(lengths) if lengths else None


def _row(label: str, ours: float | None, theirs: float | None) -> str:
    ratio = f"{theirs / ours:.2f}x" if ours and theirs is not None else "-"
    shown = [f"{v:>9.0f}" if v is not None else f"{'-':>9}" for v in (ours, theirs)]
    return f"{'':<14}{label:<12} {shown[0]} {shown[1]}  {ratio}"


def side_by_side(chromium: dict[str, Any], webkit: dict[str, Any]) -> list[str]:
    """Lines of medians per stage and of the ready time: Chromium, WebKit and their ratio, for
    first and second visits."""
    lines = []
    for kind, title in (("cold", "first visit"), ("warm", "second visit")):
        lines.append(f"{title}: {'stage':<12} {'chromium':>9} {'webkit':>9}  webkit/chromium")
        for key in (*STAGES, None):
            lines.append(
                _row(key or "ready", _median(chromium[kind], key), _median(webkit[kind], key))
            )
        lines.append(f"{'':<14}the parts' lengths (they overlap: web/js/runtime-parts.js)")
        for part in PARTS:
            ours, theirs = _part_median(chromium[kind], part), _part_median(webkit[kind], part)
            if ours is not None or theirs is not None:
                lines.append(_row(part, ours, theirs))
        for name, visits in (("chromium", chromium[kind]), ("webkit", webkit[kind])):
            lines.append(f"  {name} last {title}: {startup_visits.stage_text(visits)}")
    return lines


async def _both(backend: str) -> tuple[dict[str, Any], dict[str, Any]]:
    with background_dev_server() as base_url:
        async with async_playwright() as driver:
            chromium = await startup_visits.cold_and_warm(driver, base_url, "ours", backend)
        webkit = await cold_and_warm(base_url, backend)
    return chromium, webkit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cpu", choices=["cpu", "webgl2", "webgpu"])
    args = parser.parse_args()
    chromium, webkit = asyncio.run(_both(args.backend))
    print("\n".join(side_by_side(chromium, webkit)))


if __name__ == "__main__":
    main()
