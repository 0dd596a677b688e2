"""Issue 29's targets against jax-js and issue 26's hand model (H1) against TF.js, checked on a
run's rows: met, missed (and by how much), or not measured; a miss names where each side's time
went in its profiled step."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from bench.stats import ANCHOR_NAMES, JAXJS, TFJS


@dataclass(frozen=True)
class Target:
    workload: str
    measure_prefix: str  # every row whose measure starts with it
    groups: tuple[str, ...] | None  # our backends it applies to; None: every pair with jax-js
    limit: float
    at_least: bool  # GFLOP/s: ours/anchor must reach the limit; ms: stay under it
    anchor: str = JAXJS  # the rows' other side
    theirs: tuple[str, ...] | None = None  # the anchor's backends it applies to; None: every one

    def text(self) -> str:
        where = "/".join(self.groups) if self.groups else "every pair"
        if self.theirs:
            where += f" vs {ANCHOR_NAMES[self.anchor]} on " + "/".join(self.theirs)
        sign = ">=" if self.at_least else "<="
        ratio = f"ours/{ANCHOR_NAMES[self.anchor]}"
        return f"{self.workload} {self.measure_prefix} on {where}: {ratio} {sign} {self.limit}"


TARGETS = (
    Target("W2", "train step", ("cpu", "webgpu"), 0.5, at_least=False),
    Target("W3s", "train step", ("cpu", "webgpu"), 0.5, at_least=False),
    Target("W4", "matmul", ("cpu",), 1.5, at_least=True),
    Target("I3", "predict", None, 0.7, at_least=False),
    Target("start-up", "first W3s training step", None, 0.5, at_least=False),
    # Issue 26: the pretrained backbone per frame, against TF.js on the three pairs it names.
    Target(
        "H1",
        "graph model",
        None,
        0.5,
        at_least=False,
        anchor=TFJS,
        theirs=("webgpu", "webgl", "wasm"),
    ),
)


def _top_kernels(profile: dict[str, Any] | None, count: int = 3) -> str:
    """'step 12.3 ms untimed (js_calls 2, ...); profiled 37 dispatches, 9.1 ms in kernels; top:
    name 4.1 ms (x2), ...' for a side's profiled step."""
    if not profile:
        return "no profile"
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for kernel in profile.get("kernels") or []:
        total = totals[kernel["name"]]
        total[0] += float(kernel.get("ms") or 0)
        total[1] += kernel.get("calls", 1)
    ranked = sorted(totals.items(), key=lambda item: -item[1][0])[:count]
    top = ", ".join(f"{name} {ms:.2f} ms (x{calls:.0f})" for name, (ms, calls) in ranked)
    calls = sum(calls for _, calls in totals.values())
    kernel_ms = sum(ms for ms, _ in totals.values())
    per_step = dict(profile.get("per_step") or {})
    step = f"step {per_step.pop('wall_ms'):.1f} ms unprofiled" if "wall_ms" in per_step else ""
    counters = ", ".join(f"{name} {value:g}" for name, value in per_step.items())
    step += f" ({counters}); " if counters else "; " if step else ""
    note = f" [{profile['note']}]" if profile.get("note") else ""
    eager = f" (one eager pass: {_top_kernels(profile['eager'])})" if profile.get("eager") else ""
    return (
        f"{step}profiled {calls:.0f} dispatches, {kernel_ms:.1f} ms in kernels; top: {top}{note}"
        f"{eager}"
    )


def where_time_goes(
    profiles: list[dict[str, Any]],
    workload: str,
    ours: str,
    jax: str,
    with_tfjs: bool = False,
    anchor: str = JAXJS,
) -> str | None:
    """Each side's profiled step of `workload` on (ours, jax) in one line, or None; with
    anchor=TFJS, `jax` is TF.js's backend instead."""
    sides = [("ours", "ours"), ("theirs", "TF.js"), ("jaxjs", "jax-js")]
    key = "jaxjs_backend" if anchor == JAXJS else "theirs_backend"
    for entry in profiles:
        if (entry["workload"], entry["ours_backend"], entry.get(key)) == (workload, ours, jax):
            return " | ".join(
                f"{name}: {_top_kernels(entry.get(side))}"
                for side, name in sides
                if with_tfjs or side != "theirs"
            )
    return None


# The closing note of issue 29 asks where each side's time goes here, met or not.
ALWAYS_SHOWN = (("W2", "webgpu", "webgpu"),)


def time_notes(profiles: list[dict[str, Any]]) -> list[str]:
    lines = []
    for workload, ours, jax in ALWAYS_SHOWN:
        text = where_time_goes(profiles, workload, ours, jax, with_tfjs=True)
        if text:
            lines.append(f"Where the time goes, {workload} on {ours}: {text}")
    return lines


def evaluate_targets(
    rows: list[dict[str, Any]], profiles: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """One verdict per target and row it covers: {target, row, ratio, met, bound}."""
    verdicts: list[dict[str, Any]] = []
    for target in TARGETS:
        matching = [
            row
            for row in rows
            if row["anchor"] == target.anchor
            and row["workload"] == target.workload
            and row["measure"].startswith(target.measure_prefix)
            and (target.groups is None or row["ours_backend"] in target.groups)
            and (target.theirs is None or row["theirs_backend"] in target.theirs)
        ]
        if not matching:
            verdicts.append({"target": target.text(), "row": None, "ratio": None, "met": None})
        for row in matching:
            ratio = row["ratio"]
            met = None
            if ratio is not None:
                met = ratio >= target.limit if target.at_least else ratio <= target.limit
            verdict = {
                "target": target.text(),
                "row": f"{row['measure']} {row['ours_backend']}|{row['theirs_backend']}",
                "ratio": ratio,
                "met": met,
            }
            if met is False and target.workload != "start-up":  # a first step is mostly compiling
                verdict["bound"] = where_time_goes(
                    profiles,
                    target.workload,
                    row["ours_backend"],
                    row["theirs_backend"],
                    with_tfjs=target.anchor == TFJS,
                    anchor=target.anchor,
                )
            verdicts.append(verdict)
    return verdicts


def targets_text(verdicts: list[dict[str, Any]]) -> list[str]:
    """The verdicts as lines for the terminal and the report."""
    lines = []
    for v in verdicts:
        if v["row"] is None:
            lines.append(f"{v['target']}: not measured in this run")
            continue
        state = {True: "met", False: "MISSED", None: "no ratio (a side has no number)"}[v["met"]]
        ratio = "-" if v["ratio"] is None else f"{v['ratio']:.2f}"
        lines.append(f"{v['target']} | {v['row']}: {ratio} {state}")
        if v.get("bound"):
            lines.append(f"    where the time goes: {v['bound']}")
    return lines
