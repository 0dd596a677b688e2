"""`python -m bench`: ours vs TensorFlow.js and jax-js in one Chromium session; prints the table,
writes JSON."""

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

from bench import startup_visits, startup_webkit
from bench import workloads as wl
from bench.measure import Settings, measure_name, measure_workload
from bench.page import BenchPage, CallFailed, CallTimeout
from bench.report import RESULTS_DIR, format_table, side_text, write_json
from bench.server import REPO_ROOT, dev_server, ensure_ready
from bench.stats import ANCHOR_NAMES, FAILED, JAXJS, TFJS, TIMEOUT, UNAVAILABLE, SideResult, row
from bench.targets import evaluate_targets
from tests_e2e.browsers import CHROMIUM, CHROMIUM_ARGS

STALE_BUILD = "no such engine build"
# window.bench's side names, as the rows name their anchors and as the log says them.
SIDE_ANCHORS = {"theirs": TFJS, "jaxjs": JAXJS}
SIDE_LABELS = {"theirs": "TF.js", "jaxjs": "jax-js"}
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
        help="comma-separated ours:tfjs[:jaxjs] pairs, e.g. cpu:wasm:wasm (default: "
        + ",".join(":".join(b for b in pair if b) for pair in wl.PAIRS)
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


Pair = tuple[str, str, str | None]  # our backend, TF.js's, jax-js's (None: no jax-js side)


def chosen_pairs(args: argparse.Namespace) -> list[Pair]:
    if not args.pairs:
        return wl.PAIRS
    pairs = [item.split(":") for item in args.pairs.split(",")]
    if any(len(pair) not in (2, 3) for pair in pairs):
        raise SystemExit(
            "error: --pairs takes ours:tfjs[:jaxjs] items, e.g. cpu:wasm:wasm,webgpu:webgpu"
        )
    return [(pair[0], pair[1], pair[2] if len(pair) == 3 else None) for pair in pairs]


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
    jax = meta.get("jaxjs_backends", {})
    if jax:
        notes.append(
            f"jax-js {meta.get('jaxjs_version') or '?'} devices: "
            + ", ".join(f"{n} {'ok' if o.get('ok') else o.get('error')}" for n, o in jax.items())
        )
    for side, name in (("ours", "ours"), ("theirs", "TF.js"), ("jaxjs", "jax-js")):
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
                "startup": "Start-up, the same for every side: navigation to a ready engine (ours: "
                "pib.ready on /console, Pyodide + numpy + engine + backend; TF.js: its scripts, "
                "tf.setBackend + tf.ready; jax-js: its module, init + defaultDevice; the last two on "
                "/bench/startup.html) in a persistent profile, the browser closed between visits "
                f"(HTTP and wasm code caches kept); {startup_visits.COLD_VISITS} first visits, each "
                f"in an empty profile, and {startup_visits.WARM_VISITS} second visits in the first "
                "one's, median of each. First step: from ready, build the "
                f"{wl.FIRST_STEP.name} model ({wl.FIRST_STEP.title}) and finish one synced training "
                "step (jax-js: its first jitted step, tracing and compiling included).",
            },
            "rows": [],
            "profiles": [],
        }

    def log(self, text: str) -> None:
        print(text, flush=True)

    async def run(self) -> dict[str, Any]:
        pairs = chosen_pairs(self.args)
        for ours in dict.fromkeys(pair[0] for pair in pairs):
            await self.run_page(ours, [pair for pair in pairs if pair[0] == ours])
        meta = self.results["meta"]
        meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %z")
        meta["load_average_end"] = os.getloadavg()
        meta["header_lines"] += run_notes(meta)
        meta["targets"] = evaluate_targets(self.results["rows"], self.results["profiles"])
        return self.results

    async def run_page(self, ours: str, pairs: list[Pair]) -> None:
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
            self.results["meta"].update(
                tfjs_version=info.get("tfjs"), jaxjs_version=info.get("jaxjs"), page_info=info
            )
            self.results["meta"]["header_lines"] = header_lines(self.browser, info)
        ours_first = None
        if ours_boot.get("ok") and not self.args.no_startup:
            ours_first = await first_step(page, "ours", wl.FIRST_STEP)
        for pair in pairs:
            await self.run_pair(page, pair, ours_boot, ours_first)
        await page.show(self.results, "done")
        await page.close()
        if not self.args.no_startup:
            await self.run_visits(pairs)

    async def run_visits(self, pairs: list[Pair]) -> None:
        """The start-up rows of a first and a second visit for every side, their stages in the
        notes."""
        ours = pairs[0][0]
        self.log(f"[{ours}] start-up in persistent profiles: first visits, then second visits")
        visits = self.results["meta"].setdefault("startup_visits", {})
        visits[ours] = await startup_visits.cold_and_warm(self.driver, self.base_url, "ours", ours)
        self.log_stages("ours", ours, visits[ours])
        await self.webkit_column(ours, visits[ours])
        for side, index in (("tfjs", 1), ("jaxjs", 2)):
            for backend in dict.fromkeys(pair[index] for pair in pairs if pair[index]):
                key = f"{side}:{backend}"
                if key not in visits:
                    assert backend is not None
                    visits[key] = await startup_visits.cold_and_warm(
                        self.driver, self.base_url, side, backend
                    )
                    self.log_stages(side, backend, visits[key])
        for pair in pairs:
            for anchor, key in ((TFJS, f"tfjs:{pair[1]}"), (JAXJS, f"jaxjs:{pair[2]}")):
                if key not in visits:
                    continue
                for kind, measure in (
                    ("cold", "ready, first visit (empty profile), ms"),
                    ("warm", "ready, second visit (caches warm), ms"),
                ):
                    self.add_row(
                        "start-up",
                        measure,
                        pair,
                        anchor,
                        startup_visits.side(visits[ours][kind]),
                        startup_visits.side(visits[key][kind]),
                    )

    async def webkit_column(self, ours: str, chromium: dict[str, Any]) -> None:
        """Our start-up in WebKit beside Chromium's, per stage, in the notes (WebKit has no
        WebGPU, so a webgpu run has no column)."""
        if ours == "webgpu":
            return
        self.log(f"[{ours}] start-up in WebKit (MiniBrowser): first visits, then second visits")
        webkit = await startup_webkit.cold_and_warm(self.base_url, ours)
        self.results["meta"].setdefault("startup_visits", {})[f"webkit:{ours}"] = webkit
        for line in startup_webkit.side_by_side(chromium, webkit):
            self.results["meta"].setdefault("startup_stages", []).append(f"webkit {ours}: {line}")
            self.log(f"    {line}")

    def log_stages(self, side: str, backend: str, visits: dict[str, Any]) -> None:
        for kind in ("cold", "warm"):
            note = (
                f"start-up stages of {startup_visits.SIDE_NAMES[side]} on {backend}, {kind}: "
                f"{startup_visits.stage_text(visits[kind])}"
            )
            self.results["meta"].setdefault("startup_stages", []).append(note)
            self.log(f"    {note}")

    async def start_side(self, page: BenchPage, side: str, backend: str) -> dict[str, Any]:
        """TF.js's or jax-js's backend chosen in the page; {ok, ms} or {ok: False, error}."""
        try:
            outcome: dict[str, Any] = await page.call(side, "start", {"backend": backend}, 120)
        except (CallFailed, CallTimeout) as exc:
            outcome = {"ok": False, "error": str(exc)}
        key = "tfjs_backends" if side == "theirs" else "jaxjs_backends"
        self.results["meta"].setdefault(key, {})[backend] = outcome
        return outcome

    async def start_anchors(self, page: BenchPage, pair: Pair) -> dict[str, dict[str, Any]]:
        """The pair's anchors started on their backends: {"theirs": outcome, "jaxjs": outcome}."""
        boots = {"theirs": await self.start_side(page, "theirs", pair[1])}
        if pair[2]:
            boots["jaxjs"] = await self.start_side(page, "jaxjs", pair[2])
        for side, boot in boots.items():
            self.log(f"[{'|'.join(b for b in pair if b)}] {SIDE_LABELS[side]}: {_start_text(boot)}")
        return boots

    async def run_pair(
        self,
        page: BenchPage,
        pair: Pair,
        ours_boot: dict[str, Any],
        ours_first: SideResult | None,
    ) -> None:
        ours = pair[0]
        boots = await self.start_anchors(page, pair)
        generation = page.generation
        if not self.args.no_startup:
            measure = f"first {wl.FIRST_STEP.name} training step after ready, ms"
            for side, boot in boots.items():
                first = side_from_start(boot)
                if boot.get("ok"):
                    first = await first_step(page, side, wl.FIRST_STEP)
                self.add_row(
                    "start-up",
                    measure,
                    pair,
                    SIDE_ANCHORS[side],
                    ours_first or side_from_start(ours_boot),
                    first,
                )
        label = "|".join(b for b in pair if b)
        for workload in self.workloads:
            if page.generation != generation:  # reloaded after a hang: the anchors are on defaults
                boots = await self.start_anchors(page, pair)
                generation = page.generation
            settled_s = await page.settle_ours()
            if settled_s >= 0.1:
                self.log(f"[{ours}] waited {settled_s:.1f} s for our first-visit storage work")
                self.results["meta"]["settled_s"][ours] = settled_s
            self.log(f"[{label}] {workload.name}: {workload.title}")
            unavailable = {"ours": _why_not(page.ours_start)}
            unavailable |= {
                side: _why_not(boot)
                for side, boot in boots.items()
                if side != "jaxjs" or workload.name in wl.JAXJS
            }
            if "jaxjs" in boots and workload.jaxjs_unavailable:
                unavailable["jaxjs"] = workload.jaxjs_unavailable
            sides, extras = await measure_workload(page, workload, unavailable, self.settings)
            self.results["meta"]["how"].setdefault(workload.name, {}).update(extras["how"])
            for mode, ours_result in sides["ours"].items():
                for side in sides:
                    if side == "ours":
                        continue
                    self.add_row(
                        workload.name,
                        measure_name(workload, min(mode, self.settings.steps)),  # a short run
                        pair,
                        SIDE_ANCHORS[side],
                        ours_result,
                        sides[side][mode],
                        workload.flops_per_step,
                    )
            profiles: dict[str, Any] = {"workload": workload.name, "ours_backend": ours}
            profiles |= {"theirs_backend": pair[1], "jaxjs_backend": pair[2]}
            self.results["profiles"].append({**profiles, **extras["profiles"]})
            await page.show(self.results, f"{label} {workload.name} done")

    def add_row(
        self,
        workload: str,
        measure: str,
        pair: Pair,
        anchor: str,
        ours: SideResult,
        theirs: SideResult,
        flops: float | None = None,
    ) -> None:
        backend = pair[1] if anchor == TFJS else pair[2]
        assert backend is not None
        new = row(
            workload=workload,
            measure=measure,
            pair=(pair[0], backend),
            ours=ours,
            theirs=theirs,
            anchor=anchor,
            group="|".join(b or "-" for b in pair),
            flops=flops,
        )
        self.results["rows"].append(new)
        self.log(
            f"    {measure}: ours {side_text(new['ours'], new['unit'])} | "
            f"{ANCHOR_NAMES[anchor]} {side_text(new['theirs'], new['unit'])}"
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
