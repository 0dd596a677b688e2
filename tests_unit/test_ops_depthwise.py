"""pib.depthwise_conv2d against PyTorch (conv2d with groups = channels) as a second oracle: the
forward, both gradients of the VJP built from other primitives, and a gradient of a gradient,
on the hand model's layer geometries (3x3 and 5x5, "same", strides 1 and 2) in float64."""

import asyncio

import numpy as np
import pytest
import torch

import py_in_browser as pib
from py_in_browser import functional

GEOMETRIES = [
    # (x shape NHWC, filter HWCM, strides, padding)
    ((2, 9, 10, 6), (3, 3, 6, 1), 1, "same"),
    ((1, 11, 12, 4), (5, 5, 4, 1), 2, "same"),
    ((3, 8, 7, 2), (3, 3, 2, 3), (2, 1), "valid"),
    ((1, 6, 9, 3), (2, 4, 3, 2), (1, 3), ((2, 1), (0, 3))),
]


def torch_depthwise(x: torch.Tensor, w: torch.Tensor, strides, pads) -> torch.Tensor:
    """NHWC / HWCM through torch's grouped conv2d (NCHW, filters (C*M, 1, KH, KW))."""
    (pt, pb), (pl, pr) = pads
    kh, kw, c, m = w.shape
    xn = torch.nn.functional.pad(x.permute(0, 3, 1, 2), (pl, pr, pt, pb))
    wn = w.permute(2, 3, 0, 1).reshape(c * m, 1, kh, kw)
    return torch.nn.functional.conv2d(xn, wn, stride=strides, groups=c).permute(0, 2, 3, 1)


def ours(x: np.ndarray, w: np.ndarray, probe: np.ndarray, strides, padding):
    """Forward, the two gradients of sum(out * probe), and d/dx of sum(dL/dw * probe_w)."""

    async def run():
        xt, wt = pib.tensor(x, dtype="float64"), pib.tensor(w, dtype="float64")
        with pib.GradientTape(persistent=True) as outer:
            outer.watch(xt)
            with pib.GradientTape() as inner:
                inner.watch(xt, wt)
                out = pib.depthwise_conv2d(xt, wt, strides=strides, padding=padding)
                loss = pib.sum(out * pib.tensor(probe, dtype="float64"))
            dx, dw = inner.gradient(loss, [xt, wt])
            second = pib.sum(dw * pib.tensor(w[::-1].copy(), dtype="float64"))
        ddx = outer.gradient(second, xt)
        return [await t.numpy() for t in (out, dx, dw, ddx)]

    return asyncio.run(run())


@pytest.mark.parametrize("x_shape, w_shape, strides, padding", GEOMETRIES)
def test_forward_and_gradients_match_torch(x_shape, w_shape, strides, padding) -> None:
    rng = np.random.Generator(np.random.PCG64(sum(x_shape)))
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    pair = (strides, strides) if isinstance(strides, int) else strides
    pads = functional.resolve_padding(padding, x_shape[1:3], w_shape[:2], pair)
    xt = torch.tensor(x, requires_grad=True)
    wt = torch.tensor(w, requires_grad=True)
    out_t = torch_depthwise(xt, wt, pair, pads)
    probe = rng.standard_normal(tuple(out_t.shape))
    loss = (out_t * torch.tensor(probe)).sum()
    dx_t, dw_t = torch.autograd.grad(loss, [xt, wt], create_graph=True)
    (ddx_t,) = torch.autograd.grad((dw_t * torch.tensor(w[::-1].copy())).sum(), [xt])
    got = ours(x, w, probe, strides, padding)
    names, want_all = ("out", "dx", "dw", "ddx"), (out_t, dx_t, dw_t, ddx_t)
    for name, mine, theirs in zip(names, got, want_all, strict=True):
        want = theirs.detach().numpy()
        assert mine.shape == want.shape, name
        np.testing.assert_allclose(mine, want, rtol=1e-10, atol=1e-10, err_msg=name)


def test_filters_must_match_the_input_channels() -> None:
    with pytest.raises(ValueError, match="channels"):
        pib.depthwise_conv2d(pib.zeros((1, 4, 4, 3)), pib.zeros((3, 3, 2, 1)))
