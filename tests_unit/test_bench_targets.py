"""The benchmark's verdicts on issue 29's targets and its side-by-side table, from rows as run.py
writes them (no browser: the smoke test in tests_e2e runs the sides themselves)."""

from __future__ import annotations

from typing import Any

from bench.report import format_table, merged_rows
from bench.stats import JAXJS, TFJS, SideResult, row
from bench.targets import evaluate_targets


def _row(workload: str, measure: str, anchor: str, ours_ms: float, theirs_ms: float) -> Any:
    theirs = "wasm"  # the cpu|wasm|wasm group: both anchors on wasm
    flops = 2.0 * 1024**3 if workload == "W4" else None
    return row(
        workload=workload,
        measure=measure,
        pair=("cpu", theirs),
        ours=SideResult(samples_ms=[ours_ms]),
        theirs=SideResult(samples_ms=[theirs_ms]),
        anchor=anchor,
        group="cpu|wasm|wasm",
        flops=flops,
    )


def test_targets_compare_ours_with_jax_js_only() -> None:
    rows = [
        _row("W2", "train step, synced every step", TFJS, 2.0, 100.0),
        _row("W2", "train step, synced every step", JAXJS, 2.0, 5.0),  # 0.4: met
        _row("W2", "train step, synced every 10", JAXJS, 3.0, 5.0),  # 0.6: missed
        _row("W4", "matmul, synced every step", JAXJS, 50.0, 100.0),  # 2x the GFLOP/s: met
    ]
    profiles = [
        {
            "workload": "W2",
            "ours_backend": "cpu",
            "jaxjs_backend": "wasm",
            "ours": {"kernels": [{"name": "replayed_step", "ms": 2.5, "calls": 1}]},
            "jaxjs": {"kernels": [{"name": "Kernel[640]", "ms": 0.1}] * 3},
        }
    ]
    verdicts = {(v["target"].split()[0], v["row"]): v for v in evaluate_targets(rows, profiles)}
    assert verdicts["W2", "train step, synced every step cpu|wasm"]["met"] is True
    missed = verdicts["W2", "train step, synced every 10 cpu|wasm"]
    assert missed["met"] is False and abs(missed["ratio"] - 0.6) < 1e-9
    assert "replayed_step 2.50 ms (x1)" in missed["bound"]
    assert "profiled 3 dispatches" in missed["bound"]
    assert verdicts["W4", "matmul, synced every step cpu|wasm"]["met"] is True
    assert verdicts["I3", None]["met"] is None  # not run: said, not passed


def test_the_table_puts_both_anchors_on_one_line() -> None:
    rows = [
        _row("W2", "train step, synced every step", TFJS, 2.0, 10.0),
        _row("W2", "train step, synced every step", JAXJS, 2.0, 4.0),
    ]
    [line] = merged_rows(rows)
    assert (line[TFJS]["anchor"], line[JAXJS]["anchor"]) == ("tfjs", "jax-js")
    meta = {"mode": "quick", "steps": 1, "warmup": 0, "header_lines": []}
    table = format_table({"meta": meta, "rows": rows})
    [printed] = [text for text in table.splitlines() if text.startswith("W2")]
    assert "0.20 (ours 5.0x faster)" in printed and "0.50 (ours 2.0x faster)" in printed


def test_the_hand_model_target_compares_ours_with_tf_js_and_names_both_profiles() -> None:
    measure = "graph model to embedding+read back, ms per frame"
    rows = [
        _row("H1", measure, TFJS, 30.0, 20.0),  # 1.5: missed
        _row("H1", measure, JAXJS, 30.0, 1.0),  # jax-js's side does not count here
    ]
    profiles = [
        {
            "workload": "H1",
            "ours_backend": "cpu",
            "theirs_backend": "wasm",
            "jaxjs_backend": "wasm",
            "ours": {"kernels": [{"name": "replayed_step", "ms": 29.0, "calls": 1}]},
            "theirs": {"kernels": [{"name": "Conv2D", "ms": 9.0}] * 2},
        }
    ]
    [verdict] = [v for v in evaluate_targets(rows, profiles) if v["target"].startswith("H1")]
    assert "ours/TF.js <= 0.5" in verdict["target"]
    assert verdict["met"] is False and abs(verdict["ratio"] - 1.5) < 1e-9
    assert "replayed_step 29.00 ms" in verdict["bound"]
    assert "TF.js: profiled 2 dispatches, 18.0 ms in kernels" in verdict["bound"]
