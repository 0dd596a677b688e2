"""The benchmark harness runs one tiny workload end to end: ours, TF.js and jax-js measured, table
and JSON out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
TFJS = REPO_ROOT / "bench/node_modules/@tensorflow/tfjs/dist/tf.min.js"
JAXJS = REPO_ROOT / "bench/node_modules/@jax-js/jax/dist/index.js"


def test_bench_runs_w1_and_the_hand_model_on_the_cpu_pair(tmp_path: Path) -> None:
    for library in (TFJS, JAXJS):
        assert library.is_file(), (
            f"{library} is missing: `make test` installs it (cd bench && npm ci)"
        )
    command = [sys.executable, "-m", "bench", "--quick", "--workloads", "W1,H1"]
    command += ["--pairs", "cpu:cpu:wasm"]
    command += ["--steps", "3", "--warmup", "1", "--no-startup", "--output", str(tmp_path)]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "ours/TF.js" in done.stdout and "ours/jax-js" in done.stdout  # the printed table

    [path] = tmp_path.glob("bench-*.json")
    results = json.loads(path.read_text())
    assert any("Chromium" in line for line in results["meta"]["header_lines"])
    rows = [row for row in results["rows"] if row["workload"] == "W1"]
    assert [(row["measure"], row["anchor"], row["theirs_backend"]) for row in rows] == [
        ("train step, synced every step", "tfjs", "cpu"),
        ("train step, synced every step", "jax-js", "wasm"),
        ("train step, synced every 3", "tfjs", "cpu"),
        ("train step, synced every 3", "jax-js", "wasm"),
    ]
    for row in rows:
        for side in ("ours", "theirs"):
            assert row[side]["status"] == "ok", row[side]
            assert row[side]["median"] > 0
        assert row["ratio"] is not None
    # Our cpu side trains on the SIMD module, its steps replayed: the profiled step is one call.
    assert "cpu kernels: WebAssembly SIMD module" in results["meta"]["how"]["W1"]["ours"]
    kernels = results["profiles"][0]["ours"]["kernels"]
    assert [k["name"] for k in kernels] == ["replayed_step"], kernels
    # jax-js ran its jitted step: its profiler traced the step's compiled Wasm kernels.
    assert results["meta"]["how"]["W1"]["jaxjs"].startswith("jit(valueAndGrad(loss)")
    assert results["profiles"][0]["jaxjs"]["kernels"], results["profiles"][0]["jaxjs"]

    # H1, the pretrained hand model read from /models/ by both sides, to its embedding; jax-js
    # has no graph-model loader and is said to be unavailable, not left out.
    tfjs_row, jaxjs_row = [row for row in results["rows"] if row["workload"] == "H1"]
    assert tfjs_row["ours"]["status"] == tfjs_row["theirs"]["status"] == "ok", tfjs_row
    assert tfjs_row["ratio"] is not None and tfjs_row["theirs_backend"] == "cpu"
    assert jaxjs_row["theirs"]["status"] == "unavailable", jaxjs_row
    assert "cannot load TF.js graph models" in jaxjs_row["theirs"]["detail"]
    # Our replayed pass is one opaque call: the profile adds one eager pass's kernels.
    hand = results["profiles"][1]["ours"]
    assert {"conv2d", "depthwise_conv2d"} <= {k["name"] for k in hand["eager"]["kernels"]}
