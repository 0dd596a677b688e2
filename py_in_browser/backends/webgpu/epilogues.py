"""A Conv2D layer's bias add and relu applied by its convolution's kernel as it stores.

Why: a layer computes y = conv2d(x, w), z = y + bias, a = relu(z): three passes over the output.
On SwiftShader the adds and relus of I3's two convolutional layers took about as long as the
convolutions themselves. conv_direct.wgsl can add the bias and apply relu as it stores
(linalg.plan_conv2d's "epilogue"), so the runtime holds a convolution back (HeldConv) while an add
of a bias row to its output, then relu of that, follow, and dispatches one kernel writing a.

y and z are still tensors Python may hold (an autograd tape keeps them until the backward
pass, which never reads them: neither add's gradient nor relu's, which reads a, does). Each
becomes a Lazy: its own kernel, dispatched before the first command that reads its buffer (or
before a replay or a recording starts, which could overwrite or record around its inputs), and
dropped, never dispatched, once freed. Inference frees them at once; a training step's when
its tape goes. webgl2 does the same for its block products (webgl2/epilogues.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import OutSpec
from . import kernels, linalg
from .buffers import GpuHandle
from .plan import DeviceLimits, KernelPlan


@dataclass
class HeldConv:
    """A conv2d whose dispatch waits: its attrs, spec and inputs (x, w), then each tensor the
    layer made from it so far (y; z = y + bias; a = relu of the last), and the bias."""

    attrs: dict[str, Any]
    out: OutSpec
    inputs: tuple[GpuHandle, GpuHandle]
    stages: list[GpuHandle] = field(default_factory=list)
    bias: GpuHandle | None = None
    relu: bool = False

    def last(self) -> GpuHandle:
        return self.stages[-1]


@dataclass(frozen=True)
class Lazy:
    """A tensor's kernel not dispatched yet: dispatched if something reads it, dropped if freed."""

    label: str
    plan: KernelPlan
    inputs: tuple[GpuHandle, ...]
    output: GpuHandle


def can_hold(inputs: list[GpuHandle], out: OutSpec) -> bool:
    """Whether a conv2d may wait for its layer's bias and relu: dense operands, and its kernel
    (conv_direct.wgsl) can apply them."""
    return all(h.strides is None for h in inputs) and linalg.takes_epilogue(out)


def bias_row(held: HeldConv, op: str, inputs: list[GpuHandle]) -> GpuHandle | None:
    """The bias buffer when `op` adds one value per output channel to the held layer's last
    tensor (its y: no bias or relu yet), as a handle on that (channels,) buffer; else None."""
    if op != "add" or held.bias is not None or held.relu or len(inputs) != 2:
        return None
    y, row = inputs
    channels = held.out.shape[-1]
    if y.strides is not None or y.id != held.last().id or y.shape != held.out.shape:
        return None
    if row.strides is None or row.shape != y.shape or row.dtype != "float32":
        return None
    if row.id in {stage.id for stage in held.stages}:
        return None  # a view of the layer's own output, which the held kernel does not write
    # Element (..., c) of the view is element c of its buffer: stride 1 along the channels and
    # 0 along every other axis longer than 1.
    *outer, last = zip(row.shape, row.strides, strict=True)
    if last[1] != 1 or any(stride and dim > 1 for dim, stride in outer):
        return None
    return GpuHandle(row.id, 4 * channels, (channels,), "float32")


def takes_relu(held: HeldConv, op: str, inputs: list[GpuHandle]) -> bool:
    """Whether `op` is relu of the held layer's last tensor (not relu'd yet)."""
    return (
        op == "relu"
        and not held.relu
        and inputs[0].strides is None
        and inputs[0].id == held.last().id
    )


def _epilogue(bias: bool, relu: bool) -> str:
    return ("bias" if bias else "") + ("_relu" if bias and relu else "relu" if relu else "")


def dispatches(held: HeldConv, limits: DeviceLimits) -> tuple[Lazy, list[Lazy]]:
    """The held layer's kernel (writing its last tensor), and a Lazy for each earlier tensor:
    y the plain convolution, z (when relu followed the bias) the convolution plus bias."""
    x, w = held.inputs
    with_bias = (x, w, held.bias) if held.bias is not None else (x, w)
    final = Lazy(
        "conv2d" + ("+bias" if held.bias is not None else "") + ("+relu" if held.relu else ""),
        _plan(held, _epilogue(held.bias is not None, held.relu), limits),
        with_bias,
        held.last(),
    )
    earlier = [Lazy("conv2d", _plan(held, "", limits), (x, w), held.stages[0])]
    if held.bias is not None and held.relu:
        earlier.append(Lazy("conv2d+bias", _plan(held, "bias", limits), with_bias, held.stages[1]))
    return final, earlier


def _plan(held: HeldConv, epilogue: str, limits: DeviceLimits) -> KernelPlan:
    """The held conv2d's plan with `epilogue` (memoized per call site, as every plan)."""
    return kernels.plan("conv2d", {**held.attrs, "epilogue": epilogue}, held.out, limits)
