"""Elementwise primitives: a table of short WGSL expressions filled into elementwise.wgsl."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .. import OutSpec
from . import codegen
from .plan import BufferRef, DeviceLimits, KernelPlan

# An expression over the loaded inputs a, b, c, given the WGSL types of inputs and output.
Expr = Callable[[tuple[str, ...], str], str]


def _call(fn: str) -> Expr:
    # The op table admits only float dtypes here, and codegen refuses float64: a is f32.
    return lambda types, out: f"{fn}(a)"


def _neg(types: tuple[str, ...], out: str) -> str:
    return "-a"


def _relu(types: tuple[str, ...], out: str) -> str:
    # NaN passes through as in numpy, told by its bits: compilers may turn a compare-and-select
    # into max, which drops NaN (Firefox's GLSL compiler does so for WebGL2).
    if out == "f32":
        return "select(max(a, 0.0), a, f32_is_nan(a))"
    return f"max(a, {out}(0))"


def _infix(symbol: str) -> Expr:
    return lambda types, out: f"a {symbol} b"


def _maximum(types: tuple[str, ...], out: str) -> str:
    return "f32_max_nan(a, b)" if out == "f32" else "max(a, b)"


def _compare(symbol: str) -> Expr:
    return lambda types, out: f"select(0u, 1u, a {symbol} b)"


def _not_equal(types: tuple[str, ...], out: str) -> str:
    # Drivers compile != as an ordered comparison (false for NaN); numpy says NaN != x.
    if types[0] == "f32":
        return "select(0u, 1u, a != b || f32_is_nan(a) || f32_is_nan(b))"
    return "select(0u, 1u, a != b)"


def _where(types: tuple[str, ...], out: str) -> str:
    return "select(c, b, a != 0u)"


def _cast(types: tuple[str, ...], out: str) -> str:
    source = types[0]
    if source == out:
        return "a"
    if out == "u32" and source == "f32":  # to bool: nonzero and NaN are true, as in numpy
        return "select(0u, 1u, a != 0.0 || f32_is_nan(a))"
    if out == "u32":
        return "select(0u, 1u, a != 0i)"
    # f32 -> i32 truncates toward zero like numpy's astype (and saturates instead of wrapping).
    return f"{out}(a)"


EXPRESSIONS: dict[str, Expr] = {
    "neg": _neg,
    "exp": _call("exp_f32"),
    "log": _call("log_f32"),
    "sqrt": _call("sqrt_f32"),
    "tanh": _call("tanh_f32"),
    "sigmoid": _call("sigmoid_f32"),
    "relu": _relu,
    "erf": _call("erf_f32"),
    "add": _infix("+"),
    "sub": _infix("-"),
    "mul": _infix("*"),
    "div": lambda types, out: "a / b",
    "pow": lambda types, out: "pow_f32(a, b)",
    "maximum": _maximum,
    "less": _compare("<"),
    "less_equal": _compare("<="),
    "equal": _compare("=="),
    "not_equal": _not_equal,
    "where": _where,
    "cast": _cast,
}

_NAMES = "abc"
PER_INVOCATION = 4  # elements per invocation of a kernel whose inputs are all contiguous
# Params of a kernel with broadcast inputs: count in row 0, then per input a block of words:
# rank, 3 unused, MAX_RANK dims, MAX_RANK strides (the axes merged where they walk evenly).
BLOCK = 4 + 2 * codegen.MAX_RANK


def input_mode(shape: tuple[int, ...], strides: tuple[int, ...] | None) -> tuple[str, list[int]]:
    """How an input's elements are found from the output index i: "c" at i itself, "r" at i
    modulo its length (a row repeated down the output: a layer's bias, one value per output
    channel), "b" by a strided walk over its merged axes (no axes for a scalar); and its params
    block (merged dims and strides; "r" reads the row length from it)."""
    if strides is None:
        return "c", []
    axes: list[tuple[int, int]] = []
    for dim, stride in zip(shape, strides, strict=True):
        if dim == 1:
            continue
        if axes and axes[-1][1] == stride * dim:
            axes[-1] = (axes[-1][0] * dim, stride)
        else:
            axes.append((dim, stride))
    if len(axes) == 1 and axes[0][1] == 1:
        return "c", []
    block = [len(axes), 0, 0, 0, *codegen.axis_table([d for d, _ in axes])]
    block += codegen.axis_table([st for _, st in axes])
    # One modulo instead of the walk's division and modulo per axis: on a software GPU the walk
    # made a conv layer's bias add cost as much as the convolution.
    row = len(axes) == 2 and axes[0][1] == 0 and axes[1][1] == 1
    return ("r" if row else "b"), block


def input_index(mode: str, base: int) -> str:
    """The WGSL index into an input for output index i, its params block at word `base`."""
    if mode == "c":
        return "i"
    if mode == "r":
        return f"i % word({base + 5}u)"  # the block's second merged dim: the row length
    return f"strided_offset(i, {base}u)"


def _load(k: int, mode: str) -> str:
    return f"let {_NAMES[k]} = in_{k}[{input_index(mode, 4 + BLOCK * k)}];"


def plan_elementwise(
    op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits
) -> KernelPlan:
    """out[i] = EXPR(inputs at i). attrs may carry `input_strides`: per input None (a contiguous
    array of the output's shape) or element strides over the output's shape into that input's
    buffer (a broadcast view: expand fused into the op, so no copy is ever made)."""
    types = tuple(codegen.wgsl_type(dt, op) for dt in out.in_dtypes)
    out_type = codegen.wgsl_type(out.dtype, op)
    expr = EXPRESSIONS[op](types, out_type)
    count = codegen.numel(out.shape)
    if count == 0:
        return KernelPlan(())
    arity = len(types)
    strides = attrs.get("input_strides") or (None,) * arity
    modes, words = "", [count, 0, 0, 0]
    for k in range(arity):
        mode, block = input_mode(out.shape, strides[k])
        modes += mode
        words += block or [0] * BLOCK
    plain = modes == "c" * arity
    if plain:
        words = [count]
    # Contiguous and row inputs: PER_INVOCATION elements per invocation (strided walks stay
    # one each).
    per = 1 if "b" in modes else PER_INVOCATION
    loads = "\n    ".join(_load(k, modes[k]) for k in range(arity))
    key = f"elementwise:{op}:{','.join(types)}->{out_type}"
    if not plain:
        key += f":{modes}"
    return kernel(op, key, types, [out_type], words, per, f"{loads}\n    out[i] = {expr};", limits)


def kernel(
    op: str,
    key: str,
    input_types: Sequence[str],
    out_types: Sequence[str],
    words: Sequence[int],
    per: int,
    body: str,
    limits: DeviceLimits,
    functions: str = "",
    hoisted: str = "",
) -> KernelPlan:
    """The one dispatch of elementwise.wgsl (shared with fused.py): bindings in_0, in_1, ... of
    `input_types`, then the outputs (`out` if one, else out_0, out_1, ... of `out_types`), then
    params `words` (word 0: the element count); `body` stores the outputs at i for `per`
    elements i per invocation, after `hoisted` ran once per invocation."""
    arity = len(input_types)
    names = ["out"] if len(out_types) == 1 else [f"out_{t}" for t in range(len(out_types))]
    wgsl = codegen.render(
        "elementwise.wgsl",
        INPUT_BINDINGS="\n".join(
            f"@group(0) @binding({k}) var<storage, read> in_{k}: array<{t}>;"
            for k, t in enumerate(input_types)
        ),
        OUTPUT_BINDINGS="\n".join(
            f"@group(0) @binding({arity + t}) var<storage, read_write> {name}: array<{out_t}>;"
            for t, (name, out_t) in enumerate(zip(names, out_types, strict=True))
        ),
        PARAMS_BINDING=str(arity + len(out_types)),
        PARAM_ROWS=str(len(codegen.pack_words(words)) // 16),
        FUNCTIONS=functions,
        HOISTED=hoisted,
        BODY=body,
        PER=str(per),
    )
    bindings = [BufferRef("input", k) for k in range(arity)]
    bindings += [BufferRef("output", t) for t in range(len(out_types))]
    workgroups = codegen.grid(op, codegen.groups_for(-(-words[0] // per)), limits)
    return KernelPlan((codegen.dispatch(key, wgsl, bindings, words, workgroups),))
