"""Merges, in a recorded step, a gemm or depthwise convolution with the elementwise calls run right
after it on its result into one call that applies them as it writes each part of the output:

- gemm or depthwise_conv2d -> + bias -> relu or relu6 (a dense or convolution layer's
  `x @ w + b` and its activation; relu6 as the graph importer writes it) -> gemm_epilogue or
  depthwise_epilogue;
- gemm -> + residual -> bias + that (a MobileNet-style block's last 1x1 convolution, its skip
  connection and its bias in the order TensorFlow's optimizer leaves them) -> gemm_residual.

The merged call applies the same instructions as fused.c in the same operand order
(native/simd.h's epilogue_t), so a replay still gives the eager step's bits and makes one pass over
the layer's output instead of two to four. A merge happens only where nothing but the next call
reads each intermediate result, and no intermediate is an output of the step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from ... import fusion
from .kernels import INPUT_COLS, INPUT_FULL, SIGNATURES, Call, Region, _encoded

ADD = (("add", (("input", 0), ("input", 1))),)
# Activations by native/simd.h's ACT_* code (relu6 as the graph importer writes TF's Relu6).
ACTIVATIONS = {1: (("relu", (("input", 0),)),), 2: fusion.RELU6}
# The fused call's arguments (kernels.SimdKernels.fused): code, constants, inputs, their
# layouts, the row length of each, the output.
_CODE, _CONSTS, _INPUTS, _KINDS, _COLS, _OUT = 1, 3, 5, 6, 7, 8


def _runs(call: Call | None, program: tuple, kinds: list[int]) -> bool:
    """Whether `call` is the fused call of `program` over inputs laid out as `kinds`."""
    if call is None or call.name != "fused":
        return False
    code, consts = _encoded(program)
    return (
        call.args[_CODE].tolist() == code.tolist()
        and call.args[_CONSTS].tolist() == consts.tolist()
        and call.args[_KINDS].tolist() == kinds
    )


def merge(
    calls: list[Call], region: Callable[[np.ndarray], Region], kept: Sequence[Region]
) -> list[Call]:
    """`calls` with every run above merged; `kept` are the step's outputs."""

    def read_later(x: np.ndarray, after: int) -> bool:
        low, high = region(x)
        for start, end in kept:
            if start < high and low < end:
                return True
        for call in calls[after:]:
            for kind, arg in zip(SIGNATURES[call.name][0], call.args, strict=True):
                reads = arg if kind == "a" else [arg] if kind == "p" else []
                for y in reads:
                    start, end = region(y)
                    if start < high and low < end:
                        return True
        return False

    def at(index: int) -> Call | None:
        return calls[index] if index < len(calls) else None

    def only_reader(x: np.ndarray, reader: Call | None, index: int, operand: int) -> bool:
        """`reader` (call `index`) reads x as its fused operand `operand`, and nothing later."""
        return (
            reader is not None
            and region(reader.args[_INPUTS][operand]) == region(x)
            and not read_later(x, index + 1)
        )

    def biased(i: int, out: np.ndarray, columns: int) -> tuple[np.ndarray, int, np.ndarray, int]:
        """After the call i writing `out`: its bias add and activation, as (bias, activation
        code, the last output, calls used); (bias, 0, ...) without an activation; used 0: none."""
        add = at(i + 1)
        if not _runs(add, ADD, [INPUT_FULL, INPUT_COLS]) or not only_reader(out, add, i + 1, 0):
            return out, 0, out, 0
        assert add is not None
        if add.args[_COLS][1] != columns:
            return out, 0, out, 0
        bias, result = add.args[_INPUTS][1], add.args[_OUT]
        for code, program in ACTIVATIONS.items():
            activation = at(i + 2)
            if _runs(activation, program, [INPUT_FULL]) and only_reader(
                result, activation, i + 2, 0
            ):
                assert activation is not None
                return bias, code, activation.args[_OUT], 3
        return bias, 0, result, 2

    def residual(i: int, c: np.ndarray, columns: int) -> tuple[Call, int] | None:
        """gemm i's c + residual, then bias + that: the gemm_residual call and calls used."""
        gemm, add, then = calls[i], at(i + 1), at(i + 2)
        if not _runs(add, ADD, [INPUT_FULL, INPUT_FULL]) or not only_reader(c, add, i + 1, 0):
            return None
        if not _runs(then, ADD, [INPUT_COLS, INPUT_FULL]):
            return None
        assert add is not None and then is not None
        summed, skip = add.args[_OUT], add.args[_INPUTS][1]
        if region(skip) == region(c):  # c + c: the merged call never writes c
            return None
        if not only_reader(summed, then, i + 2, 1) or then.args[_COLS][0] != columns:
            return None
        bias, out = then.args[_INPUTS][0], then.args[_OUT]
        args = (*gemm.args[:10], skip, bias, out, gemm.args[11])
        values = [*gemm.values[:10], region(skip)[0], region(bias)[0], region(out)[0]]
        merged = dataclasses.replace(
            gemm, name="gemm_residual", args=args, values=[*values, gemm.values[11]]
        )
        return merged, 3

    merged: list[Call] = []
    i = 0
    while i < len(calls):
        call = calls[i]
        if call.name == "gemm":
            c, n = call.args[10], call.args[2]
            bias, code, out, used = biased(i, c, n)
            if used:
                args = (*call.args[:10], bias, code, out, call.args[11])
                values = [*call.values[:10], region(bias)[0], code, region(out)[0]]
                values.append(call.values[11])
                merged.append(
                    dataclasses.replace(call, name="gemm_epilogue", args=args, values=values)
                )
                i += used
                continue
            found = residual(i, c, n)
            if found is not None:
                merged.append(found[0])
                i += found[1]
                continue
        if call.name == "depthwise_conv2d":
            geometry, multiplier, x, w, out = call.args
            channels = int(np.asarray(geometry)[3])  # native/simd.h's window_t: n, h, w, c, ...
            bias, code, result, used = biased(i, out, channels * multiplier)
            if used:
                args = (geometry, multiplier, x, w, bias, code, result)
                values = [*call.values[:4], region(bias)[0], code, region(result)[0]]
                merged.append(
                    dataclasses.replace(call, name="depthwise_epilogue", args=args, values=values)
                )
                i += used
                continue
        merged.append(call)
        i += 1
    return merged
