"""Fused elementwise programs: several elementwise steps run as ONE kernel (primitive "fused").

Why: an optimizer update written op by op (Adam: about 15 elementwise ops per variable, plus the
gates that keep a NaN step from landing) costs one GPU dispatch per op, each reading and writing
whole weight-sized buffers; that was three quarters of an MLP training step on the GPU. As one
fused program it is one dispatch per updated tensor, reading each input once.

A program is data, so every backend compiles it its own way (cpu: numpy, step by step; webgpu:
one WGSL kernel; webgl2: one fragment shader) and caches by its value:

    Program = tuple of steps, each (op, args); the LAST step is the result
    op      = a name in UNARY, BINARY, COMPARE or "where" (the elementwise primitives' meanings)
    arg     = ("input", k)  the k-th input tensor of the fused call
            | ("step", j)   the result of step j < this step
            | ("const", c)  a Python float, stored in the program's float dtype

Values are "float" (the program's float dtype) or "bool" (inputs of dtype bool and COMPARE
results): UNARY and BINARY take floats and give a float, COMPARE takes floats and gives a bool,
where(cond, a, b) takes a bool and two floats. The result is a float. Every input has either the
output's shape or shape () (a scalar read at every element), so no expand is ever materialized.

Write programs with `pib.fused(fn, *tensors)` (functional.py): fn receives one symbolic Value per tensor and returns
a Value built with Python operators (+ - * / and unary -) and the functions below.

Programs are differentiable: the VJP of a program is, per float input, another program
(vjp_program), so the activation gradients, losses and optimizers built on them keep gradients
of gradients working. Constants never enter a compiled kernel (GPU backends pass them as
params or uniforms), so programs registered with register_common are compiled at start-up and
serve any learning rate or batch size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

UNARY = ("neg", "exp", "log", "sqrt", "tanh", "sigmoid", "relu", "erf")
BINARY = ("add", "sub", "mul", "div", "pow", "maximum")
COMPARE = ("less", "less_equal", "equal", "not_equal")
SELECT = "where"
# Bounds every backend can compile: inputs are samplers/bindings (webgl2 needs two samplers per
# input on its float16 path and guarantees 16), and steps are straight-line shader code.
MAX_INPUTS = 8
MAX_STEPS = 64

Ref = tuple[str, Any]
Step = tuple[str, tuple[Ref, ...]]
Program = tuple[Step, ...]


def _arity(op: str) -> int:
    if op in UNARY:
        return 1
    if op in BINARY or op in COMPARE:
        return 2
    if op == SELECT:
        return 3
    raise ValueError(
        f"fused: unknown op {op!r}; programs may use {[*UNARY, *BINARY, *COMPARE, SELECT]}"
    )


def step_kinds(program: Program, input_kinds: Sequence[str]) -> list[str]:
    """The kind ("float" or "bool") of every step; raises on any malformed program."""
    if not program:
        raise ValueError("fused: the program has no steps")
    if len(program) > MAX_STEPS:
        raise ValueError(f"fused: {len(program)} steps, at most {MAX_STEPS}")
    kinds: list[str] = []
    for index, step in enumerate(program):
        op, args = step
        if len(args) != _arity(op):
            raise ValueError(f"fused: step {index} ({op}) has {len(args)} args")
        arg_kinds = [_ref_kind(ref, index, input_kinds, kinds) for ref in args]
        wanted = ["bool", "float", "float"] if op == SELECT else ["float"] * len(args)
        if arg_kinds != wanted:
            raise TypeError(f"fused: step {index} ({op}) takes {wanted}, got {arg_kinds}")
        kinds.append("bool" if op in COMPARE else "float")
    if kinds[-1] != "float":
        raise TypeError("fused: the result (the last step) must be a float, not a bool")
    return kinds


def _ref_kind(ref: Ref, index: int, input_kinds: Sequence[str], kinds: list[str]) -> str:
    where, value = ref
    if where == "const" and isinstance(value, float):
        return "float"
    if where == "input" and isinstance(value, int) and 0 <= value < len(input_kinds):
        return input_kinds[value]
    if where == "step" and isinstance(value, int) and 0 <= value < index:
        return kinds[value]
    raise ValueError(f"fused: step {index} has an invalid argument {ref!r}")


def infer(
    program: Program, shapes: Sequence[tuple[int, ...]], dtypes: Sequence[str]
) -> tuple[tuple[int, ...], str]:
    """The result's shape and dtype (the op table's rule for primitive "fused")."""
    if not 1 <= len(shapes) <= MAX_INPUTS:
        raise ValueError(f"fused: takes 1 to {MAX_INPUTS} inputs, got {len(shapes)}")
    floats = {dt for dt in dtypes if dt != "bool"}
    if floats - {"float32", "float64"} or len(floats) > 1:
        raise TypeError(f"fused: inputs must be bool or share one float dtype, got {list(dtypes)}")
    full = {tuple(s) for s in shapes} - {()}
    if len(full) > 1:
        raise ValueError(
            f"fused: every input must have the output's shape or shape (), got {list(shapes)}"
        )
    step_kinds(program, ["bool" if dt == "bool" else "float" for dt in dtypes])
    return (full.pop() if full else ()), (floats.pop() if floats else "float32")


class Value:
    """A symbolic value while a program is traced: operators append steps to its builder."""

    __slots__ = ("_builder", "ref")

    def __init__(self, builder: _Builder, ref: Ref) -> None:
        self._builder, self.ref = builder, ref

    def __add__(self, other: Operand) -> Value:
        return self._builder.emit("add", self, other)

    def __radd__(self, other: Operand) -> Value:
        return self._builder.emit("add", other, self)

    def __sub__(self, other: Operand) -> Value:
        return self._builder.emit("sub", self, other)

    def __rsub__(self, other: Operand) -> Value:
        return self._builder.emit("sub", other, self)

    def __mul__(self, other: Operand) -> Value:
        return self._builder.emit("mul", self, other)

    def __rmul__(self, other: Operand) -> Value:
        return self._builder.emit("mul", other, self)

    def __truediv__(self, other: Operand) -> Value:
        return self._builder.emit("div", self, other)

    def __rtruediv__(self, other: Operand) -> Value:
        return self._builder.emit("div", other, self)

    def __neg__(self) -> Value:
        return self._builder.emit("neg", self)


Operand = Value | float


class _Builder:
    def __init__(self) -> None:
        self.steps: list[Step] = []

    def emit(self, op: str, *args: Operand) -> Value:
        refs = tuple(self._ref(a) for a in args)
        self.steps.append((op, refs))
        return Value(self, ("step", len(self.steps) - 1))

    def _ref(self, arg: Operand) -> Ref:
        if isinstance(arg, Value):
            if arg._builder is not self:
                raise ValueError("fused: a value from another program was used")
            return arg.ref
        if isinstance(arg, int | float) and not isinstance(arg, bool):
            return ("const", float(arg))
        raise TypeError(f"fused: expected a traced value or a number, got {type(arg).__name__}")


def _builder_of(args: Sequence[Operand]) -> _Builder:
    for arg in args:
        if isinstance(arg, Value):
            return arg._builder
    raise TypeError("fused: at least one argument must be a traced value")


def _emit(op: str, *args: Operand) -> Value:
    return _builder_of(args).emit(op, *args)


def _unary(op: str) -> Callable[[Value], Value]:
    def apply(x: Value) -> Value:
        return _emit(op, x)

    apply.__name__ = op
    return apply


def _compare(op: str) -> Callable[[Operand, Operand], Value]:
    def apply(x: Operand, y: Operand) -> Value:
        return _emit(op, x, y)

    apply.__name__ = op
    return apply


exp, log, sqrt = _unary("exp"), _unary("log"), _unary("sqrt")
tanh, sigmoid, relu, erf = _unary("tanh"), _unary("sigmoid"), _unary("relu"), _unary("erf")
less, less_equal = _compare("less"), _compare("less_equal")
equal, not_equal = _compare("equal"), _compare("not_equal")


def pow(x: Operand, y: Operand) -> Value:
    return _emit("pow", x, y)


def maximum(x: Operand, y: Operand) -> Value:
    return _emit("maximum", x, y)


def where(cond: Value, a: Operand, b: Operand) -> Value:
    return _emit("where", cond, a, b)


def relu6(x: Value) -> Value:
    """min(max(x, 0), 6) as maxima (a NaN passes): TensorFlow's Relu6, which backends that fuse
    a convolution's activation into its kernel recognise as RELU6."""
    return -maximum(-maximum(x, 0.0), -6.0)


def trace(fn: Callable[..., Value], count: int) -> Program:
    """The program fn builds from `count` symbolic inputs."""
    builder = _Builder()
    result = fn(*(Value(builder, ("input", k)) for k in range(count)))
    if not isinstance(result, Value) or result._builder is not builder:
        raise TypeError("fused: the function must return a value computed from its inputs")
    if result.ref[0] != "step":  # an input returned as is: still one step, so a new tensor
        builder.emit("add", result, 0.0)
    return _live_steps(tuple(builder.steps))


def _live_steps(program: Program) -> Program:
    """The steps the result depends on, renumbered (tracing may emit values it never uses)."""
    live = {len(program) - 1}
    for index in range(len(program) - 1, -1, -1):
        if index in live:
            live.update(v for where, v in program[index][1] if where == "step")
    number = {old: new for new, old in enumerate(sorted(live))}

    def renumber(ref: Ref) -> Ref:
        return ("step", number[ref[1]]) if ref[0] == "step" else ref

    return tuple(
        (op, tuple(renumber(ref) for ref in args))
        for index, (op, args) in enumerate(program)
        if index in live
    )


RELU6: Program = trace(relu6, 1)


# ---- gradients: a fused program's VJP is fused programs too ------------------------------------

Deriv = Value | float | None  # d step / d input: None for zero, a float for a constant


def vjp_program(program: Program, input_kinds: tuple[str, ...], k: int) -> Program | None:
    """The program g * d(result)/d(input k) over the inputs followed by g (the result's
    gradient), by forward differentiation of the steps; None when the result does not depend
    on input k (a bool, or only through comparisons). The rules are the op table's VJPs."""
    if input_kinds[k] != "float":
        return None
    count = len(input_kinds)

    def gradient(*xs: Value) -> Value | None:
        builder = xs[0]._builder
        emit = builder.emit
        inputs, g = xs[:count], xs[count]
        values: list[Value] = []
        derivs: list[Deriv] = []

        def value(ref: Ref) -> Operand:
            where, v = ref
            return inputs[v] if where == "input" else values[v] if where == "step" else float(v)

        def deriv(ref: Ref) -> Deriv:
            where, v = ref
            if where == "input":
                return 1.0 if v == k else None
            return derivs[v] if where == "step" else None

        def times(d: Deriv, factor: Operand) -> Deriv:
            if d is None:
                return None
            return factor if isinstance(d, float) and d == 1.0 else emit("mul", d, factor)

        def over(d: Deriv, divisor: Operand) -> Deriv:
            return None if d is None else emit("div", d, divisor)

        def negate(d: Deriv) -> Deriv:
            return None if d is None else emit("neg", d)

        def plus(d1: Deriv, d2: Deriv) -> Deriv:
            return d2 if d1 is None else d1 if d2 is None else emit("add", d1, d2)

        def select(cond: Value, d1: Deriv, d2: Deriv) -> Deriv:
            if d1 is None and d2 is None:
                return None
            return emit("where", cond, 0.0 if d1 is None else d1, 0.0 if d2 is None else d2)

        for op, args in program:
            v = emit(op, *(value(r) for r in args))
            values.append(v)
            a, *rest = (value(r) for r in args)
            da, *drest = (deriv(r) for r in args)
            d: Deriv
            if op == "neg":
                d = negate(da)
            elif op == "exp":
                d = times(da, v)
            elif op == "log":
                d = over(da, a)
            elif op == "sqrt":
                d = over(da, emit("add", v, v))
            elif op == "tanh":
                d = times(da, emit("sub", 1.0, emit("mul", v, v)))
            elif op == "sigmoid":
                d = times(da, emit("sub", v, emit("mul", v, v)))
            elif op == "relu":
                d = select(emit("less", 0.0, a), da, None)
            elif op == "erf":  # 2/sqrt(pi) exp(-a^2)
                bell = emit("exp", emit("neg", emit("mul", a, a)))
                d = times(da, emit("mul", bell, 1.1283791670955126))
            elif op in ("add", "sub"):
                db = drest[0]
                d = plus(da, db if op == "add" else negate(db))
            elif op == "mul":
                d = plus(times(da, rest[0]), times(drest[0], a))
            elif op == "div":
                d = plus(over(da, rest[0]), negate(over(times(drest[0], v), rest[0])))
            elif op == "pow":
                lowered = emit("pow", a, emit("sub", rest[0], 1.0))
                d = plus(
                    times(da, emit("mul", rest[0], lowered)),
                    times(drest[0], emit("mul", v, emit("log", a))),
                )
            elif op == "maximum":  # ties send the gradient to the second input, as the op table
                d = select(emit("less", rest[0], a), da, drest[0])
            elif op == SELECT:
                assert isinstance(a, Value)  # a condition is an input or a comparison
                d = select(a, drest[0], drest[1])
            else:  # comparisons: bool results carry no gradient
                d = None
            derivs.append(d)
        last = derivs[-1]
        return None if last is None else emit("mul", g, last)

    builder = _Builder()
    result = gradient(*(Value(builder, ("input", i)) for i in range(count + 1)))
    return None if result is None else _live_steps(tuple(builder.steps))


def used_inputs(program: Program) -> tuple[Program, list[int]]:
    """The program over only the inputs it reads, renumbered, and which inputs those are (a
    gradient program often ignores some: fewer bindings, and the input limit holds)."""
    used = sorted({v for _, args in program for where, v in args if where == "input"})
    number = {old: new for new, old in enumerate(used)}

    def renumber(ref: Ref) -> Ref:
        return ("input", number[ref[1]]) if ref[0] == "input" else ref

    return tuple((op, tuple(renumber(r) for r in args)) for op, args in program), used


# Programs training runs every step, with the kind of each input, registered by the optimizers,
# losses and activation gradients; GPU backends compile these at start-up (their kernels hold
# no constant values, and depend only on the structure and on how each input is read):
INPUT_KINDS = {
    "full": "float, the output's shape",
    "rows": "float, a (..., 1) value broadcast along the last axis (a view)",
    "filled": "float, one value broadcast to the output's shape (a view)",
    "scalar": "float, shape ()",
    "mask": "bool, the output's shape",
    "gate": "bool, shape ()",
}
_COMMON: dict[tuple[Program, tuple[str, ...]], None] = {}
# Those the first training step of the most common model runs (relu layers, softmax
# cross-entropy on logits, the default Adam): a backend whose first use of a kernel is costly
# (webgl2 on a software GPU) prepares these before the first step, the others in the background.
_TYPICAL: dict[tuple[Program, tuple[str, ...]], None] = {}


def register_common(
    program: Program,
    input_kinds: tuple[str, ...],
    gradient_kind: str | None = None,
    wrt: tuple[int, ...] = (),
    typical: bool = False,
) -> None:
    """Registers a program; with `gradient_kind` (how the result's gradient arrives) also the
    programs of its VJP for the inputs `wrt`, which the backward pass of every step runs.
    `typical`: the most common model's first step runs it (typical_programs)."""
    if any(kind not in INPUT_KINDS for kind in input_kinds):
        raise ValueError(f"fused: input kinds are {list(INPUT_KINDS)}, got {input_kinds}")
    values = tuple("bool" if kind in ("gate", "mask") else "float" for kind in input_kinds)
    step_kinds(program, values)
    _COMMON[(program, input_kinds)] = None
    if typical:
        _TYPICAL[(program, input_kinds)] = None
    if gradient_kind is None:
        return
    for k in wrt:
        gradient = vjp_program(program, values, k)
        if gradient is not None:
            compact, used = used_inputs(gradient)
            kinds = (*input_kinds, gradient_kind)
            register_common(compact, tuple(kinds[i] for i in used), typical=typical)


def common_programs() -> list[tuple[Program, tuple[str, ...]]]:
    """The registered programs, in registration order, each once."""
    return list(_COMMON)


def typical_programs() -> list[tuple[Program, tuple[str, ...]]]:
    """The registered programs marked typical, in registration order, each once."""
    return list(_TYPICAL)


# Runs of registered programs over one output shape that training draws back to back (an
# optimizer's rules for one variable): each member is a program and the names of the tensors
# it reads, equal names being one tensor.
Group = tuple[tuple[Program, tuple[str, ...]], ...]
_GROUPS: dict[Group, None] = {}


def register_common_group(members: Sequence[tuple[Program, tuple[str, ...]]]) -> None:
    """Registers programs run one after another over one output shape, member k reading the
    tensors named members[k][1]: a backend that runs such a run as one pass (webgl2's
    multi-target draws) compiles that pass at start-up."""
    for program, names in members:
        read = {value for _, args in program for where, value in args if where == "input"}
        if not read <= set(range(len(names))):
            raise ValueError(f"fused: a group member reads inputs {sorted(read)}, named {names}")
    _GROUPS[tuple((program, tuple(names)) for program, names in members)] = None


def common_groups() -> list[Group]:
    """The registered groups, in registration order, each once."""
    return list(_GROUPS)
