"""Merges, in a recorded step, a gemm with the bias add and relu run right after it on its result
(a dense or convolution layer's `x @ w + b`, then its activation) into one gemm_epilogue call.

The merged call applies the add and relu to each tile of C as soon as it is summed, with the
instructions fused.c uses and in its operand order (native/gemm.c), so a replay still gives the
eager step's bits and makes one pass over the layer's output instead of three. A merge happens
only where nothing but the next call reads each intermediate result, and no intermediate is an
output of the step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from .kernels import ARG_SOURCES, FUSED_OPS, INPUT_COLS, INPUT_FULL, SIGNATURES, Call, Region

_INPUT, _NONE = ARG_SOURCES.index("input"), -1
# fused.c's code row of a one-step program: add(input 0, input 1), relu(input 0).
_ADD = [FUSED_OPS.index("add"), _INPUT, 0, _INPUT, 1, _NONE, _NONE]
_RELU = [FUSED_OPS.index("relu"), _INPUT, 0, _NONE, _NONE, _NONE, _NONE]


def _one_step(call: Call, row: list[int], kinds: list[int]) -> bool:
    """Whether `call` is the fused program of that one code row over inputs laid out so."""
    if call.name != "fused":
        return False
    code, kinds_now = call.args[1], call.args[6]
    return code.tolist() == [row] and kinds_now.tolist() == kinds


def merge(
    calls: list[Call], region: Callable[[np.ndarray], Region], kept: Sequence[Region]
) -> list[Call]:
    """`calls` with every gemm -> add bias (-> relu) run merged; `kept` are the step's outputs."""

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

    merged: list[Call] = []
    i = 0
    while i < len(calls):
        gemm = calls[i]
        add = calls[i + 1] if i + 1 < len(calls) else None
        if gemm.name != "gemm" or add is None or not _one_step(add, _ADD, [INPUT_FULL, INPUT_COLS]):
            merged.append(gemm)
            i += 1
            continue
        c, n = gemm.args[10], gemm.args[2]
        summand, bias = add.args[5]
        if region(summand) != region(c) or add.args[7][1] != n or read_later(c, i + 2):
            merged.append(gemm)
            i += 1
            continue
        out, used = add.args[8], 2
        relu = calls[i + 2] if i + 2 < len(calls) else None
        if (
            relu is not None
            and _one_step(relu, _RELU, [INPUT_FULL])
            and region(relu.args[5][0]) == region(out)
            and not read_later(out, i + 3)
        ):
            out, used = relu.args[8], 3
        args = (*gemm.args[:10], bias, int(used == 3), out, gemm.args[11])
        values = [*gemm.values[:10], region(bias)[0], int(used == 3), region(out)[0]]
        values.append(gemm.values[11])
        merged.append(dataclasses.replace(gemm, name="gemm_epilogue", args=args, values=values))
        i += used
    return merged
