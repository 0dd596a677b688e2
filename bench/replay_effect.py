"""`python -m bench.replay_effect`: recorded steps replayed from JS vs the same steps run eagerly.

Issue 4's replay claim, measured: per GPU backend and training workload, one page alternates
blocks of replayed and eager `train_on_batch` steps on one model (warm-up excluded) and reports
the median ms per step and the per-step Python->JS calls, command words and replayed steps.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Any

from playwright.async_api import async_playwright

from bench import workloads as wl
from bench.page import BenchPage, CallFailed, CallTimeout
from bench.report import write_named
from bench.server import dev_server, ensure_ready
from tests_e2e.browsers import CHROMIUM, CHROMIUM_ARGS


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.replay_effect", description=__doc__)
    parser.add_argument("--backends", default="webgpu,webgl2", help="our GPU backends to measure")
    parser.add_argument("--workloads", default="W1,W2,W3s", help="training workloads")
    parser.add_argument("--steps", type=int, default=10, help="steps per block (synced once)")
    parser.add_argument("--rounds", type=int, default=2, help="blocks per mode, alternating")
    return parser.parse_args(argv)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _cell(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


async def measure(args: argparse.Namespace, base_url: str) -> list[dict[str, Any]]:
    workloads = wl.ALL_BY_NAME
    rows: list[dict[str, Any]] = []
    async with async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for backend in args.backends.split(","):
                page = BenchPage(browser, base_url, backend)
                started = await page.open()
                for name in args.workloads.split(","):
                    spec = workloads[name].spec()
                    row: dict[str, Any] = {"backend": backend, "workload": name}
                    if not started.get("ok"):
                        row["error"] = f"engine not ready: {started.get('error')}"
                    else:
                        try:
                            row.update(
                                await page.call(
                                    "ours",
                                    "replay_effect",
                                    {"spec": spec, "steps": args.steps, "rounds": args.rounds},
                                    timeout_s=workloads[name].budget_s * 4,
                                )
                            )
                        except (CallFailed, CallTimeout) as exc:
                            row["error"] = str(exc)
                    rows.append(row)
                    print(format_row(row), flush=True)
                await page.close()
        finally:
            await browser.close()
    return rows


def format_row(row: dict[str, Any]) -> str:
    head = f"{row['backend']:<7} {row['workload']:<4}"
    if "error" in row:
        return f"{head} failed: {row['error']}"
    modes = row["modes"]
    cells = []
    for mode in ("recorded", "eager"):
        stats = modes.get(mode, {})
        cells.append(
            f"{mode} {_cell(_median(stats.get('ms_per_step', [])), 2)} ms/step, "
            f"{_cell(_median(stats.get('js_calls_per_step', [])), 2)} JS calls, "
            f"{_cell(_median(stats.get('words_sent_per_step', [])), 0)} words, "
            f"{_cell(_median(stats.get('steps_replayed_per_step', [])), 2)} replayed/step"
        )
    recorded = _median(modes.get("recorded", {}).get("ms_per_step", []))
    eager = _median(modes.get("eager", {}).get("ms_per_step", []))
    ratio = f"eager/recorded {eager / recorded:.2f}x" if recorded and eager else ""
    return f"{head} {' | '.join(cells)} | {ratio}"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    ensure_ready()
    with dev_server() as base_url:
        rows = asyncio.run(measure(args, base_url))
    write_named("replay-effect", {"args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
