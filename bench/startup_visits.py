"""Start-up across visits, the same for every side: navigation to a ready engine in one persistent
Chromium profile, first with empty caches (cold), then again after closing the browser (warm: HTTP
cache and wasm code cache filled). Ours is /console (the engine alone); TF.js and jax-js are
/bench/startup.html, which loads only the one library and starts it on the backend asked for.

A user's second visit is only measurable in a profile that outlives the browser, as here.
"""

from __future__ import annotations

import tempfile
from typing import Any

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Playwright

from bench.stats import FAILED, SideResult
from tests_e2e.browsers import CHROMIUM, CHROMIUM_ARGS

# Visits per row: the row is their median. On a 2-core machine one visit in a few is slowed by
# whatever else runs (~+200-400 ms here), which a row of one or two visits would report.
COLD_VISITS = 3  # each in an empty profile of its own
WARM_VISITS = 5  # in the first cold visit's profile, after it
READY_TIMEOUT_MS = 240_000
SIDE_NAMES = {"ours": "ours", "tfjs": "TF.js", "jaxjs": "jax-js"}
# Each side's ready promise and what it resolves to: {ready_ms, stages, ...}, ready_ms from
# navigation (performance.now() on the page's clock). The console page hosts our engine alone.
READY_PROMISE = {
    "ours": "window.pib?.ready.then(() => window.pib.startup)",
    "other": "window.startup",
}


def ready_script(promise: str) -> str:
    """Waits for the page to create `promise`, then for it (or the timeout)."""
    return f"""async () => {{
  while (!({promise})) await new Promise((resolve) => setTimeout(resolve, 20));
  return await Promise.race([{promise}, new Promise((_, reject) =>
    setTimeout(() => reject(new Error("not ready in time")), {READY_TIMEOUT_MS}))]);
}}"""


# The first visit stores the runtime snapshot and Python's bytecode after ready; the next visit
# is warm only once it has.
STORED = (
    "() => [window.pib.startup.snapshot_store, window.pib.startup.bytecode_store]"
    ".every((state) => state !== 'storing')"
)


# TF.js's and jax-js's wasm is cached by the browser after compiling, in the background: the
# visit stays this long after ready, as ours stays until its own stores are done.
OTHER_SETTLE_MS = 1000


def url_of(base_url: str, side: str, backend: str) -> str:
    if side == "ours":
        return f"{base_url}/console?backend={backend}"
    return f"{base_url}/bench/startup.html?side={side}&backend={backend}"


async def visit(driver: Playwright, profile: str, url: str, side: str) -> dict[str, Any]:
    """One visit in a browser started on `profile` and closed afterwards (which writes its caches
    to disk): the side's startup record ({ready_ms, stages, ...}) or {"error": why}."""
    context = await driver.chromium.launch_persistent_context(
        profile, executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
    )
    try:
        page = await context.new_page()
        await page.goto(url)
        promise = READY_PROMISE["ours" if side == "ours" else "other"]
        startup: dict[str, Any] = await page.evaluate(ready_script(promise))
        if side == "ours":
            await page.wait_for_function(STORED)
        else:
            await page.wait_for_timeout(OTHER_SETTLE_MS)
        return startup
    except PlaywrightError as exc:
        return {"error": exc.message.splitlines()[0]}
    finally:
        await context.close()


async def cold_and_warm(
    driver: Playwright, base_url: str, side: str, backend: str
) -> dict[str, Any]:
    """{"cold": [visits], "warm": [visits]} of `side` (ours, tfjs, jaxjs) on `backend`, in
    profiles made for this measurement."""
    url = url_of(base_url, side, backend)
    cold: list[dict[str, Any]] = []
    warm: list[dict[str, Any]] = []
    for _ in range(COLD_VISITS):
        with tempfile.TemporaryDirectory(prefix="pib-bench-profile-") as profile:
            cold.append(await visit(driver, profile, url, side))
            if not warm:
                warm = [await visit(driver, profile, url, side) for _ in range(WARM_VISITS)]
    return {"cold": cold, "warm": warm}


def side(visits: list[dict[str, Any]]) -> SideResult:
    """Ready times of the visits as a row side; a failed visit fails the side."""
    failed = [v["error"] for v in visits if "error" in v]
    if failed:
        return SideResult(status=FAILED, detail=failed[0])
    return SideResult(samples_ms=[float(v["ready_ms"]) for v in visits])


def stage_text(visits: list[dict[str, Any]]) -> str:
    """'page 450 + runtime 900 + numpy 0 + engine 10 + init 50 ms (HTTP cache: runtime, numpy,
    engine; bytecode loaded; parts, ms from navigation: ...)' for the last visit: where the time
    went (the stages add up to its ready time), what it reused and, for ours, the runtime stage's
    parts."""
    last = visits[-1]
    if "error" in last:
        return str(last["error"])
    stages = " + ".join(f"{name} {ms:.0f}" for name, ms in last["stages"].items())
    if "http_cache" not in last:  # TF.js's and jax-js's pages time stages, nothing more
        return f"{stages} ms"
    reused = [name for name, hit in (last.get("http_cache") or {}).items() if hit]
    return (
        f"{stages} ms (HTTP cache: {', '.join(reused) or 'nothing'}; snapshot {last['snapshot']}; "
        f"bytecode {last['bytecode']}){parts_text(last.get('runtime_parts'))}"
    )


def parts_text(parts: dict[str, list[int | None]] | None) -> str:
    """'; parts, ms from navigation: worker 40-90, wasm 95-600, ...': where the stages' time went
    (web/js/runtime-parts.js; spans overlap), or '' for a page that does not report them."""
    if not parts:
        return ""
    spans = ", ".join(f"{name} {start}-{end}" for name, (start, end) in parts.items())
    return f"; parts, ms from navigation: {spans}"
