"""Start-up across visits: our engine loaded in one persistent Chromium profile, first with empty
caches (cold), then again after closing the browser (warm: HTTP cache and wasm code cache filled).

The bench page's own start-up row uses a fresh incognito-like context, which is always cold; a
user's second visit is only measurable in a profile that outlives the browser, as here.
"""

from __future__ import annotations

import tempfile
from typing import Any

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Playwright

from bench.stats import FAILED, UNAVAILABLE, SideResult
from tests_e2e.browsers import CHROMIUM, CHROMIUM_ARGS

# Visits per row: the row is their median. On a 2-core machine one visit in a few is slowed by
# whatever else runs (~+200-400 ms here), which a row of one or two visits would report.
COLD_VISITS = 3  # each in an empty profile of its own
WARM_VISITS = 5  # in the first cold visit's profile, after it
READY_TIMEOUT_MS = 240_000
# The console page hosts the engine alone: TF.js's scripts would compete with its start-up.
READY = f"""async () => {{
  await Promise.race([window.pib.ready, new Promise((_, reject) =>
    setTimeout(() => reject(new Error("not ready in time")), {READY_TIMEOUT_MS}))]);
  return window.pib.startup;
}}"""
# The first visit stores the runtime snapshot and Python's bytecode after ready; the next visit
# is warm only once it has.
STORED = (
    "() => [window.pib.startup.snapshot_store, window.pib.startup.bytecode_store]"
    ".every((state) => state !== 'storing')"
)


async def visit(driver: Playwright, profile: str, url: str) -> dict[str, Any]:
    """One visit in a browser started on `profile` and closed afterwards (which writes its caches
    to disk): pib.startup ({ready_ms, stages, http_cache}) or {"error": why}."""
    context = await driver.chromium.launch_persistent_context(
        profile, executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
    )
    try:
        page = await context.new_page()
        await page.goto(url)
        await page.wait_for_function("() => window.pib !== undefined")
        startup: dict[str, Any] = await page.evaluate(READY)
        await page.wait_for_function(STORED)
        return startup
    except PlaywrightError as exc:
        return {"error": exc.message.splitlines()[0]}
    finally:
        await context.close()


async def cold_and_warm(driver: Playwright, base_url: str, backend: str) -> dict[str, Any]:
    """{"cold": [visits], "warm": [visits]} on `backend`, in profiles made for this measurement."""
    url = f"{base_url}/console?backend={backend}"
    cold: list[dict[str, Any]] = []
    warm: list[dict[str, Any]] = []
    for _ in range(COLD_VISITS):
        with tempfile.TemporaryDirectory(prefix="pib-bench-profile-") as profile:
            cold.append(await visit(driver, profile, url))
            if not warm:
                warm = [await visit(driver, profile, url) for _ in range(WARM_VISITS)]
    return {"cold": cold, "warm": warm}


def side(visits: list[dict[str, Any]]) -> SideResult:
    """Ready times of the visits as a row side; a failed visit fails the side."""
    failed = [v["error"] for v in visits if "error" in v]
    if failed:
        return SideResult(status=FAILED, detail=failed[0])
    return SideResult(samples_ms=[float(v["ready_ms"]) for v in visits])


def not_compared() -> SideResult:
    return SideResult(status=UNAVAILABLE, detail="TF.js is not measured across visits")


def stage_text(visits: list[dict[str, Any]]) -> str:
    """'page 450 + runtime 900 + numpy 0 + engine 10 + init 50 ms (HTTP cache: runtime, numpy,
    engine; bytecode loaded)' for the last visit: where the time went (the stages add up to its
    ready time) and what it reused."""
    last = visits[-1]
    if "error" in last:
        return str(last["error"])
    stages = " + ".join(f"{name} {ms}" for name, ms in last["stages"].items())
    reused = [name for name, hit in (last.get("http_cache") or {}).items() if hit]
    return (
        f"{stages} ms (HTTP cache: {', '.join(reused) or 'nothing'}; snapshot {last['snapshot']}; "
        f"bytecode {last['bytecode']})"
    )
