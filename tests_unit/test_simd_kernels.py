"""The cpu backend's WebAssembly SIMD kernels, run natively under wasmtime, against numpy."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import py_in_browser as pib
from py_in_browser import fusion, layers, replay, runtime
from py_in_browser.backends import KERNELS, cpu
from py_in_browser.backends.cpu_simd import epilogues, loader, recording
from py_in_browser.backends.cpu_simd.kernels import ELEMENTWISE_MIN_SIZE, REPLAYED
from py_in_browser.events import runtime_events
from py_in_browser.testing import graph_models
from py_in_browser.testing.op_cases import CASES, OpCase, check_forward, tape_gradients
from tests_unit.wasm_simd import BUILDS, WasmSimd, native_simd

TOLERANCE = 1e-5


@pytest.fixture(scope="module", params=BUILDS)
def simd(request: pytest.FixtureRequest) -> WasmSimd:
    return native_simd(request.param)


def _reference(a: np.ndarray, b: np.ndarray, ta: bool, tb: bool) -> np.ndarray:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return np.matmul(
        np.swapaxes(a64, -1, -2) if ta else a64, np.swapaxes(b64, -1, -2) if tb else b64
    )


def _close(actual: np.ndarray, expected: np.ndarray) -> None:
    # Relative to the size of the terms summed, as a float32 dot product's error is.
    scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
    np.testing.assert_allclose(actual, expected, rtol=0, atol=TOLERANCE * scale)


# Shapes around every blocking edge: micro-tile (4x8), k block 256, m block 128, n block 512.
GEMM_SHAPES = [
    (1, 1, 1),
    (3, 5, 7),
    (4, 8, 16),
    (6, 8, 16),
    (17, 33, 9),
    (129, 19, 300),
    (64, 520, 40),
    (5, 3, 0),
    (2, 70, 300),  # fewer rows than the micro-tile: B streamed, not packed
    (3, 33, 4),
    (5, 33, 4),
]


@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize(("m", "n", "k"), GEMM_SHAPES)
def test_gemm_matches_numpy(
    simd: WasmSimd, m: int, n: int, k: int, transpose_a: bool, transpose_b: bool
) -> None:
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    a = rng.standard_normal((k, m) if transpose_a else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(np.float32)
    out = simd.kernels.gemm(a, b, transpose_a, transpose_b)
    assert out is not None and out.shape == (m, n) and out.dtype == np.float32
    _close(out, _reference(a, b, transpose_a, transpose_b))


@pytest.mark.parametrize(("transpose_a", "transpose_b"), [(False, False), (True, True)])
def test_batched_gemm_matches_numpy(simd: WasmSimd, transpose_a: bool, transpose_b: bool) -> None:
    rng = np.random.default_rng(7)
    a = rng.standard_normal((2, 3, 12, 10)).astype(np.float32)
    b = rng.standard_normal((2, 3, 10, 12)).astype(np.float32)
    out = simd.kernels.gemm(a, b, transpose_a, transpose_b)
    expected = _reference(a, b, transpose_a, transpose_b)
    assert out is not None and out.shape == expected.shape == (
        (2, 3, 10, 10) if transpose_a else (2, 3, 12, 12)
    )
    _close(out, expected)


def test_gemm_reads_strided_views(simd: WasmSimd) -> None:
    """A transposed or sliced handle (the cpu backend's views) is read as its values."""
    a = np.arange(60, dtype=np.float32).reshape(6, 10)[:, ::2]
    b = np.linspace(-1, 1, 35, dtype=np.float32).reshape(7, 5).T
    out = simd.kernels.gemm(a, b, False, False)
    assert out is not None
    _close(out, _reference(a, b, False, False))


def _bias_then(kernels: Any, y: np.ndarray, bias: np.ndarray, activation: int) -> np.ndarray:
    """What an eager step computes after a layer's product: y + bias, then the activation
    (epilogues.ACTIVATIONS' code; 0: none), each a separate fused call."""
    out = kernels.fused(epilogues.ADD, [y, np.broadcast_to(bias, y.shape)])
    if activation:
        out = kernels.fused(epilogues.ACTIVATIONS[activation], [out])
    assert out is not None
    return out


@pytest.mark.parametrize("activation", [0, *epilogues.ACTIVATIONS])
@pytest.mark.parametrize(("m", "n", "k"), GEMM_SHAPES)
def test_gemm_epilogue_gives_the_bits_of_gemm_then_bias_add_and_activation(
    simd: WasmSimd, m: int, n: int, k: int, activation: int
) -> None:
    """The call a recording merges a layer's matmul, bias add and relu or relu6 into
    (epilogues.py) gives the bits of the calls an eager step makes; a NaN in A, values past the
    relu6 clip and an infinite bias included."""
    rng = np.random.default_rng(m * 1000 + n * 10 + k + 1)
    a = rng.standard_normal((m, k)).astype(np.float32) * 4
    b = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    if k:
        a[0, 0] = np.nan
    bias[-1] = -np.inf
    kernels = simd.kernels
    c = kernels.gemm(a, b, False, False)
    assert c is not None
    want = _bias_then(kernels, c, bias, activation)
    got = kernels.empty((m, n))
    kernels._run("gemm_epilogue", 1, m, n, k, a, m * k, 0, b, k * n, 0, bias, activation, got,
                 kernels._work)  # fmt: skip
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("m", "n", "k"), GEMM_SHAPES)
def test_gemm_residual_gives_the_bits_of_gemm_then_skip_add_then_bias(
    simd: WasmSimd, m: int, n: int, k: int
) -> None:
    """A block's last 1x1 convolution, its skip connection and its bias (bias + (c + skip), in
    the order the hand model adds them) merged into one call: the eager calls' bits."""
    rng = np.random.default_rng(m * 1000 + n * 10 + k + 2)
    batch = 2
    a = rng.standard_normal((batch, m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    skip = rng.standard_normal((batch, m, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    if skip.size:
        skip.flat[-1] = np.inf
    bias[0] = np.nan
    kernels = simd.kernels
    c = kernels.gemm(a, np.broadcast_to(b, (batch, k, n)), False, False)
    assert c is not None
    summed = kernels.fused(epilogues.ADD, [c, skip])
    assert summed is not None
    want = kernels.fused(epilogues.ADD, [np.broadcast_to(bias, c.shape), summed])
    got = kernels.empty((batch, m, n))
    kernels._run("gemm_residual", batch, m, n, k, a, m * k, 0, b, 0, 0, skip, bias, got,
                 kernels._work)  # fmt: skip
    np.testing.assert_array_equal(got, want)


def test_gemm_leaves_other_dtypes_to_numpy(simd: WasmSimd) -> None:
    a = np.ones((2, 2), dtype=np.float64)
    assert simd.kernels.gemm(a, a, False, False) is None


# ---- convolution and pooling: the cpu backend's kernels with the module vs without -----------

# (input NHWC, window, strides, ((top, bottom), (left, right)) pads); channel counts cover the
# 4-wide vector body and the scalar tail.
WINDOWS = [
    ((2, 5, 6, 3), (3, 3), (1, 1), ((1, 1), (1, 1))),
    ((1, 7, 7, 8), (3, 3), (2, 2), ((0, 1), (0, 1))),
    ((2, 6, 5, 5), (2, 3), (2, 1), ((0, 0), (0, 0))),
    ((1, 4, 4, 4), (1, 1), (1, 1), ((0, 0), (0, 0))),
    ((1, 9, 8, 6), (3, 2), (3, 2), ((1, 1), (0, 1))),
]


@pytest.fixture
def with_simd(simd: WasmSimd, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The cpu backend as in Pyodide: its kernels use the module (the wasmtime instance)."""
    monkeypatch.setattr(cpu, "SIMD", simd.kernels)
    yield


def _both(op: str, xs: list[np.ndarray], attrs: dict[str, Any], simd: WasmSimd) -> tuple:
    kernel = KERNELS[("cpu", op)]
    with np.errstate(all="ignore"):  # as CpuBackend.run: NaN and Inf are values here
        with_numpy = kernel(xs, attrs)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(cpu, "SIMD", simd.kernels)
            with_module = kernel(xs, attrs)
    return np.array(with_module), with_numpy


def _out_hw(shape: tuple[int, ...], window: Any, strides: Any, pads: Any) -> tuple[int, int]:
    (pt, pb), (pl, pr) = pads
    return (
        (shape[1] + pt + pb - window[0]) // strides[0] + 1,
        (shape[2] + pl + pr - window[1]) // strides[1] + 1,
    )


@pytest.mark.parametrize(("shape", "window", "strides", "pads"), WINDOWS)
def test_conv2d_and_its_gradients_match_numpy(
    simd: WasmSimd, shape: tuple[int, ...], window: Any, strides: Any, pads: Any
) -> None:
    rng = np.random.default_rng(sum(shape))
    cout = 5
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((*window, shape[3], cout)).astype(np.float32)
    oh, ow = _out_hw(shape, window, strides, pads)
    g = rng.standard_normal((shape[0], oh, ow, cout)).astype(np.float32)
    attrs = {"strides": strides, "pads": pads}
    cases: list[tuple[str, list[np.ndarray], dict[str, Any]]] = [
        ("conv2d", [x, w], attrs),
        ("conv2d_backprop_input", [g, w], {**attrs, "input_shape": shape}),
        ("conv2d_backprop_filter", [x, g], {**attrs, "filter_shape": w.shape}),
    ]
    for op, xs, op_attrs in cases:
        got, want = _both(op, xs, op_attrs, simd)
        assert got.shape == want.shape, op
        _close(got, want)


@pytest.mark.parametrize("multiplier", [1, 3])
@pytest.mark.parametrize(("shape", "window", "strides", "pads"), WINDOWS)
def test_depthwise_conv2d_gives_the_numpy_kernels_bits(
    simd: WasmSimd, shape: tuple[int, ...], window: Any, strides: Any, pads: Any, multiplier: int
) -> None:
    """Both sum 0 + each tap's product in tap order, rounded one by one: equal bits, also with
    NaN and infinities in the input and the filters (and so over the padding)."""
    rng = np.random.default_rng(sum(shape) + multiplier)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((*window, shape[3], multiplier)).astype(np.float32)
    x.flat[0], x.flat[x.size // 2], x.flat[-1] = np.nan, np.inf, -np.inf
    w.flat[-1] = np.inf
    got, want = _both("depthwise_conv2d", [x, w], {"strides": strides, "pads": pads}, simd)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("activation", [0, *epilogues.ACTIVATIONS])
@pytest.mark.parametrize("multiplier", [1, 3])
@pytest.mark.parametrize(("shape", "window", "strides", "pads"), WINDOWS)
def test_depthwise_epilogue_gives_the_bits_of_depthwise_then_bias_add_and_activation(
    simd: WasmSimd,
    shape: tuple[int, ...],
    window: Any,
    strides: Any,
    pads: Any,
    multiplier: int,
    activation: int,
) -> None:
    """A depthwise layer's convolution, bias add and relu or relu6 merged into one call (as a
    recording merges them: epilogues.py) give the bits of the eager calls."""
    rng = np.random.default_rng(sum(shape) + multiplier + activation)
    x = rng.standard_normal(shape).astype(np.float32) * 4
    w = rng.standard_normal((*window, shape[3], multiplier)).astype(np.float32)
    bias = rng.standard_normal(shape[3] * multiplier).astype(np.float32)
    x.flat[0], bias[-1] = np.nan, np.inf
    kernels = simd.kernels
    y = kernels.depthwise_conv2d(x, w, strides, pads)
    assert y is not None
    want = _bias_then(kernels, y, bias, activation)
    got = kernels.empty(y.shape)
    geometry = kernels._window(x.shape, window, strides, pads, y.shape[1:3])
    kernels._run("depthwise_epilogue", geometry, multiplier, x, w, bias, activation, got)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("channels", [4, 24, 37])
def test_depthwise_conv2d_of_hand_model_layers_matches_numpy(simd: WasmSimd, channels: int) -> None:
    """16, 4 and 1 channels per pass, 5x5 filters at stride 2; and the filter gradient's
    geometry (a filter larger than the output: ops.py), where numpy sums each window at once
    (pairwise), so only to rounding."""
    rng = np.random.default_rng(channels)
    x = rng.standard_normal((1, 15, 14, channels)).astype(np.float32)
    w = rng.standard_normal((5, 5, channels, 1)).astype(np.float32)
    attrs = {"strides": (2, 2), "pads": ((1, 2), (1, 2))}
    got, want = _both("depthwise_conv2d", [x, w], attrs, simd)
    np.testing.assert_array_equal(got, want)
    x = rng.standard_normal((1, 13, 12, channels)).astype(np.float32)
    w = rng.standard_normal((11, 10, channels, 1)).astype(np.float32)
    got, want = _both("depthwise_conv2d", [x, w], {"strides": (1, 1), "pads": ((0, 0),) * 2}, simd)
    _close(got, want)


@pytest.mark.usefixtures("with_simd")
def test_predictions_through_a_depthwise_backbone_replay_with_the_eager_bits() -> None:
    """predict on a frozen depthwise backbone (layers.Pretrained) and a head: from the third
    call the forward pass is one replayed module call (the depthwise call recorded with the
    others), giving the eager passes' bits."""

    def predictions(replayed: bool) -> tuple[list[np.ndarray], int]:
        replay.ENABLED = replayed
        try:
            model = pib.Sequential(
                [
                    layers.Pretrained(graph_models.small_backbone(seed=3, channels=8)),
                    layers.Dense(3, activation="softmax"),
                ],
                seed=1,
            )
            model.build((6, 6, 8))
            x = np.random.default_rng(4).standard_normal((5, 6, 6, 8)).astype(np.float32)
            before = runtime.current_backend().memory_stats()["steps_replayed"]

            async def calls() -> list[np.ndarray]:
                return [await (await model.predict(x)).numpy() for _ in range(4)]

            outputs = asyncio.run(calls())
            return outputs, runtime.current_backend().memory_stats()["steps_replayed"] - before
        finally:
            replay.ENABLED = True

    eager, none = predictions(replayed=False)
    replayed, count = predictions(replayed=True)
    assert none == 0 and count == 2  # the third and fourth predictions
    for got, want in zip(replayed, eager, strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.usefixtures("with_simd")
def test_a_hand_model_block_replays_as_three_merged_calls_with_the_eager_bits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One block of the hand model (graph_models.inverted_residual: its convolutions' bias adds
    and relu6s, and the last one's skip connection and bias) replays as a gemm_epilogue, a
    depthwise_epilogue and a gemm_residual call, nothing else, with the eager passes' bits."""
    replayed: list[list[str]] = []
    replay_recording = recording.replay

    def spy(kernels: Any, taken: recording.Recording, *args: Any) -> Any:
        words, names, at = taken.words, [], 0
        while at < len(words):
            names.append(REPLAYED[words[at]])
            at += 2 + words[at + 1]
        replayed.append(names)
        return replay_recording(kernels, taken, *args)

    monkeypatch.setattr(recording, "replay", spy)
    x = np.random.default_rng(5).standard_normal((1, 12, 12, 8)).astype(np.float32) * 3

    async def calls(replays: bool) -> list[np.ndarray]:
        replay.ENABLED = replays
        try:
            gm = graph_models.inverted_residual(seed=2)
            outs = [await gm(x) for _ in range(4)]
            return [await out.numpy() for out in outs if isinstance(out, pib.Tensor)]
        finally:
            replay.ENABLED = True

    eager = asyncio.run(calls(False))
    assert not replayed
    got = asyncio.run(calls(True))
    assert replayed == [["gemm_epilogue", "depthwise_epilogue", "gemm_residual"]] * 2
    for a, b in zip(got, eager, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(("shape", "window", "strides", "pads"), WINDOWS)
def test_pooling_and_its_gradients_match_numpy(
    simd: WasmSimd, shape: tuple[int, ...], window: Any, strides: Any, pads: Any
) -> None:
    rng = np.random.default_rng(sum(shape) + 1)
    # A shuffled ramp: no ties, so "the first maximum" is the same for both.
    x = (rng.permutation(math.prod(shape)).reshape(shape) * 0.1 - 3).astype(np.float32)
    g = rng.standard_normal((shape[0], *_out_hw(shape, window, strides, pads), shape[3]))
    g = g.astype(np.float32)
    attrs = {"pool_size": window, "strides": strides, "pads": pads}
    cases: list[tuple[str, list[np.ndarray], dict[str, Any]]] = [
        ("max_pool2d", [x], attrs),
        ("max_pool2d_grad", [x, g], attrs),
        ("avg_pool2d", [x], attrs),
        ("avg_pool2d_grad", [g], {**attrs, "input_shape": shape}),
    ]
    for op, xs, op_attrs in cases:
        got, want = _both(op, xs, op_attrs, simd)
        assert got.shape == want.shape, op
        _close(got, want)


def test_max_pooling_routes_ties_and_nan_like_numpy(simd: WasmSimd) -> None:
    x = np.zeros((1, 4, 4, 5), dtype=np.float32)  # all ties: the first tap takes the gradient
    x[0, 2, 3, 1] = np.nan
    x[0, 0, 1, 2] = -np.inf
    g = np.arange(1, 21, dtype=np.float32).reshape(1, 2, 2, 5)
    attrs = {"pool_size": (2, 2), "strides": (2, 2), "pads": ((0, 0), (0, 0))}
    for op, xs in (("max_pool2d", [x]), ("max_pool2d_grad", [x, g])):
        got, want = _both(op, xs, attrs, simd)
        np.testing.assert_array_equal(got, want)


# ---- the op-case table on the cpu backend with the module, as in Pyodide ----------------------


@pytest.mark.usefixtures("with_simd")
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_op_case_with_simd_matches_numpy(case: OpCase) -> None:
    result = asyncio.run(check_forward(case, "float32"))
    assert result["shape_ok"], result
    assert result["max_abs_err"] <= TOLERANCE * result["scale"], result


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.grad], ids=[c.name for c in CASES if c.grad]
)
def test_op_case_gradients_with_simd_match_numpy(case: OpCase, simd: WasmSimd) -> None:
    with_numpy, _ = asyncio.run(tape_gradients(case, "float32"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cpu, "SIMD", simd.kernels)
        with_module, _ = asyncio.run(tape_gradients(case, "float32"))
    for got, want in zip(with_module, with_numpy, strict=True):
        _close(got, want)


# ---- fused elementwise programs --------------------------------------------------------------

SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 88.7, -103.0])


def _fused_both(program: Any, xs: list[np.ndarray], simd: WasmSimd) -> tuple:
    return _both("fused", xs, {"program": program}, simd)


@pytest.mark.parametrize("op", fusion.UNARY)
def test_fused_unary_steps_match_numpy_over_their_range(simd: WasmSimd, op: str) -> None:
    rng = np.random.default_rng(11)
    wide = np.concatenate([rng.uniform(-30, 30, 997), rng.standard_normal(500), SPECIAL])
    x = (np.abs(wide) if op in ("log", "sqrt") else wide).astype(np.float32)
    x = np.concatenate([x, rng.uniform(1e-30, 1e30, 300).astype(np.float32)]) if op == "log" else x
    got, want = _fused_both(((op, (("input", 0),)),), [x], simd)
    # erf's closed form is 1 - poly * exp(-x^2): near 0 both sides carry an absolute 1 ulp of 1.
    atol = 2.5e-7 if op == "erf" else 1e-37
    np.testing.assert_allclose(got, want, rtol=3e-7, atol=atol, equal_nan=True)


def test_fused_pow_matches_numpy_for_every_sign_and_special(simd: WasmSimd) -> None:
    bases = np.array([2.0, 0.5, -2.0, -0.5, 0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 3.7])
    exponents = np.array([0.0, 1.0, 2.0, 3.0, -1.0, -2.0, 0.5, -0.5, 2.5, np.inf, -np.inf, np.nan])
    x, y = (a.astype(np.float32).ravel() for a in np.meshgrid(bases, exponents))
    got, want = _fused_both((("pow", (("input", 0), ("input", 1))),), [x, y], simd)
    np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)
    numbers = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[numbers]), np.signbit(want[numbers]))


@pytest.mark.parametrize("size", [1, 63, 64, 65, 200])
@pytest.mark.parametrize("width", [3, 8])
def test_fused_program_reads_scalars_rows_masks_and_gates(
    simd: WasmSimd, size: int, width: int
) -> None:
    """An Adam-like program with every input layout (a bias row too); sizes around the 64-element
    block, rows whose length is a multiple of 4 (the bias is read as vectors) or not."""
    rng = np.random.default_rng(size)
    shape = (size, width)
    full = rng.standard_normal(shape).astype(np.float32)
    rows = np.broadcast_to(rng.standard_normal((size, 1)).astype(np.float32), shape)
    bias = np.broadcast_to(rng.standard_normal((1, width)).astype(np.float32), shape)
    filled = np.broadcast_to(np.float32(0.25), shape)
    scalar = np.array(1.5, dtype=np.float32)
    mask = rng.uniform(size=shape) < 0.5
    gate = np.array(True)

    def program(f: Any, r: Any, c: Any, s: Any, m: Any, g: Any, b: Any) -> Any:
        step = f * c - r / (fusion.sqrt(fusion.maximum(f * f, s)) + 1e-3) + b
        picked = fusion.where(m, fusion.exp(-step), fusion.tanh(step) + fusion.less(f, r) * 0)
        return fusion.where(g, picked, f)

    traced = fusion.trace(program, 7)
    got, want = _fused_both(traced, [full, rows, filled, scalar, mask, gate, bias], simd)
    assert got.shape == want.shape == shape
    _close(got, want)


# ---- the fallback: where the module cannot load, numpy stays and an event says why ------------


@pytest.mark.parametrize("content", [None, b"\0asm not a module"])
def test_a_missing_or_broken_module_is_a_runtime_event(
    content: bytes | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = tmp_path / "kernels.wasm"
    if content is not None:
        module.write_bytes(content)
    monkeypatch.setattr(loader.sys, "platform", "emscripten")  # as in Pyodide
    monkeypatch.setattr(loader, "MODULE", module)
    before = len(runtime_events())
    assert loader.load() is None
    events = runtime_events()[before:]
    assert [event["type"] for event in events] == ["simd_unavailable"]
    assert ("not in the engine wheel" if content is None else "did not load") in events[0]["reason"]


@pytest.mark.parametrize("op", [*fusion.UNARY, *fusion.BINARY])
def test_large_elementwise_ops_use_the_module_and_match_numpy(simd: WasmSimd, op: str) -> None:
    rng = np.random.default_rng(5)
    size = 2 * ELEMENTWISE_MIN_SIZE + 3
    x = rng.uniform(0.5, 2.0, (size,)).astype(np.float32)  # inside every op's domain
    xs = [x] if op in fusion.UNARY else [x, np.flip(x)]
    assert simd.kernels.elementwise(op, xs) is not None
    got, want = _both(op, xs, {}, simd)
    _close(got, want)


def test_small_exact_elementwise_ops_stay_with_numpy(simd: WasmSimd) -> None:
    """Exactly rounded ops give numpy's bits either way, so small ones skip the call; the others
    always run in the module, so their bits never depend on the tensor's size."""
    small = np.linspace(-2, 2, ELEMENTWISE_MIN_SIZE - 1, dtype=np.float32)
    rows = np.ones((ELEMENTWISE_MIN_SIZE, 3), dtype=np.float32)
    assert simd.kernels.elementwise("add", [small, small]) is None
    assert simd.kernels.elementwise("less", [small, small]) is None
    big = simd.kernels.elementwise("exp", [np.tile(small, 2)])
    assert big is not None
    np.testing.assert_array_equal(simd.kernels.elementwise("exp", [small]), big[: small.size])
    assert simd.kernels.elementwise("add", [rows, rows[0]]) is None  # shapes the op table expands
    less = simd.kernels.elementwise("less", [rows, rows * 2])
    assert less is not None and less.dtype == np.bool_ and less.all()


def test_only_the_relaxed_build_fuses_multiply_adds(simd: WasmSimd) -> None:
    """The relaxed build's products round a * b + acc once (x86's FMA under wasmtime, as under
    V8 and SpiderMonkey); the plain build rounds the product first."""
    assert simd.kernels.fuses_multiply_adds() == (simd.path.name == "kernels-relaxed.wasm")


def test_the_fused_multiply_add_probe_stays_out_of_a_recording(simd: WasmSimd) -> None:
    """The helpers' start asks it while a step may be recording (at one of the step's awaits):
    its product is neither logged nor taken for a read from outside the module."""
    log = recording.CallLog(simd.kernels)
    simd.kernels.log = log
    try:
        simd.kernels.fuses_multiply_adds()
    finally:
        simd.kernels.log = None
    assert (log.calls, log.problem) == ([], None)
