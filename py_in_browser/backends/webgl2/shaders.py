"""GLSL ES 3.00 program sources by key: the .frag files and the per-op expression tables."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

import numpy as np

from ... import fusion
from ...fusion import Program
from . import blocks

# Short elementwise kernels: `a`, `b` (and `c` for where's condition) are the input elements.
UNARY = {
    "neg": "-a",
    "exp": "exp_f32(a)",
    "log": "log_f32(a)",
    "sqrt": "sqrt_f32(a)",
    "tanh": "stable_tanh(a)",
    "sigmoid": "stable_sigmoid(a)",
    # NaN passes, as in numpy: GLSL's max(NaN, 0) is 0, and Firefox compiles a < 0.0 ? 0.0 : a
    # into that max.
    "relu": "is_nan(a) ? a : max(a, 0.0)",
    "erf": "erf_as(a)",
}
BINARY = {
    "add": "a + b",
    "sub": "a - b",
    "mul": "a * b",
    "div": "a / b",
    "pow": "numpy_pow(a, b)",
    "maximum": "max_nan(a, b)",
    "less": "float(a < b)",
    "less_equal": "float(a <= b)",
    "equal": "float(a == b)",
    # numpy says NaN != x; drivers may compile != as an ordered comparison (false for NaN).
    "not_equal": "float(a != b || is_nan(a) || is_nan(b))",
}
WHERE = "c != 0.0 ? a : b"
# Every dtype is stored as float (integers are exact to 2^24 in float32, 2^11 in float16).
CAST = {"float32": "a", "int32": "trunc(a)", "bool": "float(a != 0.0 || is_nan(a))"}
# Ops whose float16 results carry a compensation texture (see backend.py: weights stay exact);
# "fused" because optimizers compute weight updates with it, random_uniform so that its draws
# (up to kernels.COMPENSATED_DRAW_BITS) stay exact, affine_sample because it reads its params
# with their low parts: a coordinate rounded to half moves every sample (2.1e-3 relative).
PAIR_OPS = ("add", "sub", "where", "fused", "random_uniform", "affine_sample")
# Activations a small product's draw applies itself (glsl/matmul.frag's epilogue, drawn by
# epilogues.fuse_product): Dense's usual ones. Epilogue "add", "add_<act>" or "<act>", or
# "then_<token>": a two-input fused program of the product and another tensor.
PRODUCT_ACTIVATIONS = ("relu", "sigmoid", "tanh")
PRODUCT_EPILOGUES = ("add", *(f"add_{a}" for a in PRODUCT_ACTIVATIONS), *PRODUCT_ACTIVATIONS)
# Kernels applying a function f to the input elements at one index: key "<kind>:<arg>" is the
# element form, "<kind>4:<arg>" the whole-texel form (see rewrites.vector_variant).
ELEMENTWISE_KINDS = ("unary", "binary", "where", "cast", "fused")
# Fused programs' GLSL functions by token (a hash of the function): the key names the token, so
# equal keys build equal sources, and a key stays short however long its program.
_FUSED: dict[str, tuple[Program, int]] = {}

# Vector kernels (RGBA in and out, 4 elements per texel fetch) and the defines of each variant.
VECTOR_KERNELS: dict[str, dict[str, tuple[str, ...]]] = {
    "matmul4": {
        "nn": ("MM_NN",),
        "nt": ("MM_NT",),
        "tn": ("MM_TN",),
        "nn_aligned": ("MM_NN", "MM_ALIGNED"),
        "nt_aligned": ("MM_NT", "MM_ALIGNED"),
    },
    "conv2d4": {"vec": ("X_VEC",), "scalar": ()},
    "conv2d_backprop_input4": {"vec": ()},
    "conv2d_backprop_filter4": {"vec": ("X_VEC",), "scalar": ()},
}

_POOL_DEFINES = {
    "max": "#define POOL_MAX\n",
    "avg": "#define POOL_AVG\n",
    "max_grad": "#define POOL_MAX_GRAD\n#define GRAD x1\n",
    "avg_grad": "#define POOL_AVG_GRAD\n#define GRAD x0\n",
}


@cache
def _frag(name: str) -> str:
    return resources.files(__package__).joinpath("glsl", f"{name}.frag").read_text()


def _inputs(count: int, pair: bool, periodic: bool) -> str:
    """Uniforms and fetch functions per input: x<k>(flat index) for element kernels, x<k>v(texel
    position) for vector elementwise kernels; pair inputs add their low part. An input with
    fewer elements than the output is a broadcast along leading dims (rewrites.alias): one
    element everywhere, or a period of whole texels, which only `periodic` programs read (its
    integer division and modulo cost more than the rest of a fetch on SwiftShader, which runs
    both sides of a branch: W2's Adam update 2.3 -> 1.2 ms without them)."""
    lines = []
    for k in range(count):
        lines.append(f"uniform sampler2D u_x{k};\nuniform ivec4 u_l{k};")
        where = f"ivec2 x{k}_at(ivec2 p) {{ return u_l{k}.z == 1 ? ivec2(0) : p; }}"
        if periodic:
            where = (
                f"ivec2 x{k}_at(ivec2 p) {{\n  int n = u_l{k}.z;\n"
                f"  if (n >= u_out_size || n == 1) return n == 1 ? ivec2(0) : p;\n"
                f"  return texel_at((p.y * u_out.x + p.x) % (n / 4), u_l{k}.x);\n}}"
            )
        lines.append(where)
        if pair:
            lines.append(
                f"uniform sampler2D u_x{k}_lo;\nuniform int u_has_lo{k};\n"
                f"float x{k}(int i) {{\n  float v = element(u_x{k}, u_l{k}, i);\n"
                f"  return u_has_lo{k} == 1 ? v + element(u_x{k}_lo, u_l{k}, i) : v;\n}}"
            )
            lines.append(
                f"vec4 x{k}v(ivec2 p) {{\n  p = x{k}_at(p);\n"
                f"  vec4 v = texelFetch(u_x{k}, p, 0);\n"
                f"  if (u_has_lo{k} == 1) v += texelFetch(u_x{k}_lo, p, 0);\n"
                f"  return u_l{k}.z == 1 ? vec4(v.x) : v;\n}}"
            )
        else:
            lines.append(f"float x{k}(int i) {{ return element(u_x{k}, u_l{k}, i); }}")
            lines.append(
                f"vec4 x{k}v(ivec2 p) {{\n  vec4 v = texelFetch(u_x{k}, x{k}_at(p), 0);\n"
                f"  return u_l{k}.z == 1 ? vec4(v.x) : v;\n}}"
            )
    return "\n".join(lines) + "\n"


def _function(kind: str, arg: str) -> tuple[str, int]:
    """GLSL `float f(...)` of an elementwise kernel over its inputs' elements, and its number of
    inputs; `a`, `b` (and `c` for where's condition) name them as the tables do."""
    if kind == "fused":
        program, count = _FUSED[arg]
        return _fused_helpers([program]) + _fused_function(program, count), count
    count = {"unary": 1, "binary": 2, "where": 3, "cast": 1}[kind]
    expression = (
        WHERE if kind == "where" else {"unary": UNARY, "binary": BINARY, "cast": CAST}[kind][arg]
    )
    names = ("a", "b") if count < 3 else ("c", "a", "b")
    params = ", ".join(f"float {n}" for n in names[:count])
    return f"float f({params}) {{ return {expression}; }}\n", count


def _per_texel(count: int) -> str:
    """The same-layout form: every input texture has the output's width, height and channels (or
    is one element, or a period of whole texels), so output texel p reads texel p of each input
    and applies f per component."""
    reads = "".join(f"  vec4 v{k} = x{k}v(p);\n" for k in range(count))
    parts = ", ".join("f(" + ", ".join(f"v{k}.{c}" for k in range(count)) + ")" for c in "xyzw")
    return (
        "vec4 value4(int texel) {\n  ivec2 p = ivec2(gl_FragCoord.xy);\n"
        f"{reads}  return vec4({parts});\n}}\n"
    )


def _per_element(count: int) -> str:
    args = ", ".join(f"x{k}(i)" for k in range(count))
    return f"float value(int i) {{ return f({args}); }}\n"


def fused_constant_bits(program: Program) -> tuple[int, ...]:
    """The program's constants in order of use, as the int32 bit patterns of their float32
    values (numpy's rounding, overflow to inf): they reach the shader as a uniform, exactly and
    inf/NaN included, so the compiled program does not depend on them (see fused_token)."""
    values = [value for _, args in program for where, value in args if where == "const"]
    with np.errstate(over="ignore"):
        return tuple(np.array(values, np.float32).view(np.int32).tolist())


def _op_helper(op: str) -> str:
    if op == "where":
        return f"float op_where(float c, float a, float b) {{ return {WHERE}; }}\n"
    if op in UNARY:
        return f"float op_{op}(float a) {{ return {UNARY[op]}; }}\n"
    return f"float op_{op}(float a, float b) {{ return {BINARY[op]}; }}\n"


def _fused_function(program: Program, count: int) -> str:
    """GLSL `float f(i0, ..., i<count-1>)` of a fusion program, its constants in the uniform
    u_c (fused_constant_bits); the op helpers it calls come from _fused_helpers."""
    constants = 0

    def ref(where: str, value: Any) -> str:
        nonlocal constants
        if where == "const":
            constants += 1
            return f"intBitsToFloat(u_c[{constants - 1}])"
        return f"i{value}" if where == "input" else f"s{value}"

    steps = "".join(
        f"  float s{j} = op_{op}({', '.join(ref(*arg) for arg in args)});\n"
        for j, (op, args) in enumerate(program)
    )
    params = ", ".join(f"float i{k}" for k in range(count))
    uniform = f"uniform int u_c[{constants}];\n" if constants else ""
    return f"{uniform}float f({params}) {{\n{steps}  return s{len(program) - 1};\n}}\n"


def _fused_helpers(programs: Sequence[Program]) -> str:
    """The op_<name> functions the programs call, each once."""
    return "".join(_op_helper(op) for op in sorted({op for p in programs for op, _ in p}))


@cache  # planned on every draw: built and hashed once per structure (constants are uniforms,
# so programs equal up to -0.0 vs 0.0 or NaN constants rightly share one token)
def fused_token(program: Program, count: int) -> str:
    """Registers the GLSL f(i0, ..., i<count-1>) of a fusion program (see fusion.py: steps in
    order, the last is the result) and returns its token. Bools are floats 0/1 here, as
    compare results and casts to bool are, so every value is a float. Constants are read from
    the uniform u_c (fused_constant_bits): programs differing only in constants (optimizers
    with other learning rates) share one compiled program, which the warm-up can compile."""
    function = _fused_helpers([program]) + _fused_function(program, count)
    token = hashlib.sha256(function.encode()).hexdigest()[:20]
    _FUSED[token] = (program, count)
    return token


def _multi_target(arg: str) -> tuple[str, int]:
    """Program "fused_multi4:<token>@<i>.<j>...;<token>@...|<classes>;<classes>...": several
    fused programs over one output shape in one pass, program t writing render target t
    (multi_target.py merges their draws). Each names the merged draw's inputs its own inputs
    are, in order; program t reads its constants from u_c<t>, and its <classes> number them by
    value (one number for equal values across the programs, multi_target.merged_key)."""
    members, _, classes = arg.partition("|")
    parts = [
        (_FUSED[token][0], [int(i) for i in at.split(".")])
        for token, _, at in (part.partition("@") for part in members.split(";"))
    ]
    numbers = [[int(c) for c in group.split(".") if c] for group in classes.split(";")]
    count = 1 + max(i for _, at in parts for i in at)
    constants = "".join(
        f"uniform int u_c{t}[{len(group)}];\n" for t, group in enumerate(numbers) if group
    )
    outputs = "".join(f"layout(location = {t}) out vec4 o_{t};\n" for t in range(1, len(parts)))
    reads = "".join(f"  vec4 v{k} = x{k}v(p);\n" for k in range(count))
    results = ", ".join(f"r{t}" for t in range(len(parts)))
    calls = "".join(
        "  f("
        + ", ".join([f"v{k}.{c}" for k in range(count)] + [f"r{t}.{c}" for t in range(len(parts))])
        + ");\n"
        for c in "xyzw"
    )
    writes = "".join(
        f"  {'o_value' if t == 0 else f'o_{t}'} = inside ? r{t} : vec4(0.0);\n"
        for t in range(len(parts))
    )
    body = (
        f"#define BLOCK_KERNEL\n{_frag('math')}\n{_fused_helpers([p for p, _ in parts])}"
        f"{constants}{_shared_function(parts, numbers, count)}{outputs}"
        "void write_block(ivec2 p) {\n"
        "  bool inside = (p.y * u_out.x + p.x) * u_out.y < u_out_size;\n"
        f"{reads}  vec4 {results};\n{calls}{writes}}}\n"
    )
    return body, count


def _shared_function(
    parts: Sequence[tuple[Program, list[int]]], numbers: Sequence[Sequence[int]], count: int
) -> str:
    """GLSL `void f(float i0, ..., out float r0, ...)`: r<t> is program t's result over the
    merged inputs, and a step that is the same op on the same values as an earlier one (same
    merged inputs, constants of one class, equal earlier steps) is not computed again: Adam's
    weight rule recomputes the new m and v that the m and v rules write, 7 of its 14 steps."""
    values: dict[str, str] = {}  # a step's call text -> the variable holding it
    first_slot: dict[int, str] = {}  # constant class -> the uniform element that holds it
    lines, results = [], []
    for t, ((program, at), classes) in enumerate(zip(parts, numbers, strict=True)):
        names: list[str] = []  # program t's step j -> its variable
        constants = iter(enumerate(classes))
        for op, args in program:
            operands = []
            for where, value in args:
                if where == "input":
                    operands.append(f"i{at[value]}")
                elif where == "step":
                    operands.append(names[value])
                else:
                    i, number = next(constants)
                    operands.append(first_slot.setdefault(number, f"intBitsToFloat(u_c{t}[{i}])"))
            call = f"op_{op}({', '.join(operands)})"
            if call not in values:
                values[call] = f"s{len(values)}"
                lines.append(f"  float {values[call]} = {call};\n")
            names.append(values[call])
        results.append(f"  r{t} = {names[-1]};\n")
    params = [f"float i{k}" for k in range(count)] + [f"out float r{t}" for t in range(len(parts))]
    return f"void f({', '.join(params)}) {{\n{''.join(lines)}{''.join(results)}}}\n"


def _concat(count: int) -> str:
    """Input k covers axis positions [u_offsets[k], u_offsets[k + 1]) of the output."""
    branches = "".join(
        f"  if (a < u_offsets[{k + 1}]) return x{k}((outer * (u_offsets[{k + 1}] - u_offsets[{k}])"
        f" + a - u_offsets[{k}]) * u_inner + inner);\n"
        for k in range(count)
    )
    return (
        f"uniform int u_inner;\nuniform int u_total;\nuniform int u_offsets[{count + 1}];\n"
        "float value(int i) {\n  int block = u_total * u_inner;\n  int outer = i / block;\n"
        "  int a = (i % block) / u_inner;\n  int inner = i % u_inner;\n"
        f"{branches}  return 0.0;\n}}\n"
    )


def _product_epilogue(epilogue: str) -> tuple[str, int]:
    """glsl/matmul.frag's defines (and activation() or f()) for "add", "add_<act>", "<act>" or
    "then_<token>", and the program's number of inputs."""
    if epilogue.startswith("then_"):
        function, _ = _function("fused", epilogue.removeprefix("then_"))
        return f"#define EPILOGUE_THEN\n{_frag('math')}\n{function}", 3
    add, _, act = epilogue.partition("_") if epilogue.startswith("add") else ("", "", epilogue)
    defines = "#define EPILOGUE_ADD\n" if add else ""
    if act:
        defines += f"#define EPILOGUE_ACT\n{_frag('math')}\n"
        defines += f"float activation(float a) {{ return {UNARY[act]}; }}\n"
    return defines, 3 if add else 2


def _body(kind: str, arg: str) -> tuple[str, int]:
    """The op-specific part of a program and its number of inputs."""
    base = kind.removesuffix("4")
    if base in ELEMENTWISE_KINDS:
        function, count = _function(base, arg)
        if base != kind:
            return f"#define TEXEL_KERNEL\n{_frag('math')}\n{function}{_per_texel(count)}", count
        return f"{_frag('math')}\n{function}{_per_element(count)}", count
    if kind == "fused_multi4":
        return _multi_target(arg)
    if kind in ("transpose4", "patches4", "sum_rows4"):
        return "#define TEXEL_KERNEL\n" + _frag(kind), 1
    if kind == "depthwise_conv2d4":  # arg "r": the filter is an R texture (else RGBA)
        return "#define TEXEL_KERNEL\n" + "#define R_FILTER\n" * (arg == "r") + _frag(kind), 2
    if kind == "sum_parts4":  # arg "", "bias", "relu" or "bias_relu": the fused epilogue
        defines = "".join(f"#define {part.upper()}\n" for part in arg.split("_") if part)
        return f"#define TEXEL_KERNEL\n{defines}{_frag(kind)}", 2 if "bias" in arg else 1
    if kind == "fill4":  # a one-element tensor everywhere
        return "#define TEXEL_KERNEL\nvec4 value4(int t) { return vec4(x0v(ivec2(0)).x); }\n", 1
    if kind == "copy4":  # same elements, same channels, another texture shape (reshape, copy)
        return "#define TEXEL_KERNEL\nvec4 value4(int t) { return x0v(texel_at(t, u_l0.x)); }\n", 1
    if kind == "reduce":  # "sum", "max", "argmax"; "<that>_axis": reduce.frag's ONE_AXIS
        reduction, _, axis = arg.partition("_")
        defines = f"#define REDUCE_{reduction.upper()}\n" + ("#define ONE_AXIS\n" if axis else "")
        return f"{defines}{_frag('reduce')}", 1
    if kind == "pool4":  # whole-texel pooling: 4 channels per fragment
        arg, disjoint, _ = arg.partition("_disjoint")  # "max_grad_disjoint": windows tile
        grad = {
            "max_grad": "#define GRAD u_x1\n#define GRAD_WIDTH u_l1.x\n",
            "avg_grad": "#define GRAD u_x0\n#define GRAD_WIDTH u_l0.x\n",
        }.get(arg, "")
        defines = _POOL_DEFINES[arg].split("#define GRAD")[0] + grad
        defines += "#define POOL_DISJOINT\n" if disjoint else ""
        return "#define TEXEL_KERNEL\n" + defines + _frag("pool4"), 2 if arg == "max_grad" else 1
    if kind == "pool":
        return _POOL_DEFINES[arg] + _frag("pool"), 2 if arg == "max_grad" else 1
    if kind == "concat":
        return _concat(int(arg)), int(arg)
    if kind in ("strided", "rows", "random_uniform", "image_rgb", "flip_filter"):
        return _frag(kind), 1
    # "nn_4x2", "4x2.relu", "aligned_4x2.relu6", "k5s1_4x1.bias"
    if kind in ("matmul_block", "conv2d_block", "depthwise_block", "block_interleave"):
        # ".bias", ".add", ".add.bias", ".maxpool", ".maxpool.bias" (blocks), ".relu", ".relu6"
        # (interleave)
        arg, _, epilogue = arg.partition(".")
        variant, _, shape = arg.rpartition("_")
        rows, cols = (int(d) for d in shape.split("x"))
        if kind == "block_interleave":
            source = blocks.interleave_source(rows, cols, epilogue, variant == "aligned")
            return source, rows * cols
        bias = epilogue.endswith("bias")
        if kind == "depthwise_block":  # "k<window>s<stride>[r][t<pad>][-<activation>]"
            variant, _, activation = variant.partition("-")
            parts = re.fullmatch(r"k(\d+)s(\d+)(r?)(?:t(\d+))?", variant)
            assert parts is not None, variant
            window, stride, r_filter, pad = parts.groups()
            targets = (int(pad), activation) if pad is not None else None
            source = blocks.depthwise_source(
                int(window), int(stride), rows, bias, targets, r_filter=bool(r_filter)
            )
            return source, (rows if targets else 1) + 1 + bias
        if kind == "conv2d_block":
            pool, residual = epilogue.startswith("maxpool"), epilogue.startswith("add")
            if variant.startswith("pwt"):  # "pwt", "pwt-relu6": reading a depthwise's targets
                activation = variant.partition("-")[2]
                source = blocks.pointwise_source(rows, cols, bias, residual, targets=activation)
                return source, rows + 1 + bias + residual
            if variant in ("pw", "pwc"):
                source = blocks.pointwise_source(rows, cols, bias, residual, variant == "pwc")
            else:
                source = blocks.conv2d_source(variant, rows, cols, bias, pool, residual)
            return source, 2 + bias + residual
        return blocks.matmul_source(variant, rows, cols, bias), 3 if bias else 2
    if kind in VECTOR_KERNELS:  # "matmul4:nn", "conv2d4:vec", ...: whole-texel kernels
        defines = "".join(f"#define {d}\n" for d in VECTOR_KERNELS[kind][arg])
        return f"#define TEXEL_KERNEL\n{defines}{_frag(kind)}", 2
    if kind == "matmul" and arg:
        defines, count = _product_epilogue(arg)
        return defines + _frag(kind), count
    return _frag(kind), 2  # matmul, the three convolutions and depthwise_conv2d


@cache
def program_source(key: str) -> str:
    """Key "kind[:arg][+periodic][+pair]", e.g. "binary:add+pair", "reduce:sum", "matmul",
    "concat:3", "fused4:<token>" (a program registered by fused_token), "binary4:add+periodic"
    (a whole-texel kernel with an input that repeats a period of whole texels: _inputs)."""
    name, *variants = key.split("+")
    kind, _, arg = name.partition(":")
    body, count = _body(kind, arg)
    pair = "pair" in variants
    defines = "#define PAIR_OUTPUT\nlayout(location = 1) out vec4 o_lo;\n" if pair else ""
    inputs = _inputs(count, pair, "periodic" in variants)
    return f"{_frag('header')}{defines}{inputs}{body}\n{_frag('main')}"


def fused_warmup_keys() -> list[str]:
    """The optimizers' update programs (fusion.common_programs) in both forms: which one a draw
    takes depends on the layouts of its tensors."""
    keys = []
    for program, kinds in fusion.common_programs():
        token = fused_token(program, len(kinds))
        keys += [f"fused:{token}", f"fused4:{token}"]
    return keys


def product_then_programs() -> list[Program]:
    """The registered programs of two dense float inputs (the activations' gradients, a squared
    error): the fused programs a small product's draw may take as its epilogue."""
    return [program for program, kinds in fusion.common_programs() if kinds == ("full", "full")]


def product_then_key(program: Program) -> str:
    return f"matmul:then_{fused_token(program, 2)}"


def warmup_keys() -> list[str]:
    """Every program a training step can need, compiled ahead during start()."""
    keys = [f"unary:{op}" for op in UNARY] + [f"binary:{op}" for op in BINARY]
    keys += ["where", *(f"cast:{d}" for d in ("float32", "int32", "bool")), "strided", "rows"]
    keys += [f"reduce:{r}{a}" for r in ("sum", "max", "argmax") for a in ("", "_axis")]
    keys += ["matmul", "conv2d", "conv2d_backprop_input", "conv2d_backprop_filter"]
    keys += [f"matmul:{epilogue}" for epilogue in PRODUCT_EPILOGUES]
    keys += [product_then_key(program) for program in product_then_programs()]
    keys += [f"pool:{p}" for p in _POOL_DEFINES] + ["concat:2", "random_uniform", "flip_filter"]
    keys += [f"{kind}:{arg}" for kind, args in VECTOR_KERNELS.items() for arg in args]
    keys += [f"unary4:{op}" for op in UNARY] + [f"binary4:{op}" for op in BINARY]
    keys += [f"binary4:{op}+periodic" for op in ("add", "sub", "mul", "div")]  # bias-like views
    keys += [
        "where4",
        *(f"cast4:{d}" for d in ("float32", "int32", "bool")),
        "fill4",
        "copy4",
        "transpose4",
        "patches4",
        "sum_parts4",
        "sum_rows4",
    ]
    keys += [f"pool4:{p}" for p in _POOL_DEFINES] + ["pool4:max_grad_disjoint"]
    return keys
