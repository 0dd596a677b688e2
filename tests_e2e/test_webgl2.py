"""The WebGL2 backend in real Chromium (ANGLE on SwiftShader): ops, layouts and training."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests_e2e import webgl2_trajectories
from tests_e2e.engine_page import EnginePage, PythonError
from tests_e2e.first_step_model import W3S_FIRST_STEP, indented
from tests_e2e.non_finite_steps import check_bad_step_keeps_the_last_good_weights
from tests_e2e.op_oracle import LONG_SUMS, assert_op_table_matches, assert_special_values_match

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


def test_a_small_cnns_first_step_draws_only_programs_drawn_ahead(engine_page: EnginePage) -> None:
    """Once ready, the bridge has linked and drawn once every program first_step.py lists, and
    those are all the benchmark's W3s model draws in its first step (32x32 RGB, two relu
    convolutions with max pooling, two dense layers, softmax cross-entropy on class labels,
    Adam): the step finishes no program of its own (on SwiftShader, ~25 ms each), sends no draw
    of a program the list lacks (a page whose init ran no self-test, a second visit, would
    finish it in the step), and draws every program drawn ahead (one it does not draw delays
    it: the GPU runs them in order). Draws are counted as sent to the bridge: a draw a fused
    one made redundant is dropped before (epilogues.dead_draws)."""
    finished_in_step, not_listed, listed_not_drawn = engine_page.run(
        """
from py_in_browser import layers, runtime
from py_in_browser.backends.webgl2 import first_step, wire
backend = runtime.current_backend()
engine = backend.queue.engine
before = set(engine.programs.keys())
sent = set()
payload = wire.payload
def spy(programs, commands, *args):
    sent.update(c[wire.DRAW_KEY] for c in commands if c[0] == wire.DRAW)
    return payload(programs, commands, *args)
wire.payload = spy
try:
"""
        + indented(W3S_FIRST_STEP, 4)
        + """finally:
    wire.payload = payload
listed = [key for key, _, _ in first_step.warm_draws(backend.draw_buffers, backend.memory.compensated)]
[[engine.toDrawWarm.length, sorted(set(engine.programs.keys()) - before)],
 sorted(sent - set(listed)), [key for key in listed if key not in sent]]
"""
    )
    assert finished_in_step == [0, []]
    assert not_listed == []
    assert listed_not_drawn == []


def test_training_compiles_no_program_after_the_warm_up(engine_page: EnginePage) -> None:
    """init's warm-up handed the bridge every program a CNN's training step draws, the
    optimizer's fused updates included although its learning rate is not the default
    (constants are uniforms), and the bridge linked them all while idle."""
    compiled_late = engine_page.run(
        """
import asyncio
from py_in_browser import runtime
from py_in_browser.testing import workloads
backend = runtime.current_backend()
while backend.queue.engine.warmUpLeft():
    await asyncio.sleep(0.02)
before = set(backend.queue.known_programs)
x, y = workloads.synthetic_images(8, size=8, seed=0)
model = workloads.small_cnn(size=8, seed=0)
await model.fit(x, y, epochs=1, batch_size=4)
sorted(set(backend.queue.known_programs) - before)
"""
    )
    assert compiled_late == []


def test_broadcast_views_compute_and_read_back_like_numpy(engine_page: EnginePage) -> None:
    """Expands along leading and trailing dims are views read in place (no draw); kernels and
    read-back see numpy's broadcast, also a whole-texel kernel reading a bias's period of texels
    (a "+periodic" program)."""
    got = engine_page.run(
        """
column = pib.tensor(np.arange(6, dtype=np.float32).reshape(1, 6, 1))
rows = pib.broadcast_to(column, (2, 6, 3))
total = rows + pib.tensor(np.ones((2, 6, 3), np.float32))
batch = pib.tensor(np.arange(32 * 64, dtype=np.float32).reshape(32, 64))
bias = pib.tensor(np.arange(64, dtype=np.float32) / 8)
[await rows.numpy(), await total.numpy(), await pib.softmax(pib.reshape(rows, (12, 3))).numpy(),
 await (batch + bias).numpy()]
"""
    )
    column = np.arange(6, dtype=np.float32).reshape(1, 6, 1)
    rows = np.broadcast_to(column, (2, 6, 3))
    np.testing.assert_array_equal(got[0], rows)
    np.testing.assert_array_equal(got[1], rows + 1)
    np.testing.assert_allclose(got[2], np.full((12, 3), 1 / 3), rtol=1e-6)
    batch = np.arange(32 * 64, dtype=np.float32).reshape(32, 64)
    np.testing.assert_array_equal(got[3], batch + np.arange(64, dtype=np.float32) / 8)


def test_op_table_matches_numpy_on_float32(engine_page: EnginePage) -> None:
    worst = assert_op_table_matches(engine_page, rtol=F32_RTOL)
    print("webgl2 f32 worst relative error per case:", worst)


def test_special_values_flow_as_in_numpy(engine_page: EnginePage) -> None:
    assert_special_values_match(engine_page)


@pytest.mark.parametrize("injected", ["inf", "nan"])
def test_a_non_finite_replayed_step_keeps_the_last_good_weights(
    engine_page: EnginePage, injected: str
) -> None:
    check_bad_step_keeps_the_last_good_weights(engine_page, injected)


def test_float64_is_the_same_clear_type_error_as_on_webgpu(engine_page: EnginePage) -> None:
    with pytest.raises(PythonError, match="TypeError: webgl2 has no float64: create the tensor"):
        engine_page.run("pib.tensor(np.zeros(3), dtype='float64')")
    with pytest.raises(PythonError, match="TypeError: cast: webgl2 has no float64"):
        engine_page.run("pib.cast(pib.zeros((3,)), 'float64')")


def test_int32_beyond_exact_float_storage_is_refused(engine_page: EnginePage) -> None:
    with pytest.raises(PythonError, match=r"exact only up to 16777216; got 16777217"):
        engine_page.run("pib.tensor([1, 2**24 + 1], dtype='int32')")
    got = engine_page.run("(await pib.tensor([-(2**24), 2**24], dtype='int32').numpy()).tolist()")
    assert got == [-(2**24), 2**24]


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


# Chromium keeps only a few WebGL contexts of a worker live and loses the oldest beyond them
# (from about the fifth pib.init in a row here, the active backend's among them at times): a
# test that starts a webgl2 backend of its own closes the one it replaces.
REINIT = """
async def reinit(**options):
    replaced = pib.runtime.current_backend()
    await pib.init(backend="webgl2", **options)
    replaced.close()
"""
LAYOUT_CHECK = (
    REINIT
    + """
from py_in_browser.backends.webgl2.texture_layout import TextureTooLargeError
rng = np.random.default_rng(0)
a = rng.standard_normal((3, 300)).astype(np.float32)  # 300 > 64 along one side
b = rng.standard_normal((300, 5)).astype(np.float32)
await reinit(limits={"max_texture_size": 64})
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
    await reinit()
{"caps": caps, "got": got, "refused": refused}
"""
)


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


# (op, input shapes, attrs, block program at 8 draw buffers): rows (M, or the output width) a
# multiple of 4; 8 columns per block at 8 buffers where N (CO) is a multiple of 8, else 4;
# inputs of 1024+ elements or with 4k channels are RGBA, which whole-texel kernels need; 1 to 3
# input channels read texel windows, a filter row's at once (c<n>[s<stride>]k<filter width>),
# including left of the input.
BLOCK_CASES: list[tuple[str, tuple[tuple[int, ...], ...], dict[str, Any], str]] = [
    ("matmul", ((2, 8, 12), (2, 12, 16)), {"transpose_b": False}, "matmul_block:nn_4x2"),
    ("matmul", ((2, 8, 12), (2, 16, 12)), {"transpose_b": True}, "matmul_block:nt_4x2"),
    ("matmul", ((8, 12), (12, 12)), {"transpose_b": False}, "matmul_block:nn_4x1"),
    ("matmul", ((4, 8), (12, 8)), {"transpose_b": True}, "matmul_block:nt_4x1"),
    (
        "conv2d",
        ((1, 12, 32, 3), (3, 3, 3, 16)),
        {"pads": ((1, 1), (1, 1))},
        "conv2d_block:c3k3_4x2",
    ),
    (
        "conv2d",
        ((1, 12, 32, 3), (3, 3, 3, 16)),
        {"pads": ((1, 1), (1, 1)), "strides": (2, 2)},
        "conv2d_block:c3s2k3_4x2",
    ),
    (
        "conv2d",
        ((1, 12, 32, 5), (3, 3, 5, 16)),
        {"pads": ((1, 1), (1, 1)), "strides": (2, 2)},
        "conv2d_block:scalar_4x2",
    ),
    ("conv2d", ((2, 12, 24, 2), (3, 4, 2, 8)), {"pads": ((1, 1), (2, 1))}, "conv2d_block:c2k4_4x2"),
    ("conv2d", ((2, 5, 4, 8), (3, 3, 8, 8)), {"pads": ((1, 1), (1, 1))}, "conv2d_block:vec_4x2"),
    (
        "conv2d",
        ((1, 8, 15, 4), (2, 2, 4, 12)),
        {"pads": ((0, 1), (0, 1)), "strides": (2, 2)},
        "conv2d_block:vec_4x1",
    ),
]
BLOCKS = (
    REINIT
    + """
from py_in_browser.backends.webgl2 import rewrites as webgl2_rewrites
from py_in_browser.ops import call
rng = np.random.default_rng(7)
inputs = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _, shapes, _, _ in CASES]
got = {"inputs": inputs}
for buffers in (8, 4):
    await reinit(limits={"max_draw_buffers": buffers})
    backend = pib.runtime.current_backend()
    draw, programs = backend.queue.draw, []
    def spy(key, *args):
        if "_block:" in key:
            programs.append(key)
        draw(key, *args)
    backend.queue.draw = spy
    threshold, webgl2_rewrites.BLOCKS_AT = webgl2_rewrites.BLOCKS_AT, 0
    try:
        results = []
        for (op, _, attrs, _), arrays in zip(CASES, inputs):
            defaults = {"transpose_a": False} if op == "matmul" else {"strides": (1, 1)}
            out = call(op, *(pib.tensor(a) for a in arrays), **{**defaults, **attrs})
            results.append(await out.numpy())
    finally:
        webgl2_rewrites.BLOCKS_AT = threshold
    got[buffers] = {"results": results, "programs": programs}
await reinit()
got
"""
)


def _conv2d(x: np.ndarray, w: np.ndarray, strides: Any, pads: Any) -> np.ndarray:
    xp = np.pad(x.astype(np.float64), ((0, 0), pads[0], pads[1], (0, 0)))
    (kh, kw), (sh, sw) = w.shape[:2], strides
    oh, ow = (xp.shape[1] - kh) // sh + 1, (xp.shape[2] - kw) // sw + 1
    out = np.zeros((x.shape[0], oh, ow, w.shape[3]))
    for i in range(kh):
        for j in range(kw):
            out += xp[:, i : i + sh * oh : sh, j : j + sw * ow : sw, :] @ w[i, j]
    return out


def check_blocks(engine_page: EnginePage) -> None:
    """Products and convolutions run as 4x2 and 4x1 blocks (threshold lowered so small shapes
    take that path; 4 draw buffers via limits), against numpy: batched, b plain and transposed,
    scalar and whole-texel input channels, strides and edge padding."""
    got = engine_page.run(f"CASES = {BLOCK_CASES!r}\n{BLOCKS}")
    for index, (op, _, attrs, _) in enumerate(BLOCK_CASES):
        a, b = (np.asarray(x, np.float32) for x in got["inputs"][index])
        if op == "matmul":
            want = a @ (np.swapaxes(b, -1, -2) if attrs["transpose_b"] else b)
        else:
            want = _conv2d(a, b, attrs.get("strides", (1, 1)), attrs["pads"])
        for buffers in ("8", "4"):
            result = got[buffers]["results"][index]
            np.testing.assert_allclose(result, want, rtol=F32_RTOL, atol=1e-5, err_msg=op)
    assert got["8"]["programs"] == [case[3] for case in BLOCK_CASES]
    assert got["4"]["programs"] == [case[3][:-1] + "1" for case in BLOCK_CASES]


def test_block_kernels_match_numpy(engine_page: EnginePage) -> None:
    check_blocks(engine_page)


# Python that keeps every command the backend sends to the bridge from here on, in `sent`.
SENT_COMMANDS = """
import json
backend = pib.runtime.current_backend()
backend.flush()
sent = []
engine_run = backend.queue.engine.run
def spy(payload, staging):
    sent.extend(json.loads(payload)["commands"])
    return engine_run(payload, staging)
backend.queue.engine.run = spy
"""

EPILOGUES = (
    SENT_COMMANDS
    + """
from py_in_browser.backends.webgl2 import rewrites as webgl2_rewrites
rng = np.random.default_rng(5)
x = rng.standard_normal((1, 8, 48, 3)).astype(np.float32)  # RGBA: 1024+ elements
w = rng.standard_normal((3, 3, 3, 8)).astype(np.float32)
b = rng.standard_normal((8,)).astype(np.float32)
a = rng.standard_normal((8, 12)).astype(np.float32)
k = rng.standard_normal((12, 16)).astype(np.float32)
c = rng.standard_normal((16,)).astype(np.float32)
threshold, webgl2_rewrites.BLOCKS_AT = webgl2_rewrites.BLOCKS_AT, 0
try:
    xs, ws, bs = pib.tensor(x), pib.tensor(w), pib.tensor(b)
    conv = pib.relu(pib.conv2d(xs, ws, padding="same") + bs)
    conv_bias = pib.conv2d(xs, ws, padding="same") + bs
    raw = pib.conv2d(xs, ws, padding="same")
    raw_too = raw + bs  # raw is read back below: its draws must stay
    at, kt, ct = pib.tensor(a), pib.tensor(k), pib.tensor(c)  # held, as a layer's are
    dense = pib.relu(pib.matmul(at, kt) + ct)
    got = [await t.numpy() for t in (conv, conv_bias, raw, raw_too, dense)]
finally:
    webgl2_rewrites.BLOCKS_AT = threshold
    backend.queue.engine.run = engine_run
{"got": got, "x": x, "w": w, "b": b, "a": a, "k": k, "c": c,
 "draws": [command[1] for command in sent if command[0] == "draw"]}
"""
)


def check_epilogues(engine_page: EnginePage) -> None:
    """conv2d / matmul + bias (+ relu) as a block draw adding the bias and an interleave applying
    relu; the unfused draws are left out where nothing reads them, kept where something does.
    Against numpy."""
    result = engine_page.run(EPILOGUES)
    x, w, b, a, k, c = (np.asarray(result[n], np.float32) for n in "xwbakc")
    conv = _conv2d(x, w, (1, 1), ((1, 1), (1, 1)))
    want = [np.maximum(conv + b, 0), conv + b, conv, conv + b, np.maximum(a @ k + c, 0)]
    for got, expected in zip(result["got"], want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=F32_RTOL, atol=1e-4)
    draws = result["draws"]
    blocks = [d for d in draws if "_block:" in d]
    assert blocks == [
        "conv2d_block:c3k3_4x2.bias",  # relu(conv + b): the unbiased block and its interleaves go
        "conv2d_block:c3k3_4x2.bias",  # conv + b
        "conv2d_block:c3k3_4x2",  # raw, read back
        "conv2d_block:c3k3_4x2.bias",  # raw + b
        "matmul_block:nn_4x2.bias",
    ], draws
    # Outputs and targets of one matrix row per texture row: the division-free interleave.
    assert draws.count("block_interleave:aligned_4x2.relu") == 2
    assert draws.count("block_interleave:aligned_4x2") == 3  # conv + b, raw, raw + b
    assert not {"binary4:add", "unary4:relu"} & set(draws)


def test_a_layers_bias_and_relu_run_inside_its_block_kernels(engine_page: EnginePage) -> None:
    check_epilogues(engine_page)


POOLED = (
    SENT_COMMANDS
    + """
from py_in_browser.backends.webgl2 import rewrites as webgl2_rewrites
rng = np.random.default_rng(6)
x = rng.standard_normal((2, 8, 32, 3)).astype(np.float32)  # RGBA: 1024+ elements
w1 = rng.standard_normal((3, 3, 3, 8)).astype(np.float32)
w2 = rng.standard_normal((3, 3, 8, 8)).astype(np.float32)
b1, b2 = rng.standard_normal((2, 8)).astype(np.float32)
threshold, webgl2_rewrites.BLOCKS_AT = webgl2_rewrites.BLOCKS_AT, 0
xs, w1s, w2s, b1s, b2s = (pib.tensor(v) for v in (x, w1, w2, b1, b2))
def layers():  # conv1 with relu (3 channels: c3 blocks), conv2 without (8: vec blocks)
    h = pib.max_pool2d(pib.relu(pib.conv2d(xs, w1s, padding="same") + b1s))
    return pib.max_pool2d(pib.conv2d(h, w2s, padding="same") + b2s)
forward = pib.tidy(layers)  # frees the intermediates, as predict does
try:
    unfused = await forward().numpy()
    eager = len(sent)
    backend.forward_only = True  # as predict sets it
    try:
        fused = forward()
    finally:
        backend.forward_only = False
    got = await fused.numpy()
finally:
    webgl2_rewrites.BLOCKS_AT = threshold
    backend.queue.engine.run = engine_run
{"unfused": unfused, "got": got, "x": x, "w1": w1, "w2": w2, "b1": b1, "b2": b2,
 "draws": [command[1] for command in sent[eager:] if command[0] == "draw"]}
"""
)


def _max_pool(x: np.ndarray) -> np.ndarray:
    n, h, w, c = x.shape
    return x.reshape(n, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))


def test_a_forward_pass_pools_inside_its_convolution_kernels(engine_page: EnginePage) -> None:
    """In a forward pass (predict's hint), conv (+ bias, relu) then a 2 x 2 max-pool is one
    block draw pooling what it computes and a quarter-size interleave: the same numbers as the
    unfused draws, which are left out. Against numpy too."""
    result = engine_page.run(POOLED)
    x, w1, w2, b1, b2 = (np.asarray(result[n], np.float32) for n in ("x", "w1", "w2", "b1", "b2"))
    pads = ((1, 1), (1, 1))
    h = _max_pool(np.maximum(_conv2d(x, w1, (1, 1), pads) + b1, 0))
    want = _max_pool(_conv2d(h, w2, (1, 1), pads) + b2)
    np.testing.assert_allclose(result["unfused"], want, rtol=F32_RTOL, atol=1e-4)
    np.testing.assert_array_equal(result["got"], result["unfused"])
    draws = result["draws"]
    assert [d for d in draws if "_block:" in d] == [
        "conv2d_block:c3k3_4x2.maxpool.bias",
        "conv2d_block:vec_4x2.maxpool.bias",
    ], draws
    assert draws.count("block_interleave:2x2.relu") == 1
    assert draws.count("block_interleave:2x2") == 1
    unpooled = ("pool", "block_interleave:4x2", "block_interleave:aligned_4x2")
    assert not any(d.startswith(unpooled) for d in draws), draws


def test_predictions_are_replayed_with_the_eager_numbers(engine_page: EnginePage) -> None:
    """predict records its forward pass (pooling fused into the convolutions: block-sized
    layers) and replays it from the third batch of a shape, the input tensor lent to it: the
    same numbers as the eager pass with replays off, and the input unchanged."""
    outcome = engine_page.run(
        """
from py_in_browser import layers, replay
from py_in_browser.backends.webgl2 import rewrites as webgl2_rewrites
rng = np.random.default_rng(8)
model = pib.Sequential([
    layers.Conv2D(8, 3, activation="relu", padding="same", input_shape=(8, 32, 3)),
    layers.MaxPool2D(2), layers.Flatten(), layers.Dense(4)], seed=8)
data = rng.uniform(-1, 1, (2, 8, 32, 3)).astype(np.float32)
x = pib.tensor(data)  # lent to the replays (recording.lendable), not copied
threshold, webgl2_rewrites.BLOCKS_AT = webgl2_rewrites.BLOCKS_AT, 0
try:
    replay.ENABLED = False
    eager = await (await model.predict(x)).numpy()
    replay.ENABLED = True
    before = pib.memory()["steps_replayed"]
    got = [await (await model.predict(x)).numpy() for _ in range(4)]
finally:
    replay.ENABLED = True
    webgl2_rewrites.BLOCKS_AT = threshold
[pib.memory()["steps_replayed"] - before, all(np.array_equal(eager, g) for g in got),
 np.array_equal(await x.numpy(), data)]
"""
    )
    assert outcome == [2, True, True]


def test_replayed_predictions_read_the_weights_training_left(engine_page: EnginePage) -> None:
    """predict's recordings draw what they derive from the weights: the last layer's (128, 10)
    weight is padded to whole texels for its product (rewrites.pad_matrix, cached per texture).
    A copy cached before a recording began was read by every replay, so predict after more
    training used that layer's old weights (0.3 off at a scale of 8): against numpy on the
    weights training left."""
    after, reference = engine_page.run(
        """
from py_in_browser import layers
rng = np.random.default_rng(12)
x = rng.standard_normal((256, 784)).astype(np.float32)
y = rng.integers(0, 10, 256)
model = pib.Sequential([layers.Dense(128, activation="relu"), layers.Dense(10)], seed=12)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
await model.fit(x, y, epochs=1, batch_size=64, verbose=0)
for _ in range(4):  # recorded twice, then replayed
    await (await model.predict(x[:64], batch_size=64)).numpy()
await model.fit(x, y, epochs=2, batch_size=64, verbose=0)
after = await (await model.predict(x[:64], batch_size=64)).numpy()
w0, b0, w1, b1 = await model.get_weights()
[after, np.maximum(x[:64] @ w0 + b0, 0) @ w1 + b1]
"""
    )
    np.testing.assert_allclose(after, reference, rtol=F32_RTOL, atol=1e-4)


SPLIT_SUMS = (
    SENT_COMMANDS
    + """
rng = np.random.default_rng(9)
a = rng.standard_normal((1, 2048)).astype(np.float32)
k = rng.standard_normal((2048, 16)).astype(np.float32)
c = rng.standard_normal((16,)).astype(np.float32)
try:
    at, kt, ct = pib.tensor(a), pib.tensor(k), pib.tensor(c)
    dense = pib.relu(pib.matmul(at, kt) + ct)  # a batch-1 Dense layer
    raw = pib.matmul(at, kt)
    raw_relu = pib.relu(raw)  # raw is read back below: its sum stays
    got = [await t.numpy() for t in (dense, raw, raw_relu)]
finally:
    backend.queue.engine.run = engine_run
{"got": got, "a": a, "k": k, "c": c,
 "draws": [command[1] for command in sent if command[0] == "draw"]}
"""
)


def test_a_batch_one_layers_bias_and_relu_join_its_split_sum(engine_page: EnginePage) -> None:
    """(1, K) @ (K, N) runs in K slices and a sum of them (rewrites.matmul_split_k); a bias and
    relu after it are drawn with that sum (epilogues.fuse_sum), the unfused sum left out where
    nothing reads it. Against numpy."""
    result = engine_page.run(SPLIT_SUMS)
    a, k, c = (np.asarray(result[n], np.float64) for n in "akc")
    want = [np.maximum(a @ k + c, 0), a @ k, np.maximum(a @ k, 0)]
    for got, expected in zip(result["got"], want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=F32_RTOL, atol=1e-4)
    sums = [d for d in result["draws"] if d.startswith("sum_parts4")]
    assert sums == ["sum_parts4:bias_relu", "sum_parts4", "sum_parts4:relu"], result["draws"]
    assert not {"binary4:add", "unary4:relu"} & set(result["draws"])


SMALL_PRODUCTS = (
    SENT_COMMANDS
    + """
rng = np.random.default_rng(11)
a = rng.standard_normal((4, 3)).astype(np.float32)
k = rng.standard_normal((3, 5)).astype(np.float32)
c = rng.standard_normal((5,)).astype(np.float32)
d = rng.standard_normal((4, 5)).astype(np.float32)
try:
    at, kt, ct, dt = pib.tensor(a), pib.tensor(k), pib.tensor(c), pib.tensor(d)
    relu = pib.relu(pib.matmul(at, kt) + ct)  # small Dense layers: the element kernel's product
    sigmoid = pib.sigmoid(pib.matmul(at, kt) + ct)
    tanh = pib.tanh(pib.matmul(at, kt))
    plus = pib.matmul(at, kt) + dt  # any addend of the product's shape
    raw = pib.matmul(at, kt)
    raw_relu = pib.relu(raw + ct)  # raw is read back below: its draw stays
    v = pib.Variable(rng.standard_normal((5, 2)).astype(np.float32))
    with pib.GradientTape() as tape:
        tape.watch(ct)
        loss = pib.sum(pib.matmul(pib.relu(pib.matmul(at, kt) + ct), v))
    grad = tape.gradient(loss, ct)  # relu's gradient of the product (ones @ v^T): one draw
    got = [await t.numpy() for t in (relu, sigmoid, tanh, plus, raw, raw_relu, grad)]
    v_value = await v.numpy()
finally:
    backend.queue.engine.run = engine_run
{"got": got, "a": a, "k": k, "c": c, "d": d, "v": v_value,
 "draws": [command[1] for command in sent if command[0] == "draw"]}
"""
)


def test_a_small_layers_add_and_activation_run_inside_its_product(engine_page: EnginePage) -> None:
    """A product small enough for the element kernel takes the add after it and relu, sigmoid
    or tanh (epilogues.fuse_product): one draw per layer, the unfused draws left out where
    nothing reads them, kept where something does; in a backward pass the gradient at a relu,
    a product, takes relu's gradient into its draw. The same numbers as numpy's."""
    result = engine_page.run(SMALL_PRODUCTS)
    a, k, c, d, v = (np.asarray(result[n], np.float64) for n in "akcdv")
    y = a @ k
    want = [np.maximum(y + c, 0), 1 / (1 + np.exp(-(y + c))), np.tanh(y), y + d, y]
    want.append(np.maximum(y + c, 0))
    want.append(((np.ones((4, 2)) @ v.T) * (y + c > 0)).sum(axis=0))
    for got, expected in zip(result["got"], want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=F32_RTOL, atol=1e-5)
    products = [draw for draw in result["draws"] if draw.startswith("matmul")]
    assert products[:7] == [
        "matmul:add_relu",
        "matmul:add_sigmoid",
        "matmul:tanh",
        "matmul:add",
        "matmul",  # raw, read back
        "matmul:add_relu",
        "matmul:add_relu",  # the gradient's forward pass
    ], result["draws"]
    relu_gradient = [draw for draw in products if draw.startswith("matmul:then_")]
    assert len(relu_gradient) == 1, result["draws"]
    token = relu_gradient[0].removeprefix("matmul:then_")
    assert not [draw for draw in result["draws"] if draw.endswith(token) and "fused" in draw]
    assert not {"binary:add", "binary4:add", "unary:relu", "unary4:relu"} & set(result["draws"])


def rule_spy(rule: str) -> str:
    """Python that wraps rewrites.`rule` so that `taken` says, per call, whether it rewrote the
    op; the snippet after it puts the rule back (`setattr(webgl2_rewrites, RULE, rule_before)`)."""
    return f"""
from py_in_browser.backends.webgl2 import rewrites as webgl2_rewrites
from py_in_browser.ops import call
RULE = {rule!r}
rule_before = getattr(webgl2_rewrites, RULE)
taken = []
def spy(*args):
    result = rule_before(*args)
    taken.append(result is not None)
    return result
setattr(webgl2_rewrites, RULE, spy)
"""


PADDED_MATMULS = """
rng = np.random.default_rng(3)
threshold, webgl2_rewrites.PAD_MATMUL_AT = webgl2_rewrites.PAD_MATMUL_AT, 0
try:
    got = []
    for sa, sb, ta, tb in CASES:
        a, b = (rng.standard_normal(s).astype(np.float32) for s in (sa, sb))
        out = call("matmul", pib.tensor(a), pib.tensor(b), transpose_a=ta, transpose_b=tb)
        got.append([a, b, await out.numpy()])
finally:
    webgl2_rewrites.PAD_MATMUL_AT = threshold
    setattr(webgl2_rewrites, RULE, rule_before)
{"got": got, "taken": taken}
"""
PADDED_CASES = [  # (a, b, transpose_a, transpose_b): K, N (and M if a is transposed) not all 4k
    ((3, 5), (5, 7), False, False),
    ((8, 12), (12, 10), False, False),
    ((2, 6, 10), (2, 9, 10), False, True),
    ((10, 6), (10, 7), True, False),
]


def test_products_of_partial_texels_are_padded_to_whole_texels(engine_page: EnginePage) -> None:
    """Zero-padded to multiples of 4, run whole-texel, sliced back: against numpy."""
    result = engine_page.run(
        f"CASES = {PADDED_CASES!r}\n{rule_spy('matmul_padded')}{PADDED_MATMULS}"
    )
    assert sum(result["taken"]) == len(PADDED_CASES)  # (the padded products then decline)
    for (_, _, ta, tb), (a, b, got) in zip(PADDED_CASES, result["got"], strict=True):
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        want = (np.swapaxes(a, -1, -2) if ta else a) @ (np.swapaxes(b, -1, -2) if tb else b)
        np.testing.assert_allclose(got, want, rtol=F32_RTOL, atol=1e-5)


FILTER_GRADIENTS = """
rng = np.random.default_rng(4)
try:
    got = []
    for x_shape, w_shape, stride, pads in CASES:
        x = rng.standard_normal(x_shape).astype(np.float32)
        oh = (x_shape[1] + sum(pads[0]) - w_shape[0]) // stride + 1
        ow = (x_shape[2] + sum(pads[1]) - w_shape[1]) // stride + 1
        g = rng.standard_normal((x_shape[0], oh, ow, w_shape[3])).astype(np.float32)
        dw = call("conv2d_backprop_filter", pib.tensor(x), pib.tensor(g), filter_shape=w_shape,
                  strides=(stride, stride), pads=pads)
        got.append([x, g, await dw.numpy()])
finally:
    setattr(webgl2_rewrites, RULE, rule_before)
{"got": got, "taken": taken}
"""
FILTER_CASES = [  # (x NHWC, filter HWIO, stride, pads): 3 input channels (RGBA-packed), 8
    ((2, 16, 16, 3), (3, 3, 3, 16), 1, ((1, 1), (1, 1))),
    ((3, 7, 6, 8), (3, 2, 8, 4), 2, ((1, 0), (0, 1))),
]
PRODUCT_CASES = [  # blocks-sized: 3 input channels (a zero row pads the patches), 16, stride 2
    ((4, 32, 32, 3), (3, 3, 3, 16), 1, ((1, 1), (1, 1))),
    ((2, 16, 16, 16), (3, 3, 16, 32), 1, ((1, 1), (1, 1))),
    ((4, 32, 32, 8), (3, 3, 8, 16), 2, ((1, 0), (1, 0))),
]


def _filter_gradient(x: np.ndarray, g: np.ndarray, w_shape: tuple[int, ...], stride: int, pads):
    """numpy: dw[kh, kw, ci, co] = sum over n, oh, ow of x_padded[n, oh*s + kh, ow*s + kw, ci] *
    g[n, oh, ow, co]."""
    xp = np.pad(x.astype(np.float64), ((0, 0), pads[0], pads[1], (0, 0)))
    _, oh, ow, _ = g.shape
    dw = np.zeros(w_shape)
    for kh in range(w_shape[0]):
        for kw in range(w_shape[1]):
            window = xp[:, kh : kh + stride * oh : stride, kw : kw + stride * ow : stride, :]
            dw[kh, kw] = np.einsum("nhwc,nhwo->co", window, g)
    return dw


@pytest.mark.parametrize(
    ("rule", "cases"),
    [("split_filter_gradient", FILTER_CASES), ("filter_gradient_as_product", PRODUCT_CASES)],
)
def test_filter_gradients_are_summed_in_parts_like_numpy(
    engine_page: EnginePage, rule: str, cases: list[Any]
) -> None:
    """Few filter texels over many gradient rows: partial sums over slices of the rows, then
    a sum over the slices (rewrites.split_filter_gradient); larger ones as a block product of
    the input's patches and the gradient (rewrites.filter_gradient_as_product); against numpy."""
    result = engine_page.run(f"CASES = {cases!r}\n{rule_spy(rule)}{FILTER_GRADIENTS}")
    assert result["taken"] == [True] * len(cases)
    for (_, w_shape, stride, pads), (x, g, got) in zip(cases, result["got"], strict=True):
        want = _filter_gradient(np.asarray(x), np.asarray(g), w_shape, stride, pads)
        np.testing.assert_allclose(got, want, rtol=F32_RTOL, atol=1e-4)


INPUT_GRADIENTS = """
rng = np.random.default_rng(7)
try:
    got = []
    for x_shape, w_shape, pads in CASES:
        w = rng.standard_normal(w_shape).astype(np.float32)
        oh = x_shape[1] + sum(pads[0]) - w_shape[0] + 1
        ow = x_shape[2] + sum(pads[1]) - w_shape[1] + 1
        g = rng.standard_normal((x_shape[0], oh, ow, w_shape[3])).astype(np.float32)
        dx = call("conv2d_backprop_input", pib.tensor(g), pib.tensor(w), input_shape=x_shape,
                  strides=(1, 1), pads=pads)
        got.append([g, w, await dx.numpy()])
finally:
    setattr(webgl2_rewrites, RULE, rule_before)
{"got": got, "taken": taken}
"""
INPUT_CASES = [  # (x NHWC, filter HWIO, pads), stride 1: "same", "valid", uneven
    ((4, 16, 16, 8), (3, 3, 8, 16), ((1, 1), (1, 1))),
    ((2, 16, 16, 16), (3, 3, 16, 16), ((0, 0), (0, 0))),
    ((4, 16, 16, 16), (3, 3, 16, 8), ((1, 0), (0, 1))),
]


def _input_gradient(g: np.ndarray, w: np.ndarray, x_shape: tuple[int, ...], pads: Any) -> Any:
    """numpy: dx_padded[n, oh + kh, ow + kw, ci] += g[n, oh, ow, co] * w[kh, kw, ci, co]."""
    n, oh, ow, _ = g.shape
    (top, _), (left, _) = pads
    dx = np.zeros((n, oh + w.shape[0] - 1, ow + w.shape[1] - 1, w.shape[2]))
    for kh in range(w.shape[0]):
        for kw in range(w.shape[1]):
            dx[:, kh : kh + oh, kw : kw + ow] += np.einsum("nhwo,co->nhwc", g, w[kh, kw])
    return dx[:, top : top + x_shape[1], left : left + x_shape[2]]


def test_input_gradients_run_as_convolutions_like_numpy(engine_page: EnginePage) -> None:
    """Stride-1 input gradients as a convolution of the gradient with the turned filter on the
    block kernels (rewrites.input_gradient_as_conv), against numpy."""
    result = engine_page.run(
        f"CASES = {INPUT_CASES!r}\n{rule_spy('input_gradient_as_conv')}{INPUT_GRADIENTS}"
    )
    assert result["taken"] == [True] * len(INPUT_CASES)
    for (x_shape, _, pads), (g, w, got) in zip(INPUT_CASES, result["got"], strict=True):
        want = _input_gradient(np.asarray(g), np.asarray(w), x_shape, pads)
        np.testing.assert_allclose(got, want, rtol=F32_RTOL, atol=1e-4)


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
        REINIT + "await reinit()\n"
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
    their primitives' names too (same calls per primitive), plus the replay's copies: state
    brought in where a swap cannot, fewer than the replays (the loss goes out by a swap).

    A context the browser loses meanwhile (Chromium's GPU watchdog on a loaded machine) is
    recovered on a new backend with its own counters and profile: that mode runs again, once."""
    primitives = set(trajectories.run(PRIMITIVES_IN_PAGE))
    result = trajectories.run(
        "from py_in_browser import replay\n"
        "def losses():\n"
        "    return [e for e in pib.runtime_events() if e['type'] == 'context_lost']\n"
        "out = {'losses': []}\n"
        "for mode in (False, True):\n"
        "    replay.ENABLED = mode\n"
        "    for attempt in range(2):\n"
        "        before = len(losses())\n"
        "        model, x, y, batch = setup('mlp')\n"
        "        backend = pib.runtime.current_backend()\n"
        "        replayed = backend.steps_replayed\n"
        "        out[str(mode)] = await pib.profile(lambda: model.fit(\n"
        "            x, y, epochs=3, batch_size=batch, shuffle=False))\n"
        "        out[str(mode) + '_replayed'] = backend.steps_replayed - replayed\n"
        "        if len(losses()) == before:\n"
        "            break\n"
        "        out['losses'] += losses()[before:]\n"
        "replay.ENABLED = True\n"
        "out['events'] = [e['type'] for e in pib.runtime_events()]\n"
        "out"
    )
    print("contexts lost and recovered meanwhile:", result["losses"], result["events"])
    eager, replayed = result["False"], result["True"]
    print("webgl2 profile of 6 eager MLP steps:", eager["kernels"])
    print("webgl2 profile of the same steps, 4 replayed:", replayed["kernels"])
    assert result["False_replayed"] == 0 and result["True_replayed"] >= 1
    _check_profile_table(eager, primitives, set())
    _check_profile_table(replayed, primitives, {"replay_copy"})
    calls = {row["name"]: row["calls"] for row in replayed["kernels"]}
    assert calls.pop("replay_copy", 0) < result["True_replayed"]
    assert calls == {row["name"]: row["calls"] for row in eager["kernels"]}


def test_long_sums_keep_float32_accuracy(engine_page: EnginePage) -> None:
    errors = engine_page.run(LONG_SUMS)
    print("webgl2 long-sum relative errors:", errors)
    assert errors["sum"] < 1e-6 and errors["variance"] < 1e-6, errors
