"""`python -m bench`: ours vs TensorFlow.js in one Chromium session; prints the table, writes JSON."""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

from playwright.async_api import Browser, Playwright, async_playwright

from bench import startup_visits
from bench import workloads as wl
from bench.measure import Settings, measure_name, measure_workload
from bench.page import BenchPage, CallFailed, CallTimeout
from bench.report import RESULTS_DIR, format_table, side_text, write_json
from bench.server import REPO_ROOT, dev_server, ensure_ready
from bench.stats import FAILED, TIMEOUT, UNAVAILABLE, SideResult, row
from tests_e2e.browsers import CHROMIUM, CHROMIUM_ARGS

STALE_BUILD = "no such engine build"
SOFTWARE_GPUS = ("swiftshader", "llvmpipe", "lavapipe", "softpipe", "microsoft basic render")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="W1, W3s and W3s inference only")
    parser.add_argument(
        "--steps", type=int, help="measured steps per sync mode (default 60; 10 with --quick)"
    )
    parser.add_argument(
        "--warmup", type=int, help="warm-up steps, not measured (default 2; 1 with --quick)"
    )
    parser.add_argument("--workloads", help="comma-separated names, e.g. W1,W3s (default: by mode)")
    parser.add_argument(
        "--pairs",
        help="comma-separated ours:tfjs pairs, e.g. cpu:wasm (default: "
        + ",".join(f"{o}:{t}" for o, t in wl.PAIRS)
        + ")",
    )
    parser.add_argument(
        "--budget-scale", type=float, default=1.0, help="multiplies every workload's time budget"
    )
    parser.add_argument(
        "--no-startup",
        action="store_true",
        help="skip the first-training-step rows and the cold/warm visits in a persistent profile",
    )
    parser.add_argument(
        "--output", type=Path, default=RESULTS_DIR, help="folder for the results JSON"
    )
    args = parser.parse_args(argv)
    # 60: six blocks of ten, so a "synced every 10" median has six samples per side, not two.
    args.steps = args.steps or (10 if args.quick else 60)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)
    return args


def chosen_workloads(args: argparse.Namespace) -> list[wl.Workload]:
    if not args.workloads:
        return wl.QUICK if args.quick else wl.FULL
    unknown = [name for name in args.workloads.split(",") if name not in wl.ALL_BY_NAME]
    if unknown:
        raise SystemExit(f"error: unknown workloads {unknown}; known: {sorted(wl.ALL_BY_NAME)}")
    return [wl.ALL_BY_NAME[name] for name in args.workloads.split(",")]


def chosen_pairs(args: argparse.Namespace) -> list[tuple[str, str]]:
    if not args.pairs:
        return wl.PAIRS
    pairs = [tuple(item.split(":", 1)) for item in args.pairs.split(",")]
    if any(len(pair) != 2 for pair in pairs):
        raise SystemExit("error: --pairs takes ours:tfjs items, e.g. cpu:wasm,webgpu:webgpu")
    return [(pair[0], pair[1]) for pair in pairs]


def _software(name: str) -> str:
    return " (software GPU)" if any(s in name.lower() for s in SOFTWARE_GPUS) else ""


def header_lines(browser: Browser, info: dict[str, Any]) -> list[str]:
    """What the numbers were measured on; a software GPU is named as such."""
    adapter = info.get("webgpu_adapter") or {}
    adapter_text = (
        " / ".join(
            str(adapter.get(k))
            for k in ("vendor", "architecture", "device", "description")
            if adapter.get(k)
        )
        or "none"
    )
    webgl = info.get("webgl") or {}
    renderer = str(webgl.get("renderer", "none"))
    return [
        f"Browser: Chromium {browser.version} (headless, {CHROMIUM}); navigator.hardwareConcurrency "
        f"{info.get('hardware_concurrency')}; host {os.cpu_count()} cores, {platform.platform()}",
        f"WebGPU adapter: {adapter_text}{_software(adapter_text)}",
        f"WebGL2 renderer: {renderer}{_software(renderer)}",
        f"crossOriginIsolated: {info.get('cross_origin_isolated')}",
    ]


def run_notes(meta: dict[str, Any]) -> list[str]:
    """How each side was set up and how its steps were written, from what the sides reported."""
    tfjs = meta.get("tfjs_backends", {})
    wasm_flags = (tfjs.get("wasm") or {}).get("flags") or {}
    started = ", ".join(
        f"{name} {'ok' if o.get('ok') else 'unavailable'}" for name, o in tfjs.items()
    )
    notes = [f"TF.js backends: {started}"]
    if wasm_flags:
        notes[-1] += (
            f"; wasm SIMD {wasm_flags.get('WASM_HAS_SIMD_SUPPORT')}, "
            f"threads {wasm_flags.get('WASM_HAS_MULTITHREAD_SUPPORT')}"
        )
    page = meta.get("page_info") or {}
    if page.get("tfjs_scripts_loaded_ms") is not None:
        notes.append(
            f"TF.js scripts (tf.min.js + webgpu + wasm) loaded and ran "
            f"{page['tfjs_scripts_loaded_ms']:.0f} ms after navigation; not in TF.js's start-up row"
        )
    for side, name in (("ours", "ours"), ("theirs", "TF.js")):
        ways = sorted({how[side] for how in meta["how"].values() if how.get(side)})
        if ways:
            notes.append(f"{name} steps: " + " | ".join(ways))
    notes.append(meta["startup"])
    settled = ", ".join(f"{ours} {s:.1f} s" for ours, s in meta["settled_s"].items())
    notes.append(
        "Timed rows start once our engine's first-visit work after ready has ended (the "
        "runtime snapshot and code cache kept, bytecode stored for the next visit: once per "
        "browser profile, after 3 s idle, taking CPU from whatever runs then)"
        + (f"; waited {settled}" if settled else "")
    )
    notes += meta.get("startup_stages", [])
    start, end = meta["load_average_start"], meta["load_average_end"]
    notes.append(
        f"host load average (1/5/15 min) at start {start[0]:.1f}/{start[1]:.1f}/{start[2]:.1f}, "
        f"at end {end[0]:.1f}/{end[1]:.1f}/{end[2]:.1f} on {os.cpu_count()} cores"
    )
    return notes


def _git_commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    return done.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _start_text(outcome: dict[str, Any]) -> str:
    return f"ready in {outcome['ms']:.0f} ms" if outcome.get("ok") else str(outcome.get("error"))


def _why_not(outcome: dict[str, Any]) -> str | None:
    """None when a side started, else why it did not."""
    return None if outcome.get("ok") else str(outcome.get("error") or "did not start")


def side_from_start(outcome: dict[str, Any] | None) -> SideResult:
    """A start-up outcome as a one-sample row side (or unavailable, and why)."""
    if not outcome or not outcome.get("ok"):
        detail = (outcome or {}).get("error") or "did not start"
        return SideResult(status=UNAVAILABLE, detail=detail)
    return SideResult(samples_ms=[float(outcome["ms"])])


async def first_step(page: BenchPage, side: str, workload: wl.Workload) -> SideResult:
    try:
        answer = await page.call(side, "first_step", {"spec": workload.spec()}, 300)
        return SideResult(samples_ms=[float(answer["ms"])])
    except CallFailed as exc:
        return SideResult(status=FAILED, detail=str(exc))
    except CallTimeout as exc:
        await page.open()
        return SideResult(status=TIMEOUT, detail=str(exc))


class Run:
    """Everything one `make bench` measures, accumulated into the results JSON as it goes."""

    def __init__(
        self, args: argparse.Namespace, driver: Playwright, browser: Browser, base_url: str
    ) -> None:
        self.args = args
        self.driver = driver
        self.browser = browser
        self.base_url = base_url
        self.settings = Settings(
            steps=args.steps, warmup=args.warmup, budget_scale=args.budget_scale
        )
        self.workloads = chosen_workloads(args)
        self.results: dict[str, Any] = {
            "meta": {
                "mode": "quick" if args.quick else "full",
                "steps": args.steps,
                "warmup": args.warmup,
                "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
                "git_commit": _git_commit(),
                # Other work on the machine skews every number: say how busy it was.
                "load_average_start": os.getloadavg(),
                "header_lines": [],
                "how": {},
                "settled_s": {},
                "startup": "ours ready: page script start to pib.ready on a cold HTTP cache (Pyodide + "
                "numpy + engine + backend); TF.js ready: tf.setBackend + tf.ready (tf.min.js already "
                f"loaded). First step: from ready, build the {wl.FIRST_STEP.name} model "
                f"({wl.FIRST_STEP.title}) and finish one synced training step. "
                "First/second visit: navigation to pib.ready on /console in a persistent profile, "
                "the browser closed between visits (HTTP and wasm code caches kept); "
                f"{startup_visits.COLD_VISITS} first visits, each in an empty profile, and "
                f"{startup_visits.WARM_VISITS} second visits in the first one's, median of each.",
            },
            "rows": [],
            "profiles": [],
        }

    def log(self, text: str) -> None:
        print(text, flush=True)

    async def run(self) -> dict[str, Any]:
        our_backends = list(dict.fromkeys(ours for ours, _ in chosen_pairs(self.args)))
        for ours in our_backends:
            theirs_list = [theirs for o, theirs in chosen_pairs(self.args) if o == ours]
            await self.run_page(ours, theirs_list)
        meta = self.results["meta"]
        meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %z")
        meta["load_average_end"] = os.getloadavg()
        meta["header_lines"] += run_notes(meta)
        return self.results

    async def run_page(self, ours: str, theirs_list: list[str]) -> None:
        page = BenchPage(self.browser, self.base_url, ours)
        self.log(f"[{ours}] loading /bench/?backend={ours} (our engine boots in its worker)")
        ours_boot = await page.open()
        if STALE_BUILD in str(ours_boot.get("error")):
            # The engine's sources changed between /api/engine and the bundle download (someone is
            # editing py_in_browser/): a reload picks up the new build. Anything else is reported.
            self.log(f"[{ours}] the engine build changed while loading; reloading once")
            ours_boot = await page.open()
        self.log(f"[{ours}] ours: {_start_text(ours_boot)}")
        if not self.results["meta"]["header_lines"]:
            info = await page.info()
            self.results["meta"].update(tfjs_version=info.get("tfjs"), page_info=info)
            self.results["meta"]["header_lines"] = header_lines(self.browser, info)
        ours_first = None
        if ours_boot.get("ok") and not self.args.no_startup:
            ours_first = await first_step(page, "ours", wl.FIRST_STEP)
        for theirs in theirs_list:
            await self.run_pair(page, (ours, theirs), ours_boot, ours_first)
        await page.show(self.results, "done")
        await page.close()
        if ours_boot.get("ok") and not self.args.no_startup:
            await self.run_visits(ours)

    async def run_visits(self, ours: str) -> None:
        """The start-up rows of a first and a second visit, with their stages in the notes."""
        self.log(f"[{ours}] start-up in persistent profiles: first visits, then second visits")
        visits = await startup_visits.cold_and_warm(self.driver, self.base_url, ours)
        self.results["meta"].setdefault("startup_visits", {})[ours] = visits
        pair = (ours, "none")
        for kind, measure in (
            ("cold", "ready, first visit (empty profile), ms"),
            ("warm", "ready, second visit (caches warm), ms"),
        ):
            self.add_row(
                "start-up",
                measure,
                pair,
                startup_visits.side(visits[kind]),
                startup_visits.not_compared(),
            )
            note = f"start-up stages on {ours}, {kind}: {startup_visits.stage_text(visits[kind])}"
            self.results["meta"].setdefault("startup_stages", []).append(note)
            self.log(f"    {note}")

    async def start_theirs(self, page: BenchPage, backend: str) -> dict[str, Any]:
        try:
            outcome: dict[str, Any] = await page.call("theirs", "start", {"backend": backend}, 120)
        except (CallFailed, CallTimeout) as exc:
            outcome = {"ok": False, "error": str(exc)}
        self.results["meta"].setdefault("tfjs_backends", {})[backend] = outcome
        return outcome

    async def run_pair(
        self,
        page: BenchPage,
        pair: tuple[str, str],
        ours_boot: dict[str, Any],
        ours_first: SideResult | None,
    ) -> None:
        ours, theirs = pair
        theirs_boot = await self.start_theirs(page, theirs)
        generation = page.generation
        self.log(f"[{ours}|{theirs}] TF.js: {_start_text(theirs_boot)}")
        self.add_row(
            "start-up",
            "time to a ready engine, ms",
            pair,
            side_from_start(ours_boot),
            side_from_start(theirs_boot),
        )
        if not self.args.no_startup:
            theirs_first = side_from_start(theirs_boot)
            if theirs_boot.get("ok"):
                theirs_first = await first_step(page, "theirs", wl.FIRST_STEP)
            measure = f"first {wl.FIRST_STEP.name} training step, ms"
            self.add_row(
                "start-up", measure, pair, ours_first or side_from_start(ours_boot), theirs_first
            )
        for workload in self.workloads:
            if page.generation != generation:  # reloaded after a hang: TF.js is on its default
                theirs_boot = await self.start_theirs(page, theirs)
                generation = page.generation
            settled_s = await page.settle_ours()
            if settled_s >= 0.1:
                self.log(f"[{ours}] waited {settled_s:.1f} s for our first-visit storage work")
                self.results["meta"]["settled_s"][ours] = settled_s
            self.log(f"[{ours}|{theirs}] {workload.name}: {workload.title}")
            unavailable = {"ours": _why_not(page.ours_start), "theirs": _why_not(theirs_boot)}
            sides, extras = await measure_workload(page, workload, unavailable, self.settings)
            self.results["meta"]["how"].setdefault(workload.name, {}).update(extras["how"])
            for mode, ours_result in sides["ours"].items():
                self.add_row(
                    workload.name,
                    measure_name(workload, min(mode, self.settings.steps)),  # a short run's block
                    pair,
                    ours_result,
                    sides["theirs"][mode],
                    workload.flops_per_step,
                )
            profiles = {"workload": workload.name, "ours_backend": ours, "theirs_backend": theirs}
            self.results["profiles"].append({**profiles, **extras["profiles"]})
            await page.show(self.results, f"{ours}|{theirs} {workload.name} done")

    def add_row(
        self,
        workload: str,
        measure: str,
        pair: tuple[str, str],
        ours: SideResult,
        theirs: SideResult,
        flops: float | None = None,
    ) -> None:
        new = row(
            workload=workload, measure=measure, pair=pair, ours=ours, theirs=theirs, flops=flops
        )
        self.results["rows"].append(new)
        self.log(
            f"    {measure}: ours {side_text(new['ours'], new['unit'])} | "
            f"TF.js {side_text(new['theirs'], new['unit'])}"
        )


async def run_in_browser(args: argparse.Namespace, base_url: str) -> dict[str, Any]:
    async with async_playwright() as driver:
        browser = await driver.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            return await Run(args, driver, browser, base_url).run()
        finally:
            await browser.close()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    ensure_ready()
    started = time.monotonic()
    with dev_server() as base_url:
        results = asyncio.run(run_in_browser(args, base_url))
    results["meta"]["wall_s"] = round(time.monotonic() - started, 1)
    print()
    print(format_table(results))
    path = write_json(results, args.output)
    print(
        f"\nwrote {path} in {results['meta']['wall_s']} s; /bench/report.html on the dev server "
        "renders it"
    )
