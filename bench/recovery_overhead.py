"""`python -m bench.recovery_overhead`: what recovery costs (issue 11, items 1 and 3), measured.

Per browser and GPU backend, one engine page: the backend selection report of a default
pib.init() (self-test and timed step of each candidate), W2's shape trained side by side with
recovery checkpoints every 50 steps (the default) and without (recovery_every=None),
alternating, the recovery time of real losses (pib.debug.lose_device) during a short fit, and
the seconds from a loss between calls to the result of the predict that notices it.
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

from playwright.sync_api import Browser, Page, sync_playwright

from bench.report import write_named
from bench.server import dev_server
from tests_e2e.browsers import launch_chromium, launch_firefox, xvfb_display

CASES = {"chromium": ("webgl2", "webgpu"), "firefox": ("webgl2",)}
RUNS = "from py_in_browser.testing import recovery_runs\n"
BOOT_TIMEOUT_MS = 180_000


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.recovery_overhead", description=__doc__)
    parser.add_argument("--browsers", default="chromium,firefox")
    parser.add_argument("--epochs", type=int, default=4, help="W2 epochs per fit (16 steps each)")
    parser.add_argument("--rounds", type=int, default=3, help="fits per mode, alternating")
    return parser.parse_args(argv)


def open_page(browser: Browser, url: str) -> Page:
    page = browser.new_page()
    page.set_default_timeout(BOOT_TIMEOUT_MS)
    page.goto(url)
    page.wait_for_function("() => window.pib !== undefined")
    page.evaluate("() => window.pib.ready.then(() => null)")
    return page


def run(page: Page, code: str) -> Any:
    """Python run in the engine's worker; the last expression comes back as JSON."""
    return page.evaluate("(code) => window.pib.runPython(code)", code)


def selection(browser: Browser, base_url: str) -> dict[str, Any]:
    """The default pib.init()'s report: each candidate's self-test and timed step."""
    page = open_page(browser, f"{base_url}/console")
    try:
        return dict(run(page, "pib.capabilities()['selection']"))
    finally:
        page.close()


def measure_backend(page: Page, backend: str, args: argparse.Namespace) -> dict[str, Any]:
    overhead = run(
        page,
        RUNS
        + f"await recovery_runs.checkpoint_overhead({backend!r}, {args.epochs}, {args.rounds})",
    )
    seconds = overhead["seconds"]
    lossy = run(page, RUNS + f"await recovery_runs.train({backend!r}, at_steps=[7, 25])")
    restored = [e["seconds"] for e in lossy["events"] if e["type"] == "context_restored"]
    predict = run(
        page,
        "from py_in_browser.testing import recovery_calls\n"
        f"await recovery_calls.predict_after_loss({backend!r})",
    )
    return {
        "backend": backend,
        "fit_seconds": overhead["seconds"],
        "steps_per_fit": overhead["steps_per_fit"],
        # Medians, and fastest fits (what a shared, noisy machine disturbs least).
        "checkpoint_overhead": statistics.median(seconds["with"])
        / statistics.median(seconds["without"])
        - 1.0,
        "checkpoint_overhead_fastest": min(seconds["with"]) / min(seconds["without"]) - 1.0,
        "recovery_seconds": restored,
        "predict_after_loss_seconds": predict,
    }


def format_row(browser: str, row: dict[str, Any]) -> str:
    ms = 1000.0 / row["steps_per_fit"]
    seconds = row["fit_seconds"]
    return (
        f"{browser:<8} {row['backend']:<6} W2 ms/step with checkpoints "
        f"{statistics.median(seconds['with']) * ms:.1f}, without "
        f"{statistics.median(seconds['without']) * ms:.1f} "
        f"(overhead {row['checkpoint_overhead'] * 100:+.1f}% by medians, "
        f"{row['checkpoint_overhead_fastest'] * 100:+.1f}% by fastest fits); recovery s "
        f"{', '.join(f'{s:.2f}' for s in row['recovery_seconds'])}; a predict after a loss "
        f"between calls s {', '.join(f'{s:.2f}' for s in row['predict_after_loss_seconds'])}"
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    results: dict[str, Any] = {"args": vars(args), "browsers": {}}
    with dev_server() as base_url, sync_playwright() as driver, xvfb_display() as display:
        for name in args.browsers.split(","):
            if name == "firefox":
                browser = launch_firefox(driver, display)
            else:
                browser = launch_chromium(driver)
            try:
                report = selection(browser, base_url)
                print(f"{name} selection: {json.dumps(report)}", flush=True)
                rows = []
                page = open_page(browser, f"{base_url}/console?backend=cpu")
                for backend in CASES[name]:
                    rows.append(measure_backend(page, backend, args))
                    print(format_row(name, rows[-1]), flush=True)
                results["browsers"][name] = {"selection": report, "rows": rows}
            finally:
                browser.close()
    write_named("recovery-overhead", results)


if __name__ == "__main__":
    main()
