"""Per-side summaries (median, min, max) and the comparison of one result row: ours against its
anchor (TF.js or jax-js)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

# A side's outcome: all steps measured, fewer (budget spent), or no number and why.
OK, BUDGET, FAILED, TIMEOUT, UNAVAILABLE = "ok", "budget", "failed", "timeout", "unavailable"
# A row's anchor, the side ours is compared with, as the JSON names it and as people do.
TFJS, JAXJS = "tfjs", "jax-js"
ANCHOR_NAMES = {TFJS: "TF.js", JAXJS: "jax-js"}


@dataclass
class SideResult:
    """What one side (ours or TF.js) produced for one row; samples in ms (per step)."""

    status: str = OK
    detail: str | None = None
    samples_ms: list[float] = field(default_factory=list)

    def fail(self, status: str, detail: str) -> None:
        if self.status in (OK, BUDGET):
            self.status, self.detail = status, detail


def _values(samples_ms: list[float], flops: float | None) -> list[float]:
    """The row's unit: ms per step, or GFLOP/s when the work per step is known."""
    if flops is None:
        return samples_ms
    return [flops / (ms / 1000.0) / 1e9 for ms in samples_ms if ms > 0]


def summarize(side: SideResult, flops: float | None) -> dict[str, Any]:
    values = _values(side.samples_ms, flops)
    summary: dict[str, Any] = {
        "status": side.status,
        "detail": side.detail,
        "n": len(values),
        "median": statistics.median(values) if values else None,
        "min": min(values) if values else None,
        "max": max(values) if values else None,
    }
    return {**summary, "samples_ms": side.samples_ms}


def compare(
    ours: dict[str, Any], theirs: dict[str, Any], higher_is_better: bool, anchor: str
) -> dict[str, Any]:
    """ratio = ours/anchor of the medians; `better` and `speedup` say who wins and by how much."""
    if not ours["median"] or not theirs["median"]:
        return {"ratio": None, "better": None, "speedup": None}
    ratio = ours["median"] / theirs["median"]
    ours_wins = ratio > 1 if higher_is_better else ratio < 1
    speedup = ratio if ours_wins == higher_is_better else 1 / ratio
    return {
        "ratio": ratio,
        "better": "ours" if ours_wins else ANCHOR_NAMES[anchor],
        "speedup": speedup,
    }


def row(
    *,
    workload: str,
    measure: str,
    pair: tuple[str, str],
    ours: SideResult,
    theirs: SideResult,
    anchor: str = TFJS,
    group: str = "",
    flops: float | None = None,
) -> dict[str, Any]:
    """One comparison, as it goes into the JSON: ours on pair[0] against `anchor` on pair[1].
    `group` names the backends measured together ("cpu|wasm|wasm"): rows of one workload, measure
    and group share our samples and make one line of the printed table."""
    ours_summary, theirs_summary = summarize(ours, flops), summarize(theirs, flops)
    return {
        "workload": workload,
        "measure": measure,
        "unit": "GFLOP/s" if flops else "ms",
        "ours_backend": pair[0],
        "theirs_backend": pair[1],
        "anchor": anchor,
        "group": group or "|".join(pair),
        "ours": ours_summary,
        "theirs": theirs_summary,
        **compare(ours_summary, theirs_summary, flops is not None, anchor),
    }
