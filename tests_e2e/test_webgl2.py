"""The WebGL2 backend in real Chromium (ANGLE on SwiftShader): ops, layouts and training."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests_e2e import webgl2_trajectories
from tests_e2e.engine_page import EnginePage
from tests_e2e.op_oracle import assert_op_table_matches

# float32 textures, highp shaders: what is left is the order of float32 sums.
F32_RTOL = 1e-4


@pytest.fixture(scope="module")
def page_query() -> str:
    return "?backend=webgl2"


def test_capabilities_are_probed(engine_page: EnginePage) -> None:
    caps = engine_page.run("pib.capabilities()")
    assert caps["backend"] == "webgl2"
    assert caps["float32_render"] is True
    assert caps["highp"] is True
    assert caps["max_texture_size"] >= 4096


def test_op_table_matches_numpy_on_float32(engine_page: EnginePage) -> None:
    worst = assert_op_table_matches(engine_page, rtol=F32_RTOL)
    print("webgl2 f32 worst relative error per case:", worst)


TRAJECTORY_ATOL = 1e-3


@pytest.fixture(scope="module")
def trajectories(engine_page: EnginePage) -> EnginePage:
    """The page with tests_e2e/webgl2_trajectories.py's functions defined in its namespace."""
    engine_page.run(Path(webgl2_trajectories.__file__).read_text())
    return engine_page


@pytest.mark.parametrize("name", ["xor", "mlp", "cnn"])
def test_twenty_step_losses_match_cpu(trajectories: EnginePage, name: str) -> None:
    expected = webgl2_trajectories.on_cpu(name)
    got = trajectories.run(f"await trajectory({name!r})")
    assert len(got["losses"]) == len(expected["losses"]) == 20
    np.testing.assert_allclose(got["losses"], expected["losses"], rtol=0, atol=TRAJECTORY_ATOL)


def test_two_hundred_steps_do_not_grow_memory(trajectories: EnginePage) -> None:
    """Tensors, textures and GPU bytes after step 10 are the same after step 200."""
    counts = trajectories.run(
        "import gc\n"
        "gc.collect()  # earlier tests' models must not be collected mid-run\n"
        "model, x, y, batch = setup('xor')\n"
        "backend = pib.runtime.current_backend()\n"
        "seen = {}\n"
        "def look(epoch, logs):\n"
        "    if epoch in (9, 199):\n"
        "        seen[epoch] = {**pib.memory(), **backend.memory_stats()}\n"
        "calls = backend.js_calls\n"
        "await model.fit(x, y, epochs=200, batch_size=batch, shuffle=False,\n"
        "                callbacks=[pib.LambdaCallback(on_epoch_end=look)])\n"
        "seen['calls_per_step'] = (backend.js_calls - calls) / 200\n"
        "seen"
    )
    early, late = counts["9"], counts["199"]
    for key in ("num_tensors", "num_bytes", "textures", "gpu_bytes"):
        assert late[key] == early[key], (key, early, late)
    # One flush per step, plus the epoch-end reads of loss, metric and NaN flag (1 step/epoch).
    assert counts["calls_per_step"] <= 5, counts


def test_replayed_steps_cost_O1_python_to_js_calls(trajectories: EnginePage) -> None:
    """After the recorded steps, a step is one JS call whatever the model (plus the epoch-end
    reads of loss, metrics and NaN flag: 2 or 3 per epoch of 8 steps)."""
    calls = trajectories.run(
        "backend = pib.runtime.current_backend()\n"
        "per_step = {}\n"
        "for name in ('mlp', 'cnn'):\n"
        "    model, x, y, _ = setup(name)\n"
        "    marks = {}\n"
        "    def mark(epoch, logs):\n"
        "        marks[epoch] = (backend.js_calls, backend.steps_replayed)\n"
        "    await model.fit(x, y, epochs=4, batch_size=len(x) // 8, shuffle=False,\n"
        "                    callbacks=[pib.LambdaCallback(on_epoch_end=mark)])\n"
        "    per_step[name] = (marks[3][0] - marks[0][0]) / 24\n"
        "    per_step[name + '_replayed'] = marks[3][1] - marks[0][1]\n"
        "per_step"
    )
    print("webgl2 Python->JS calls per step:", calls)
    for name in ("mlp", "cnn"):
        assert calls[f"{name}_replayed"] == 24
        assert calls[name] <= 1 + 3 / 8 + 1e-9


LAYOUT_CHECK = """
from py_in_browser.backends.webgl2.layout import TextureTooLargeError
rng = np.random.default_rng(0)
a = rng.standard_normal((3, 300)).astype(np.float32)  # 300 > 64 along one side
b = rng.standard_normal((300, 5)).astype(np.float32)
await pib.init(backend="webgl2", limits={"max_texture_size": 64})
try:
    caps = pib.capabilities()
    with pib.tidy():
        ta, tb = pib.tensor(a), pib.tensor(b)
        got = {
            "matmul": await (ta @ tb).numpy(),
            "sum": await pib.sum(ta, axis=1).numpy(),
            "transpose": await pib.transpose(ta).numpy(),
            "relu": await pib.relu(ta).numpy(),
        }
    refused = []
    for make in (lambda: pib.tensor(np.zeros((200, 100), np.float32)),
                 lambda: pib.broadcast_to(pib.tensor([1.0]), (200, 100))):
        try:
            make()
        except TextureTooLargeError as exc:
            refused.append(str(exc))
finally:
    await pib.init(backend="webgl2")
{"caps": caps, "got": got, "refused": refused}
"""


def test_tensors_wider_than_max_texture_size_are_relaid_out(engine_page: EnginePage) -> None:
    result = engine_page.run(LAYOUT_CHECK)
    assert result["caps"]["max_texture_size"] == 64
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 300)).astype(np.float32)
    b = rng.standard_normal((300, 5)).astype(np.float32)
    want = {"matmul": a @ b, "sum": a.sum(axis=1), "transpose": a.T, "relu": np.maximum(a, 0)}
    for key, value in want.items():
        np.testing.assert_allclose(result["got"][key], value, rtol=F32_RTOL, atol=F32_RTOL)
    assert len(result["refused"]) == 2
    assert all("MAX_TEXTURE_SIZE 64" in message for message in result["refused"])


BLOCK_MATMULS = """
from py_in_browser.backends.webgl2 import backend as webgl2_backend
from py_in_browser.ops import call
rng = np.random.default_rng(7)
cases = {  # name: (a, b, transpose_b); M a multiple of 4, K of 4, N of 8 (4x2) or only 4 (4x1)
    "nn_batched": ((2, 8, 12), (2, 12, 16), False),
    "nt_batched": ((2, 8, 12), (2, 16, 12), True),
    "nn_n12": ((8, 12), (12, 12), False),
    "nt_n12": ((4, 8), (12, 8), True),
}
arrays = {name: [rng.standard_normal(s).astype(np.float32) for s in shapes[:2]]
          for name, shapes in cases.items()}
got = {}
for buffers in (8, 4):
    await pib.init(backend="webgl2", limits={"max_draw_buffers": buffers})
    backend = pib.runtime.current_backend()
    draw, blocks = backend._draw, []
    def spy(key, *args):
        if key.startswith("matmul_block:"):
            blocks.append(key)
        draw(key, *args)
    backend._draw = spy
    webgl2_backend.BLOCK_MATMUL_AT = 0
    try:
        for name, (a, b) in arrays.items():
            product = call("matmul", pib.tensor(a), pib.tensor(b), transpose_a=False,
                           transpose_b=cases[name][2])
            got[f"{name}@{buffers}"] = await product.numpy()
    finally:
        webgl2_backend.BLOCK_MATMUL_AT = 2**21
    got[f"blocks@{buffers}"] = blocks
await pib.init(backend="webgl2")
got
"""


def test_block_matmuls_match_numpy(engine_page: EnginePage) -> None:
    check_block_matmuls(engine_page)


def check_block_matmuls(engine_page: EnginePage) -> None:
    """Products run as 4x2 and 4x1 blocks (threshold lowered so small shapes take that path),
    batched, with b plain and transposed, against numpy."""
    got = engine_page.run(BLOCK_MATMULS)
    rng = np.random.default_rng(7)
    cases = {
        "nn_batched": ((2, 8, 12), (2, 12, 16), False),
        "nt_batched": ((2, 8, 12), (2, 16, 12), True),
        "nn_n12": ((8, 12), (12, 12), False),
        "nt_n12": ((4, 8), (12, 8), True),
    }
    for name, (sa, sb, transpose_b) in cases.items():
        a, b = (rng.standard_normal(s).astype(np.float32) for s in (sa, sb))
        want = a @ (np.swapaxes(b, -1, -2) if transpose_b else b)
        for buffers in (8, 4):
            np.testing.assert_allclose(got[f"{name}@{buffers}"], want, rtol=F32_RTOL, atol=1e-5)
    assert got["blocks@8"] == [
        f"matmul_block:{v}" for v in ("nn_4x2", "nt_4x2", "nn_4x1", "nt_4x1")
    ]
    assert got["blocks@4"] == [
        f"matmul_block:{v}" for v in ("nn_4x1", "nt_4x1", "nn_4x1", "nt_4x1")
    ]


PRIMITIVES_IN_PAGE = "from py_in_browser.ops import OPS\nsorted(OPS)"


def _check_profile_table(report: dict[str, Any], primitives: set[str], extra: set[str]) -> None:
    rows = report["kernels"]
    assert rows, report
    names = {row["name"] for row in rows}
    assert names <= primitives | extra, names - primitives - extra
    assert all(row["calls"] >= 1 and row["ms"] >= 0 for row in rows), rows
    assert report["kernel_ms"] == pytest.approx(sum(row["ms"] for row in rows), rel=1e-9)
    assert report["discarded_timer_results"] == 0


def test_profile_reports_per_kernel_times_and_their_source(engine_page: EnginePage) -> None:
    """Eager ops: one row per primitive drawn, times from the timing source the context has
    (GPU timer queries with EXT_disjoint_timer_query_webgl2, else wall time around each draw)."""
    primitives = set(engine_page.run(PRIMITIVES_IN_PAGE))
    report = engine_page.run(
        "await pib.init(backend='webgl2')\n"
        "async def work():\n"
        "    with pib.tidy():\n"
        "        a = pib.tensor(np.ones((16, 16), np.float32))\n"
        "        await pib.sum(pib.relu(a @ a), axis=1).numpy()\n"
        "report = await pib.profile(work)\n"
        "report['timer_query'] = pib.capabilities()['timer_query']\n"
        "report"
    )
    print("webgl2 profile:", report)
    _check_profile_table(report, primitives, set())
    assert {"matmul", "relu", "reduce_sum"} <= {row["name"] for row in report["kernels"]}
    want = "gpu-timer-query" if report["timer_query"] else "wall"
    assert report["timing"] == want
    if want == "wall":  # wall times of draws inside the profiled function fit in its wall time
        assert report["kernel_ms"] <= report["wall_ms"]
    assert report["bytes_uploaded"] >= 16 * 16 * 4
    assert report["bytes_downloaded"] >= 16 * 4


def test_profile_breaks_a_replayed_step_down_by_kernel(trajectories: EnginePage) -> None:
    """The same 6 MLP steps profiled eagerly and replayed: the replayed draws are timed under
    their primitives' names too (same calls per primitive), plus the replay's copies."""
    primitives = set(trajectories.run(PRIMITIVES_IN_PAGE))
    result = trajectories.run(
        "from py_in_browser import replay\n"
        "backend = pib.runtime.current_backend()\n"
        "out = {}\n"
        "for mode in (False, True):\n"
        "    replay.ENABLED = mode\n"
        "    model, x, y, batch = setup('mlp')\n"
        "    replayed = backend.steps_replayed\n"
        "    out[str(mode)] = await pib.profile(lambda: model.fit(\n"
        "        x, y, epochs=3, batch_size=batch, shuffle=False))\n"
        "    out[str(mode) + '_replayed'] = backend.steps_replayed - replayed\n"
        "replay.ENABLED = True\n"
        "out"
    )
    eager, replayed = result["False"], result["True"]
    print("webgl2 profile of 6 eager MLP steps:", eager["kernels"])
    print("webgl2 profile of the same steps, 4 replayed:", replayed["kernels"])
    assert result["False_replayed"] == 0 and result["True_replayed"] >= 1
    _check_profile_table(eager, primitives, set())
    _check_profile_table(replayed, primitives, {"replay_copy"})
    calls = {row["name"]: row["calls"] for row in replayed["kernels"]}
    assert calls.pop("replay_copy") >= result["True_replayed"]
    assert calls == {row["name"]: row["calls"] for row in eager["kernels"]}
