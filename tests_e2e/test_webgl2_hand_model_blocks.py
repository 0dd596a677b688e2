"""The hand model's layers as WebGL2 blocks: depthwise convolutions drawn as blocks of
neighbouring pixels (blocks.depthwise_source) with a layer's bias and relu6 fused into the block
and interleave draws, and a first layer at column stride 2 reading its RGB input as texel
windows; against numpy and the unblocked kernels (Firefox: test_webgl2_firefox.py)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from py_in_browser.backends import KERNELS, cpu  # noqa: F401  (registers the numpy kernels)
from py_in_browser.testing import graph_models
from tests_e2e.engine_page import EnginePage
from tests_e2e.test_webgl2 import F32_RTOL, SENT_COMMANDS, _conv2d

DEPTHWISE = (
    SENT_COMMANDS
    + """
from py_in_browser import fusion
from py_in_browser.backends.webgl2 import rewrites as webgl2_rewrites
rng = np.random.default_rng(7)
x = (rng.standard_normal((1, 8, 16, 8)) * 4).astype(np.float32)
w = rng.standard_normal((5, 5, 8, 1)).astype(np.float32)
x2 = rng.standard_normal((1, 14, 28, 12)).astype(np.float32)  # stride 2: 14-pixel output rows
w2 = rng.standard_normal((3, 3, 12, 1)).astype(np.float32)
b, b2 = rng.standard_normal((8,)).astype(np.float32), rng.standard_normal((12,)).astype(np.float32)
x[0, 0, 0, 0], x[0, 4, 9, 3], w2[2, 2, 5, 0] = np.nan, np.inf, -np.inf
def layers():
    xs, ws, bs = pib.tensor(x), pib.tensor(w), pib.tensor(b)
    x2s, w2s, b2s = pib.tensor(x2), pib.tensor(w2), pib.tensor(b2)
    return [
        pib.fused(fusion.relu6, pib.depthwise_conv2d(xs, ws, padding="same") + bs),
        pib.depthwise_conv2d(x2s, w2s, strides=2, padding="same") + b2s,
        pib.depthwise_conv2d(xs, ws, padding="same"),
    ]
unblocked = [await t.numpy() for t in layers()]
eager = len(sent)
thresholds = webgl2_rewrites.BLOCKS_AT, webgl2_rewrites.DEPTHWISE_BLOCKS_AT
webgl2_rewrites.BLOCKS_AT = webgl2_rewrites.DEPTHWISE_BLOCKS_AT = 0
packed_filter = webgl2_rewrites.packed_filter
try:
    got = [await t.numpy() for t in layers()]
    packed = len(sent)
    webgl2_rewrites.packed_filter = lambda *args: None  # the R filters read as they are
    got_r = [await t.numpy() for t in layers()]
finally:
    webgl2_rewrites.BLOCKS_AT, webgl2_rewrites.DEPTHWISE_BLOCKS_AT = thresholds
    webgl2_rewrites.packed_filter = packed_filter
    backend.queue.engine.run = engine_run
{"got": got, "got_r": got_r, "unblocked": unblocked,
 "x": x, "w": w, "x2": x2, "w2": w2, "b": b, "b2": b2,
 "draw_buffers": backend.draw_buffers,
 "draws": [command[1] for command in sent[eager:packed] if command[0] == "draw"],
 "draws_r": [command[1] for command in sent[packed:] if command[0] == "draw"]}
"""
)


def _depthwise(x: np.ndarray, w: np.ndarray, strides: Any, pads: Any) -> np.ndarray:
    with np.errstate(all="ignore"):
        return KERNELS[("cpu", "depthwise_conv2d")]([x, w], {"strides": strides, "pads": pads})


def _relu6(v: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(v), v, np.clip(v, 0, 6))


def check_depthwise_blocks(engine_page: EnginePage) -> None:
    """depthwise (+ bias, relu6) as one block draw (the bias added as it writes its targets)
    and one interleave (relu6 applied), the unfused draws left out; 5x5 at stride 1 and 3x3 at
    stride 2 with NaN and infinities, against numpy and the unblocked kernel. The filters are
    small (R textures): drawn into RGBA ones first ("rows", rewrites.packed_filter), and, with
    that turned off, read as R texels ("k<w>s<s>r" programs)."""
    result = engine_page.run(DEPTHWISE)
    x, w, x2, w2, b, b2 = (
        np.asarray(result[n], np.float32) for n in ("x", "w", "x2", "w2", "b", "b2")
    )
    raw = _depthwise(x, w, (1, 1), ((2, 2), (2, 2)))
    want = [_relu6(raw + b), _depthwise(x2, w2, (2, 2), ((0, 1), (0, 1))) + b2, raw]
    for run in ("got", "got_r"):
        for got, unblocked, expected in zip(result[run], result["unblocked"], want, strict=True):
            got, unblocked = np.asarray(got, np.float32), np.asarray(unblocked, np.float32)
            np.testing.assert_allclose(got, expected, rtol=F32_RTOL, atol=1e-4)
            np.testing.assert_allclose(got, unblocked, rtol=F32_RTOL, atol=1e-5)
            assert np.isnan(got).any() and np.isinf(expected).any() == np.isinf(got).any()
    rows = 7 if result["draw_buffers"] >= 7 else 2
    for draws, r in ((result["draws"], ""), (result["draws_r"], "r")):
        assert [d for d in draws if "_block:" in d] == [
            f"depthwise_block:k5s1{r}_4x1.bias",  # relu6(dw + b): the unbiased block goes
            f"depthwise_block:k3s2{r}_{rows}x1.bias",
            f"depthwise_block:k5s1{r}_4x1",  # raw
        ], draws
        assert draws.count("rows") == (0 if r else 3), draws  # a packed filter per layer
        assert draws.count("block_interleave:4x1.relu6") == 1
        assert f"block_interleave:{rows}x1" in draws
        unfused = ("fused", "binary", "depthwise_conv2d")
        assert not [d for d in draws if d.startswith(unfused)], draws


def test_depthwise_layers_run_as_blocks_with_their_bias_and_relu6(engine_page: EnginePage) -> None:
    check_depthwise_blocks(engine_page)


RESIDUAL = (
    SENT_COMMANDS
    + """
from py_in_browser import fusion
from py_in_browser.backends.webgl2 import rewrites as webgl2_rewrites
rng = np.random.default_rng(9)
x = rng.standard_normal((1, 6, 8, 16)).astype(np.float32)
w = rng.standard_normal((1, 1, 16, 8)).astype(np.float32)
w3 = rng.standard_normal((3, 3, 16, 8)).astype(np.float32)
skip = rng.standard_normal((1, 6, 8, 8)).astype(np.float32)
b = rng.standard_normal((8,)).astype(np.float32)
dw = rng.standard_normal((3, 3, 16, 1)).astype(np.float32)
b16 = rng.standard_normal((16,)).astype(np.float32)
x7 = rng.standard_normal((1, 3, 7, 16)).astype(np.float32)  # 7-pixel rows: 7-pixel blocks
skip7 = rng.standard_normal((1, 3, 7, 8)).astype(np.float32)
x14 = rng.standard_normal((1, 4, 14, 16)).astype(np.float32)
w16 = rng.standard_normal((1, 1, 16, 16)).astype(np.float32)
dw5 = rng.standard_normal((5, 5, 16, 1)).astype(np.float32)
skip[0, 2, 5, 3], skip[0, 4, 1, 6] = np.nan, np.inf
x14[0, 1, 3, 2], x14[0, 2, 9, 5] = np.nan, np.inf
xs, ws, w3s, skips, bs, dws, b16s = (pib.tensor(v) for v in (x, w, w3, skip, b, dw, b16))
x7s, skip7s, x14s, w16s, dw5s = (pib.tensor(v) for v in (x7, skip7, x14, w16, dw5))
eager = len(sent)
thresholds = webgl2_rewrites.BLOCKS_AT, webgl2_rewrites.DEPTHWISE_BLOCKS_AT
webgl2_rewrites.BLOCKS_AT = webgl2_rewrites.DEPTHWISE_BLOCKS_AT = 0
try:
    # A residual block's end as TensorFlow's optimizer leaves it: (conv + skip), then bias first;
    # a 1x1 convolution (pointwise blocks) and a 3x3 one (the general blocks); an expansion.
    got = [
        await (bs + (pib.conv2d(xs, ws) + skips)).numpy(),
        await (bs + (pib.conv2d(xs, w3s, padding="same") + skips)).numpy(),
        await pib.fused(fusion.relu6, pib.conv2d(xs, ws) + bs).numpy(),
    ]
    # Textures too tall for one pixel per row (as a 112 x 112 image's): squarish, read by cursors.
    side, backend.memory.max_side = backend.memory.max_side, 16
    try:
        squarish = pib.tensor(x), pib.tensor(skip)  # 48 pixels > 16 texture rows
        got.append(await (bs + (pib.conv2d(squarish[0], ws) + squarish[1])).numpy())
        # An expansion's 2-column blocks drawn again as 1-column ones for the depthwise to read;
        # its value before relu6 held meanwhile (it shares the 2-column targets with grown: the
        # new targets are freed once).
        biased = pib.conv2d(squarish[0], w16s) + b16s
        grown = pib.fused(fusion.relu6, biased)
        out = pib.fused(fusion.relu6, pib.depthwise_conv2d(grown, dws, padding="same") + b16s)
        del grown, biased
        got.append(await out.numpy())
    finally:
        backend.memory.max_side = side
    # An inverted residual's depthwise, then its projection reading the depthwise's targets.
    expanded = pib.fused(fusion.relu6, pib.depthwise_conv2d(xs, dws, padding="same") + b16s)
    out = bs + (pib.conv2d(expanded, ws) + skips)
    del expanded  # unread by then: its interleave is dropped
    got.append(await out.numpy())
    async def inverted_residual(x, skip):
        grown = pib.fused(fusion.relu6, pib.conv2d(x, w16s) + b16s)
        expanded = pib.fused(fusion.relu6, pib.depthwise_conv2d(grown, dws, padding="same") + b16s)
        del grown
        out = bs + (pib.conv2d(expanded, ws) + skip)
        del expanded
        return await out.numpy()
    # The same after an expansion, whose blocks the depthwise reads (1-column ones drawn again).
    got.append(await inverted_residual(xs, skips))
    # The same on 7-pixel blocks: 7 targets, the filter, the skip and the bias (10 inputs); the
    # depthwise reading the targets of the expansion before it (no interleave between them).
    got.append(await inverted_residual(x7s, skip7s))
    # At stride 2 (5x5, left padding 1): 14-pixel rows read by 7-pixel blocks.
    grown = pib.fused(fusion.relu6, pib.conv2d(x14s, w16s) + b16s)
    out = pib.fused(fusion.relu6, pib.depthwise_conv2d(grown, dw5s, strides=2, padding="same") + b16s)
    del grown
    got.append(await out.numpy())
finally:
    webgl2_rewrites.BLOCKS_AT, webgl2_rewrites.DEPTHWISE_BLOCKS_AT = thresholds
    backend.queue.engine.run = engine_run
{"got": got, "x": x, "w": w, "w3": w3, "skip": skip, "b": b, "dw": dw, "b16": b16, "x7": x7,
 "skip7": skip7, "x14": x14, "w16": w16, "dw5": dw5, "draw_buffers": backend.draw_buffers,
 "draws": [command[1] for command in sent[eager:] if command[0] == "draw"]}
"""
)


def check_residual_blocks(engine_page: EnginePage) -> None:
    """A convolution's skip and then its bias added by the block draw as it writes its targets
    (conv2d_block:...add.bias), in TensorFlow's order, with a NaN and an infinity in the skip; a
    1x1 convolution as pointwise blocks (conv2d_block:pw_...), its bias in the block and relu6
    in the interleave, on a squarish input texture (pwc_: cursors), and reading a depthwise
    block's targets with its relu6 (pwt-relu6_: no interleave between them), a depthwise block
    reading an expansion's blocks drawn again with one texel column (pw/pwc), also those of a
    7-pixel block (10 inputs: one texture unit each); a 7-pixel depthwise block reading an
    expansion's targets with its relu6 (k<w>s<s>t<pad>-relu6_), at strides 1 and 2, with a NaN
    and an infinity; no add or activation draws left; against numpy."""
    result = engine_page.run(RESIDUAL)
    x, w, w3, skip, b = (np.asarray(result[n], np.float32) for n in ("x", "w", "w3", "skip", "b"))
    dw, b16 = np.asarray(result["dw"], np.float32), np.asarray(result["b16"], np.float32)
    pointwise = _conv2d(x, w, (1, 1), ((0, 0), (0, 0)))
    expanded = _relu6(_depthwise(x, dw, (1, 1), ((1, 1), (1, 1))) + b16)
    x7, skip7, x14, w16, dw5 = (
        np.asarray(result[n], np.float32) for n in ("x7", "skip7", "x14", "w16", "dw5")
    )
    grown7 = _relu6(_conv2d(x7, w16, (1, 1), ((0, 0), (0, 0))) + b16)
    grown = _relu6(_conv2d(x, w16, (1, 1), ((0, 0), (0, 0))) + b16)
    grown_dw = _relu6(_depthwise(grown, dw, (1, 1), ((1, 1), (1, 1))) + b16)
    expanded7 = _relu6(_depthwise(grown7, dw, (1, 1), ((1, 1), (1, 1))) + b16)
    grown14 = _relu6(_conv2d(x14, w16, (1, 1), ((0, 0), (0, 0))) + b16)
    with np.errstate(invalid="ignore"):
        want = [
            b + (pointwise + skip),
            b + (_conv2d(x, w3, (1, 1), ((1, 1), (1, 1))) + skip),
            _relu6(pointwise + b),
            b + (pointwise + skip),
            grown_dw,
            b + (_conv2d(expanded, w, (1, 1), ((0, 0), (0, 0))) + skip),
            b + (_conv2d(grown_dw, w, (1, 1), ((0, 0), (0, 0))) + skip),
            b + (_conv2d(expanded7, w, (1, 1), ((0, 0), (0, 0))) + skip7),
            _relu6(_depthwise(grown14, dw5, (2, 2), ((1, 2), (1, 2))) + b16),
        ]
    got = [np.asarray(values, np.float32) for values in result["got"]]
    for values, expected in zip(got, want, strict=True):
        np.testing.assert_allclose(values, expected, rtol=F32_RTOL, atol=1e-5)
    assert all(
        np.isnan(v[0, 2, 5, 3]) and np.isinf(v[0, 4, 1, 6]) for v in got[:2] + got[3:4] + got[5:7]
    )
    assert np.isnan(got[-1]).any() and np.isnan(want[-1]).sum() == np.isnan(got[-1]).sum()
    # The last cases fail where a target is read for the wrong pixels or without relu6.
    draws = result["draws"]
    shape = "4x2" if result["draw_buffers"] >= 8 else "4x1"
    seven = ["conv2d_block:pw_7x1.bias", "depthwise_block:k3s1t1-relu6_7x1.bias"]
    seven += ["conv2d_block:pwt-relu6_7x1.add.bias", "block_interleave:7x1"]
    seven += ["conv2d_block:pw_7x1.bias", "depthwise_block:k5s2t1-relu6_7x1.bias"]
    seven += ["block_interleave:7x1.relu6"]
    seven = seven if result["draw_buffers"] >= 7 else []  # (fewer draw buffers: no blocks)
    assert [d for d in draws if "block" in d] == [
        f"conv2d_block:pw_{shape}.add.bias",  # the plain and the skip-only blocks go
        f"block_interleave:aligned_{shape}",
        f"conv2d_block:vec_{shape}.add.bias",
        f"block_interleave:aligned_{shape}",
        f"conv2d_block:pw_{shape}.bias",
        f"block_interleave:aligned_{shape}.relu6",
        f"conv2d_block:pwc_{shape}.add.bias",
        f"block_interleave:{shape}",
        "conv2d_block:pwc_4x1.bias",  # the expansion (the 2-column blocks and interleave go)
        "depthwise_block:k3s1t1-relu6_4x1.bias",
        "block_interleave:4x1.relu6",
        "depthwise_block:k3s1_4x1.bias",  # its interleave has no reader left: dropped
        f"conv2d_block:pwt-relu6_{shape}.add.bias",
        f"block_interleave:aligned_{shape}",
        "conv2d_block:pw_4x1.bias",
        "depthwise_block:k3s1t1-relu6_4x1.bias",
        f"conv2d_block:pwt-relu6_{shape}.add.bias",
        f"block_interleave:aligned_{shape}",
        *seven,
    ], draws
    assert not [d for d in draws if d.startswith(("fused", "binary"))], draws


def test_a_residual_blocks_skip_and_bias_join_its_convolution_blocks(
    engine_page: EnginePage,
) -> None:
    check_residual_blocks(engine_page)


@pytest.fixture(scope="module")
def page_query() -> str:
    return "?backend=webgl2"


def test_a_hand_model_block_matches_the_cpu_backend(engine_page: EnginePage) -> None:
    """graph_models.inverted_residual (1x1 conv + bias + relu6, depthwise + bias + relu6, 1x1
    conv, skip, bias) on webgl2 with blocks (as the hand model's large layers run) within
    float32 rounding of the cpu backend."""
    got = engine_page.run(
        """
from py_in_browser.backends.webgl2 import rewrites as webgl2_rewrites
from py_in_browser.testing import graph_models
x = np.random.default_rng(3).standard_normal((1, 12, 12, 8)).astype(np.float32)
thresholds = webgl2_rewrites.BLOCKS_AT, webgl2_rewrites.DEPTHWISE_BLOCKS_AT
webgl2_rewrites.BLOCKS_AT = webgl2_rewrites.DEPTHWISE_BLOCKS_AT = 0
try:
    out = await (await graph_models.inverted_residual(seed=4)(x)).numpy()
finally:
    webgl2_rewrites.BLOCKS_AT, webgl2_rewrites.DEPTHWISE_BLOCKS_AT = thresholds
out
"""
    )
    x = np.random.default_rng(3).standard_normal((1, 12, 12, 8)).astype(np.float32)
    with ThreadPoolExecutor(1) as thread:  # Playwright's loop runs in this one
        want = thread.submit(asyncio.run, _on_cpu(x)).result()
    np.testing.assert_allclose(np.asarray(got, np.float32), want, rtol=F32_RTOL, atol=1e-4)


async def _on_cpu(x: np.ndarray) -> np.ndarray:
    out = await graph_models.inverted_residual(seed=4)(x)
    assert not isinstance(out, list)
    return await out.numpy()


FIRST_LAYER = (
    SENT_COMMANDS
    + """
from py_in_browser.backends.webgl2 import rewrites as webgl2_rewrites
rng = np.random.default_rng(8)
x = rng.uniform(0, 1, (2, 16, 32, 3)).astype(np.float32)  # RGB images
w = rng.standard_normal((3, 3, 3, 8)).astype(np.float32)
xs, ws = pib.tensor(x), pib.tensor(w)
unblocked = await pib.conv2d(xs, ws, strides=2, padding="same").numpy()
eager = len(sent)
threshold, webgl2_rewrites.BLOCKS_AT = webgl2_rewrites.BLOCKS_AT, 0
try:
    got = await pib.conv2d(xs, ws, strides=2, padding="same").numpy()
finally:
    webgl2_rewrites.BLOCKS_AT = threshold
    backend.queue.engine.run = engine_run
{"got": got, "unblocked": unblocked, "x": x, "w": w,
 "draws": [command[1] for command in sent[eager:] if command[0] == "draw"]}
"""
)


def test_a_first_layer_at_stride_2_reads_its_images_as_texel_windows(
    engine_page: EnginePage,
) -> None:
    """The hand model's first layer (3x3, 3 channels, stride 2, SAME) as conv blocks reading 8
    texels per filter row (the block's 4 pixels' 3 taps, 27 elements) instead of one element
    at a time."""
    result = engine_page.run(FIRST_LAYER)
    x, w = np.asarray(result["x"], np.float32), np.asarray(result["w"], np.float32)
    want = _conv2d(x, w, (2, 2), ((0, 1), (0, 1)))
    got = np.asarray(result["got"], np.float32)
    np.testing.assert_allclose(got, want, rtol=F32_RTOL, atol=1e-4)
    np.testing.assert_allclose(got, np.asarray(result["unblocked"]), rtol=F32_RTOL, atol=1e-5)
    assert [d for d in result["draws"] if "_block:" in d] == ["conv2d_block:c3s2k3_4x2"]
