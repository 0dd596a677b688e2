"""Public tensor functions: broadcasting wrappers over primitives and composites built from them."""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import autograd, fusion
from .ops import FLOAT
from .tensor import Tensor, call, full, register_operators, tensor

Axes = int | Sequence[int] | None


# ---- conversion and broadcasting ---------------------------------------------------------------


def _pair(a: Any, b: Any) -> tuple[Tensor, Tensor]:
    """Tensors from a mix of tensors and Python/numpy values, taking the dtype of the tensor."""
    if isinstance(a, Tensor) and not isinstance(b, Tensor):
        b = tensor(b, dtype=a.dtype)
    elif isinstance(b, Tensor) and not isinstance(a, Tensor):
        a = tensor(a, dtype=b.dtype)
    elif not isinstance(a, Tensor):
        a, b = tensor(a), tensor(b)
    if a.dtype != b.dtype:
        raise TypeError(f"operands have different dtypes {a.dtype} and {b.dtype}; cast one first")
    return a, b


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """NumPy broadcasting of shapes, with an error naming both shapes.

    Example:
        >>> pib.functional.broadcast_shapes((2, 1), (3,))
        (2, 3)
    """
    rank = builtins.max(len(s) for s in shapes)
    out = []
    for axis in range(rank):
        dims = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0} - {1}
        if len(dims) > 1:
            raise ValueError(f"shapes {[tuple(s) for s in shapes]} cannot be broadcast together")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def broadcast_to(x: Tensor, shape: Sequence[int]) -> Tensor:
    """x repeated along new leading axes and its size-1 axes to `shape` (numpy's rule).

    Example:
        >>> await pib.broadcast_to(pib.tensor([1.0, 2.0]), (2, 2)).numpy()
        array([[1., 2.],
               [1., 2.]], dtype=float32)
    """
    shape = tuple(shape)
    if x.shape == shape:
        return x
    if len(x.shape) < len(shape):
        x = call("reshape", x, shape=(1,) * (len(shape) - len(x.shape)) + x.shape)
    return x if x.shape == shape else call("expand", x, shape=shape)


def _broadcast(*xs: Tensor) -> list[Tensor]:
    shape = broadcast_shapes(*(x.shape for x in xs))
    return [broadcast_to(x, shape) for x in xs]


def _binary(op: str, a: Any, b: Any) -> Tensor:
    a, b = _pair(a, b)
    a, b = _broadcast(a, b)
    return call(op, a, b)


def _axes(x: Tensor, axis: Axes) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(x.ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    for ax in axes:
        if not -x.ndim <= ax < builtins.max(x.ndim, 1):
            raise ValueError(f"axis {ax} is out of range for a tensor of rank {x.ndim}")
    return tuple(sorted(ax % x.ndim for ax in axes))


# ---- elementwise -------------------------------------------------------------------------------


def add(a: Any, b: Any) -> Tensor:
    """a + b elementwise, numpy broadcasting; a Python number takes the tensor's dtype.

    Both operands must have the same dtype (cast one first). The other binary functions
    (sub, mul, div, pow, maximum, minimum and the comparisons) follow the same rules.

    Example:
        >>> await pib.add(pib.tensor([1.0, 2.0]), 10).numpy()
        array([11., 12.], dtype=float32)
    """
    return _binary("add", a, b)


def sub(a: Any, b: Any) -> Tensor:
    """a - b elementwise, broadcast as `add`.

    Example:
        >>> await pib.sub(10, pib.tensor([1.0, 2.0])).numpy()
        array([9., 8.], dtype=float32)
    """
    return _binary("sub", a, b)


def mul(a: Any, b: Any) -> Tensor:
    """a * b elementwise, broadcast as `add`.

    Example:
        >>> await pib.mul(pib.tensor([[1.0], [2.0]]), pib.tensor([1.0, 10.0])).numpy()
        array([[ 1., 10.],
               [ 2., 20.]], dtype=float32)
    """
    return _binary("mul", a, b)


def div(a: Any, b: Any) -> Tensor:
    """a / b elementwise (true division), broadcast as `add`; x / 0 gives +-inf or nan.

    Example:
        >>> await pib.div(pib.tensor([1.0, 3.0]), 2).numpy()
        array([0.5, 1.5], dtype=float32)
    """
    return _binary("div", a, b)


def pow(a: Any, b: Any) -> Tensor:
    """a ** b elementwise, broadcast as `add`.

    Example:
        >>> await pib.pow(pib.tensor([2.0, 3.0]), 2).numpy()
        array([4., 9.], dtype=float32)
    """
    return _binary("pow", a, b)


def maximum(a: Any, b: Any) -> Tensor:
    """The larger of a and b elementwise, broadcast as `add`.

    Example:
        >>> await pib.maximum(pib.tensor([1.0, 5.0]), 3).numpy()
        array([3., 5.], dtype=float32)
    """
    return _binary("maximum", a, b)


def minimum(a: Any, b: Any) -> Tensor:
    """The smaller of a and b elementwise, broadcast as `add`.

    Example:
        >>> await pib.minimum(pib.tensor([1.0, 5.0]), 3).numpy()
        array([1., 3.], dtype=float32)
    """
    a, b = _pair(a, b)
    a, b = _broadcast(a, b)
    # -max(-a, -b): a NaN on either side wins as in numpy (a where on less(a, b) lost a's NaN);
    # ties still send the gradient to b.
    return call("neg", call("maximum", call("neg", a), call("neg", b)))


def less(a: Any, b: Any) -> Tensor:
    """a < b elementwise as a bool tensor, broadcast as `add`.

    Example:
        >>> await pib.less(pib.tensor([1.0, 5.0]), 3).numpy()
        array([ True, False])
    """
    return _binary("less", a, b)


def less_equal(a: Any, b: Any) -> Tensor:
    """a <= b elementwise as a bool tensor, broadcast as `add`.

    Example:
        >>> await pib.less_equal(pib.tensor([1.0, 3.0]), 3).numpy()
        array([ True,  True])
    """
    return _binary("less_equal", a, b)


def greater(a: Any, b: Any) -> Tensor:
    """a > b elementwise as a bool tensor, broadcast as `add`.

    Example:
        >>> await pib.greater(pib.tensor([1.0, 5.0]), 3).numpy()
        array([False,  True])
    """
    return _binary("less", b, a)


def greater_equal(a: Any, b: Any) -> Tensor:
    """a >= b elementwise as a bool tensor, broadcast as `add`.

    Example:
        >>> await pib.greater_equal(pib.tensor([1.0, 3.0]), 3).numpy()
        array([False,  True])
    """
    return _binary("less_equal", b, a)


def equal(a: Any, b: Any) -> Tensor:
    """a == b elementwise as a bool tensor, broadcast as `add` (the ``==`` operator on
    tensors compares identity instead).

    Example:
        >>> await pib.equal(pib.tensor([1.0, 3.0]), 3).numpy()
        array([False,  True])
    """
    return _binary("equal", a, b)


def not_equal(a: Any, b: Any) -> Tensor:
    """a != b elementwise as a bool tensor, broadcast as `add`.

    Example:
        >>> await pib.not_equal(pib.tensor([1.0, 3.0]), 3).numpy()
        array([ True, False])
    """
    return _binary("not_equal", a, b)


def where(condition: Tensor, a: Any, b: Any) -> Tensor:
    """a where `condition` (a bool tensor) is True, else b; all three broadcast together.

    Example:
        >>> mask = pib.tensor([True, False], dtype="bool")
        >>> await pib.where(mask, pib.tensor([1.0, 2.0]), 0.0).numpy()
        array([1., 0.], dtype=float32)
    """
    a, b = _pair(a, b)
    if condition.dtype != "bool":
        raise TypeError(f"where: condition must be bool, got {condition.dtype}")
    condition, a, b = _broadcast(condition, a, b)
    return call("where", condition, a, b)


def neg(x: Tensor) -> Tensor:
    """-x elementwise.

    Example:
        >>> await pib.neg(pib.tensor([1.0, -2.0])).numpy()
        array([-1.,  2.], dtype=float32)
    """
    return call("neg", x)


def exp(x: Tensor) -> Tensor:
    """e ** x elementwise.

    Example:
        >>> (await pib.exp(pib.tensor([0.0, 1.0])).numpy()).round(4)
        array([1.    , 2.7183], dtype=float32)
    """
    return call("exp", x)


def log(x: Tensor) -> Tensor:
    """Natural logarithm elementwise: log(0) = -inf, log of a negative number is nan.

    Example:
        >>> (await pib.log(pib.tensor([1.0, np.e])).numpy()).round(4)
        array([0., 1.], dtype=float32)
    """
    return call("log", x)


def sqrt(x: Tensor) -> Tensor:
    """Square root elementwise (nan below zero).

    Example:
        >>> await pib.sqrt(pib.tensor([4.0, 9.0])).numpy()
        array([2., 3.], dtype=float32)
    """
    return call("sqrt", x)


def tanh(x: Tensor) -> Tensor:
    """Hyperbolic tangent elementwise.

    Example:
        >>> (await pib.tanh(pib.tensor([0.0, 1.0])).numpy()).round(4)
        array([0.    , 0.7616], dtype=float32)
    """
    return call("tanh", x)


def sigmoid(x: Tensor) -> Tensor:
    """1 / (1 + exp(-x)) elementwise.

    Example:
        >>> await pib.sigmoid(pib.tensor([0.0])).numpy()
        array([0.5], dtype=float32)
    """
    return call("sigmoid", x)


def relu(x: Tensor) -> Tensor:
    """max(x, 0) elementwise.

    Example:
        >>> await pib.relu(pib.tensor([-1.0, 2.0])).numpy()
        array([0., 2.], dtype=float32)
    """
    return call("relu", x)


def erf(x: Tensor) -> Tensor:
    """The Gauss error function 2 / sqrt(pi) * integral from 0 to x of exp(-t^2) dt, elementwise.

    Example:
        >>> (await pib.erf(pib.tensor([0.0, 1.0])).numpy()).round(4)
        array([0.    , 0.8427], dtype=float32)
    """
    return call("erf", x)


def square(x: Tensor) -> Tensor:
    """x * x elementwise.

    Example:
        >>> await pib.square(pib.tensor([-3.0])).numpy()
        array([9.], dtype=float32)
    """
    return call("mul", x, x)


def abs(x: Tensor) -> Tensor:
    """``|x|`` elementwise, as max(x, -x).

    Example:
        >>> await pib.abs(pib.tensor([-3.0, 2.0])).numpy()
        array([3., 2.], dtype=float32)
    """
    return call("maximum", x, call("neg", x))


def clip(x: Tensor, low: float, high: float) -> Tensor:
    """min(max(x, low), high) elementwise.

    Example:
        >>> await pib.clip(pib.tensor([-2.0, 0.5, 3.0]), 0.0, 1.0).numpy()
        array([0. , 0.5, 1. ], dtype=float32)
    """
    return minimum(maximum(x, low), high)


def leaky_relu(x: Tensor, negative_slope: float = 0.2) -> Tensor:
    """max(x, slope * x) for 0 <= slope <= 1 (Keras 3 default slope 0.2).

    Example:
        >>> await pib.leaky_relu(pib.tensor([-1.0, 2.0])).numpy()
        array([-0.2,  2. ], dtype=float32)
    """
    if not 0.0 <= negative_slope <= 1.0:
        raise ValueError(f"leaky_relu: negative_slope must be in [0, 1], got {negative_slope}")
    return maximum(x, mul(x, negative_slope))


def gelu(x: Tensor, approximate: bool = False) -> Tensor:
    """Gaussian error linear unit; exact (erf) by default as in Keras and PyTorch.

    x * Phi(x) with Phi the standard normal CDF, 0.5 * (1 + erf(x / sqrt(2))); approximate=True
    uses 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))).

    Example:
        >>> (await pib.gelu(pib.tensor([0.0, 1.0])).numpy()).round(4)
        array([0.    , 0.8413], dtype=float32)
    """
    if approximate:
        inner = mul(add(x, mul(mul(x, square(x)), 0.044715)), math.sqrt(2.0 / math.pi))
        return mul(mul(x, 0.5), add(tanh(inner), 1.0))
    return mul(mul(x, 0.5), add(erf(mul(x, 1.0 / math.sqrt(2.0))), 1.0))


def cast(x: Tensor, dtype: str) -> Tensor:
    """x converted to dtype ("float32", "int32", "bool", ...); float to int truncates toward
    zero; x itself when it already has that dtype.

    Example:
        >>> await pib.cast(pib.tensor([1.9, -1.9]), "int32").numpy()
        array([ 1, -1], dtype=int32)
    """
    return x if x.dtype == dtype else call("cast", x, dtype=dtype)


def fused(fn: Callable[..., fusion.Value], *inputs: Tensor) -> Tensor:
    """One kernel computing fn elementwise over the tensors `inputs`: fn receives one symbolic
    fusion.Value per tensor and returns one built with + - * / and fusion's functions (fusion.py
    says which inputs and ops a program may use).

    Example:
        >>> x = pib.tensor([1.0, -2.0])
        >>> await pib.fused(lambda v: v * v + 1.0, x).numpy()
        array([2., 5.], dtype=float32)
    """
    return call("fused", *inputs, program=fusion.trace(fn, len(inputs)))


def stop_gradient(x: Tensor) -> Tensor:
    """The same values, invisible to every active tape.

    Example:
        >>> df = pib.grad(lambda x: pib.sum(pib.stop_gradient(x) * x))
        >>> await df(pib.tensor([3.0])).numpy()  # only the second factor is differentiated
        array([3.], dtype=float32)
    """
    with autograd.paused():
        return call("reshape", x, shape=x.shape)


# ---- creation ----------------------------------------------------------------------------------


def zeros(shape: Sequence[int], dtype: str = "float32") -> Tensor:
    """A tensor of zeros of `shape` and `dtype` (default float32).

    Example:
        >>> await pib.zeros((2, 3)).numpy()
        array([[0., 0., 0.],
               [0., 0., 0.]], dtype=float32)
    """
    return full(shape, 0.0, dtype)


def ones(shape: Sequence[int], dtype: str = "float32") -> Tensor:
    """A tensor of ones of `shape` and `dtype` (default float32).

    Example:
        >>> await pib.ones((2,), dtype="int32").numpy()
        array([1, 1], dtype=int32)
    """
    return full(shape, 1.0, dtype)


def zeros_like(x: Tensor) -> Tensor:
    """Zeros with the shape and dtype of x.

    Example:
        >>> pib.zeros_like(pib.tensor([1, 2], dtype="int32")).dtype
        'int32'
    """
    return full(x.shape, 0.0, x.dtype)


def ones_like(x: Tensor) -> Tensor:
    """Ones with the shape and dtype of x.

    Example:
        >>> await pib.ones_like(pib.tensor([5.0, 6.0])).numpy()
        array([1., 1.], dtype=float32)
    """
    return full(x.shape, 1.0, x.dtype)


def one_hot(indices: Tensor, depth: int, dtype: str = "float32") -> Tensor:
    """Compares indices with a [0, depth) ramp; no gather primitive needed.

    The result has shape ``(*indices.shape, depth)`` and `dtype`; an index outside [0, depth) gives
    a row of zeros.

    Example:
        >>> await pib.one_hot(pib.tensor([0, 2], dtype="int32"), 3).numpy()
        array([[1., 0., 0.],
               [0., 0., 1.]], dtype=float32)
    """
    ramp = tensor(np.arange(depth), dtype=indices.dtype)
    column = reshape(indices, (*indices.shape, 1))
    return cast(equal(column, ramp), dtype)


def random_uniform(
    shape: Sequence[int], seed: int = 0, stream: int = 0, counter: Any = 0, bits: int = 24
) -> Tensor:
    """Uniform float32 numbers in [0, 1): element i hashes (seed, stream, counter, i).

    The same arguments give bit-identical values on every backend (see backends/counter_hash.py
    for the hash). `seed` and `stream` (ints in [0, 2^32)) name a sequence of draws, `counter`
    (an int, or a float32/int32 scalar tensor holding an integer in [0, 2^24)) picks one draw of
    it: pass a tensor kept on the device and advance it there, and a recorded training step
    draws new numbers on every replay. Values are multiples of 2^-bits (bits <= 24, exact in
    float32). WebGL2 on float16 storage holds 22 bits of a draw and float32 counters below 2^22
    exactly (value plus compensation), or 11 bits and counters below 2^11 without compensation;
    it refuses more bits.

    Example:
        >>> u = await pib.random_uniform((2, 3), seed=7, counter=0).numpy()
        >>> v = await pib.random_uniform((2, 3), seed=7, counter=1).numpy()  # the next draw
        >>> bool(((0 <= u) & (u < 1)).all()), bool((u != v).any())
        (True, True)
        >>> again = await pib.random_uniform((2, 3), seed=7, counter=0).numpy()
        >>> bool((again == u).all())  # the same arguments: the same numbers
        True
    """
    if not isinstance(counter, Tensor):
        if not isinstance(counter, int | np.integer) or not 0 <= counter < 2**24:
            raise ValueError(
                f"random_uniform: counter must be an int in [0, 2^24), got {counter!r}"
            )
        counter = tensor(float(counter))  # float32: stored exactly by every backend
    attrs = {"shape": tuple(int(d) for d in shape), "seed": int(seed), "stream": int(stream)}
    return call("random_uniform", counter, **attrs, bits=int(bits))


def affine_sample(images: Any, params: Any, size: Sequence[int]) -> Tensor:
    """Resamples NHWC float images through one affine map each, with a gain and offset.

    Row n of `params` (shape (N, 8)) is [a, b, c, d, e, f, gain, offset]. Output pixel (i, j)
    of image n, whose centre has normalized coordinates u = (2j + 1) / OW - 1 and
    v = (2i + 1) / OH - 1 (from -1 to 1 across the image), takes the input's bilinear sample at
    x = a u + b v + c, y = d u + e v + f in the same coordinates of the input, edge pixels
    repeating outside it, times gain plus offset. The result has shape (N, OH, OW, C) for
    `size` = (OH, OW). Identity is [1, 0, 0, 0, 1, 0, 1, 0]; a = -1 mirrors left-right; a, e
    below 1 zoom in (a centre crop); c, f shift. Not differentiable (it feeds data to a model:
    pib.data's preprocessing and augmentation run on it). One GPU kernel on webgpu and webgl2.

    Example:
        >>> image = pib.tensor(np.arange(4.0).reshape(1, 2, 2, 1))
        >>> mirror = pib.tensor([[-1.0, 0, 0, 0, 1, 0, 1, 0]])
        >>> (await pib.affine_sample(image, mirror, (2, 2)).numpy()).reshape(2, 2)
        array([[1., 0.],
               [3., 2.]], dtype=float32)
        >>> doubled = pib.tensor([[1.0, 0, 0, 0, 1, 0, 2, 1]])  # gain 2, offset 1
        >>> (await pib.affine_sample(image, doubled, (1, 1)).numpy()).ravel()  # the centre
        array([4.], dtype=float32)
    """
    images = images if isinstance(images, Tensor) else tensor(images)
    params = params if isinstance(params, Tensor) else tensor(params)
    return call("affine_sample", images, params, size=_pair_of(size, "affine_sample: size"))


# ---- layout ------------------------------------------------------------------------------------


def reshape(x: Tensor, shape: Sequence[int]) -> Tensor:
    """The same elements (row-major order) in a new shape; one -1 is inferred from the size.

    Example:
        >>> pib.reshape(pib.zeros((2, 3)), (3, -1)).shape
        (3, 2)
    """
    shape = tuple(int(d) for d in shape)
    if shape.count(-1) > 1:
        raise ValueError(f"reshape: at most one -1 in shape, got {shape}")
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        if known == 0 or x.size % known:
            raise ValueError(f"reshape: cannot reshape {x.shape} into {shape}")
        shape = tuple(x.size // known if d == -1 else d for d in shape)
    return x if shape == x.shape else call("reshape", x, shape=shape)


def flatten(x: Tensor) -> Tensor:
    """Keeps the batch axis, flattens the rest.

    Example:
        >>> pib.flatten(pib.zeros((2, 3, 4))).shape
        (2, 12)
    """
    return reshape(x, (x.shape[0], -1))


def transpose(x: Tensor, perm: Sequence[int] | None = None) -> Tensor:
    """The axes permuted: output axis i is input axis perm[i]; default reverses them.

    Example:
        >>> pib.transpose(pib.zeros((2, 3, 4)), (0, 2, 1)).shape
        (2, 4, 3)
    """
    perm = tuple(reversed(range(x.ndim))) if perm is None else tuple(p % x.ndim for p in perm)
    return call("transpose", x, perm=perm)


def slice(x: Tensor, begin: Sequence[int], size: Sequence[int]) -> Tensor:
    """x[begin : begin + size] per axis; a size of -1 means up to the end.

    Example:
        >>> t = pib.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
        >>> await pib.slice(t, (0, 1), (-1, 2)).numpy()
        array([[2., 3.],
               [5., 6.]], dtype=float32)
    """
    begin = tuple(
        int(b) % builtins.max(n, 1) if b < 0 else int(b)
        for b, n in zip(begin, x.shape, strict=True)
    )
    size = tuple(n - b if s == -1 else int(s) for b, s, n in zip(begin, size, x.shape, strict=True))
    return call("slice", x, begin=begin, size=size)


def getitem(x: Tensor, index: Any) -> Tensor:
    """Basic indexing with ints and step-1 slices, built on slice + reshape.

    This is what ``t[...]`` on a tensor runs: an int index drops its axis, a slice keeps it.

    Example:
        >>> t = pib.tensor(np.arange(6.0).reshape(2, 3))
        >>> await t[1, 0:2].numpy()
        array([3., 4.], dtype=float32)
    """
    items = index if isinstance(index, tuple) else (index,)
    if len(items) > x.ndim:
        raise IndexError(f"too many indices for a tensor of rank {x.ndim}")
    begin, size, keep = [], [], []
    for axis, n in enumerate(x.shape):
        item = items[axis] if axis < len(items) else builtins.slice(None)
        if isinstance(item, int | np.integer):
            i = int(item) + n if item < 0 else int(item)
            if not 0 <= i < n:
                raise IndexError(f"index {item} is out of bounds for axis {axis} with size {n}")
            begin.append(i)
            size.append(1)
        elif hasattr(item, "indices"):
            start, stop, step = item.indices(n)
            if step != 1:
                raise IndexError("only step-1 slices are supported")
            begin.append(start)
            size.append(builtins.max(stop - start, 0))
            keep.append(axis)
        else:
            raise IndexError(f"unsupported index {item!r}; use ints and slices")
    out = call("slice", x, begin=tuple(begin), size=tuple(size))
    return reshape(out, tuple(size[a] for a in keep))


def pad(x: Tensor, paddings: Sequence[Sequence[int]], constant_values: float = 0.0) -> Tensor:
    """x padded with constant_values: `paddings` gives (before, after) for every axis.

    Example:
        >>> await pib.pad(pib.tensor([[1.0]]), [(0, 1), (1, 0)]).numpy()
        array([[0., 1.],
               [0., 0.]], dtype=float32)
    """
    pads = tuple((int(p[0]), int(p[1])) for p in paddings)
    return call("pad", x, paddings=pads, value=float(constant_values))


def concat(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """The tensors joined along `axis`; their other axes must match.

    Example:
        >>> await pib.concat([pib.tensor([1.0]), pib.tensor([2.0, 3.0])]).numpy()
        array([1., 2., 3.], dtype=float32)
    """
    if not tensors:
        raise ValueError("concat: needs at least one tensor")
    return call("concat", *tensors, axis=axis % tensors[0].ndim)


def expand_dims(x: Tensor, axis: int) -> Tensor:
    """x with a new axis of size 1 at position `axis` of the result (-1: last).

    Example:
        >>> pib.expand_dims(pib.zeros((2, 3)), -1).shape
        (2, 3, 1)
    """
    axis = axis % (x.ndim + 1)
    return reshape(x, (*x.shape[:axis], 1, *x.shape[axis:]))


# ---- reductions --------------------------------------------------------------------------------


def sum(x: Tensor, axis: Axes = None, keepdims: bool = False) -> Tensor:
    """Sum over `axis` (None: all axes; an int or a tuple; negative counts from the end);
    keepdims keeps the reduced axes with size 1. The mean, max and min take the same arguments.

    Example:
        >>> t = pib.tensor([[1.0, 2.0], [3.0, 4.0]])
        >>> await pib.sum(t, axis=0).numpy()
        array([4., 6.], dtype=float32)
        >>> await pib.sum(t).item()
        10.0
    """
    return call("reduce_sum", x, axes=_axes(x, axis), keepdims=keepdims)


def max(x: Tensor, axis: Axes = None, keepdims: bool = False) -> Tensor:
    """Maximum over `axis`, arguments as `sum`.

    Example:
        >>> await pib.max(pib.tensor([[1.0, 5.0], [3.0, 4.0]]), axis=1).numpy()
        array([5., 4.], dtype=float32)
    """
    return call("reduce_max", x, axes=_axes(x, axis), keepdims=keepdims)


def min(x: Tensor, axis: Axes = None, keepdims: bool = False) -> Tensor:
    """Minimum over `axis`, arguments as `sum`.

    Example:
        >>> await pib.min(pib.tensor([[1.0, 5.0], [3.0, 4.0]]), axis=1).numpy()
        array([1., 3.], dtype=float32)
    """
    return neg(max(neg(x), axis, keepdims))


def mean(x: Tensor, axis: Axes = None, keepdims: bool = False) -> Tensor:
    """Arithmetic mean over `axis`, arguments as `sum`.

    Example:
        >>> await pib.mean(pib.tensor([[1.0, 2.0], [3.0, 4.0]]), axis=1, keepdims=True).numpy()
        array([[1.5],
               [3.5]], dtype=float32)
    """
    axes = _axes(x, axis)
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    return mul(sum(x, axes, keepdims), 1.0 / count)


def variance(x: Tensor, axis: Axes = None, keepdims: bool = False) -> Tensor:
    """Biased (population) variance, as Keras BatchNormalization uses.

    mean((x - mean(x))^2) over `axis`, arguments as `sum`.

    Example:
        >>> await pib.variance(pib.tensor([1.0, 3.0])).item()
        1.0
    """
    centered = sub(x, mean(x, axis, keepdims=True))
    return mean(square(centered), axis, keepdims)


def argmax(x: Tensor, axis: int = -1) -> Tensor:
    """Index of the largest value along `axis` (the first one on ties), as int32.

    Example:
        >>> await pib.argmax(pib.tensor([[1.0, 5.0], [3.0, 2.0]])).numpy()
        array([1, 0], dtype=int32)
    """
    return call("argmax", x, axis=_axes(x, axis)[0])


def norm(x: Tensor) -> Tensor:
    """Euclidean norm of all elements (a scalar).

    Example:
        >>> await pib.norm(pib.tensor([3.0, 4.0])).item()
        5.0
    """
    return sqrt(sum(square(x)))


# ---- softmax family ----------------------------------------------------------------------------


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) along `axis`: each slice sums to 1.

    Example:
        >>> (await pib.softmax(pib.tensor([0.0, np.log(3.0)])).numpy()).round(4)
        array([0.25, 0.75], dtype=float32)
    """
    shifted = sub(x, stop_gradient(max(x, axis, keepdims=True)))
    e = exp(shifted)
    return div(e, sum(e, axis, keepdims=True))


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    """x - logsumexp(x), shifted by the (gradient-free) max so exp never overflows.

    Example:
        >>> (await pib.log_softmax(pib.tensor([0.0, 0.0])).numpy()).round(4)
        array([-0.6931, -0.6931], dtype=float32)
    """
    shifted = sub(x, stop_gradient(max(x, axis, keepdims=True)))
    return sub(shifted, log(sum(exp(shifted), axis, keepdims=True)))


# ---- linear algebra and convolution ------------------------------------------------------------


def matmul(a: Any, b: Any) -> Tensor:
    """a @ b with NumPy semantics for rank >= 2 (batch dims broadcast); 1-D operands promoted.

    Example:
        >>> await pib.matmul(pib.tensor([[1.0, 2.0]]), pib.tensor([[3.0], [4.0]])).numpy()
        array([[11.]], dtype=float32)
        >>> pib.matmul(pib.zeros((5, 2, 3)), pib.zeros((3, 4))).shape
        (5, 2, 4)
    """
    a, b = _pair(a, b)
    if a.dtype not in FLOAT:
        raise TypeError(f"matmul needs float tensors, got {a.dtype}")
    squeeze_a, squeeze_b = a.ndim == 1, b.ndim == 1
    if squeeze_a:
        a = reshape(a, (1, a.shape[0]))
    if squeeze_b:
        b = reshape(b, (b.shape[0], 1))
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul: inner dimensions differ: {a.shape} @ {b.shape}")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = broadcast_to(a, (*batch, *a.shape[-2:]))
    b = broadcast_to(b, (*batch, *b.shape[-2:]))
    out = call("matmul", a, b, transpose_a=False, transpose_b=False)
    if squeeze_a or squeeze_b:
        shape = out.shape[:-2] + out.shape[-2:][int(squeeze_a) : 2 - int(squeeze_b)]
        out = reshape(out, shape)
    return out


def _pair_of(value: int | Sequence[int], name: str) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or any(int(v) < 1 for v in pair):
        raise ValueError(f"{name} must be a positive int or a pair of them, got {value!r}")
    return int(pair[0]), int(pair[1])


def resolve_padding(
    padding: str | Sequence[Sequence[int]],
    in_hw: Sequence[int],
    window: Sequence[int],
    strides: Sequence[int],
) -> tuple[tuple[int, int], tuple[int, int]]:
    """'valid', 'same' (TensorFlow rule: extra padding goes after) or explicit pairs.

    Returns ((top, bottom), (left, right)). With "same", the output size is ceil(n / stride).

    Example:
        >>> pib.functional.resolve_padding("same", (4, 4), (3, 3), (2, 2))
        ((0, 1), (0, 1))
    """
    if isinstance(padding, str):
        mode = padding.lower()
        if mode == "valid":
            return (0, 0), (0, 0)
        if mode != "same":
            raise ValueError(f"padding must be 'valid', 'same' or pairs, got {padding!r}")
        pads = []
        for size, k, s in zip(in_hw, window, strides, strict=True):
            total = (-(-size // s) - 1) * s + k - size
            total = total if total > 0 else 0
            pads.append((total // 2, total - total // 2))
        return pads[0], pads[1]
    (t, b), (left, r) = padding
    return (int(t), int(b)), (int(left), int(r))


def conv2d(
    x: Tensor,
    filters: Tensor,
    strides: int | Sequence[int] = 1,
    padding: str | Sequence[Sequence[int]] = "valid",
) -> Tensor:
    """2-D convolution, NHWC input and HWIO filters (TensorFlow layout).

    out[b, i, j, o] = sum over (di, dj, c) of x[b, i * sh + di, j * sw + dj, c] * filters[di, dj, c, o]
    on the padded input. padding: "valid", "same" (output ceil(n / stride), see
    `resolve_padding`) or explicit ((top, bottom), (left, right)).

    Example:
        >>> out = pib.conv2d(pib.ones((1, 3, 3, 1)), pib.ones((2, 2, 1, 1)))
        >>> out.shape, (await out.numpy()).reshape(-1)
        ((1, 2, 2, 1), array([4., 4., 4., 4.], dtype=float32))
        >>> pib.conv2d(pib.ones((1, 3, 3, 1)), pib.ones((2, 2, 1, 1)), padding="same").shape
        (1, 3, 3, 1)
    """
    if x.ndim != 4 or filters.ndim != 4:
        raise ValueError(f"conv2d: x must be NHWC and filters HWIO, got {x.shape}, {filters.shape}")
    st = _pair_of(strides, "strides")
    pads = resolve_padding(padding, x.shape[1:3], filters.shape[:2], st)
    return call("conv2d", x, filters, strides=st, pads=pads)


def depthwise_conv2d(
    x: Tensor,
    filters: Tensor,
    strides: int | Sequence[int] = 1,
    padding: str | Sequence[Sequence[int]] = "valid",
) -> Tensor:
    """Depthwise 2-D convolution, NHWC input and HWCM filters (TensorFlow's DepthwiseConv2dNative):
    every input channel c has its own M filters, and output channel c * M + m is

    out[b, i, j, c * M + m] = sum over (di, dj) of x[b, i * sh + di, j * sw + dj, c] * filters[di, dj, c, m]

    on the padded input. strides and padding as `conv2d`.

    Example:
        >>> x = pib.tensor(np.arange(18.0).reshape(1, 3, 3, 2))
        >>> out = pib.depthwise_conv2d(x, pib.ones((2, 2, 2, 1)))
        >>> out.shape, (await out.numpy())[0, 0, 0]
        ((1, 2, 2, 2), array([16., 20.], dtype=float32))
        >>> pib.depthwise_conv2d(x, pib.ones((3, 3, 2, 2)), strides=2, padding="same").shape
        (1, 2, 2, 4)
    """
    if x.ndim != 4 or filters.ndim != 4:
        raise ValueError(
            f"depthwise_conv2d: x must be NHWC and filters HWCM, got {x.shape}, {filters.shape}"
        )
    if filters.shape[2] != x.shape[3]:
        raise ValueError(
            f"depthwise_conv2d: filters {filters.shape} have {filters.shape[2]} channels, "
            f"x {x.shape} has {x.shape[3]}"
        )
    st = _pair_of(strides, "strides")
    pads = resolve_padding(padding, x.shape[1:3], filters.shape[:2], st)
    return call("depthwise_conv2d", x, filters, strides=st, pads=pads)


def _pool(op: str, x: Tensor, pool_size: Any, strides: Any, padding: Any) -> Tensor:
    if x.ndim != 4:
        raise ValueError(f"{op}: input must be NHWC (rank 4), got shape {x.shape}")
    window = _pair_of(pool_size, "pool_size")
    st = _pair_of(window if strides is None else strides, "strides")
    pads = resolve_padding(padding, x.shape[1:3], window, st)
    return call(op, x, pool_size=window, strides=st, pads=pads)


def max_pool2d(
    x: Tensor, pool_size: Any = 2, strides: Any = None, padding: str = "valid"
) -> Tensor:
    """Maximum over pool_size windows of NHWC x, moved by strides (default: pool_size);
    padding "valid" or "same" as `conv2d` (padded cells never win).

    Example:
        >>> x = pib.tensor(np.arange(16.0).reshape(1, 4, 4, 1))
        >>> (await pib.max_pool2d(x).numpy()).reshape(-1)
        array([ 5.,  7., 13., 15.], dtype=float32)
    """
    return _pool("max_pool2d", x, pool_size, strides, padding)


def avg_pool2d(
    x: Tensor, pool_size: Any = 2, strides: Any = None, padding: str = "valid"
) -> Tensor:
    """Average pooling; with 'same' padding, padded cells are not counted (TensorFlow rule).

    Arguments as `max_pool2d`.

    Example:
        >>> x = pib.tensor(np.arange(4.0).reshape(1, 2, 2, 1))
        >>> (await pib.avg_pool2d(x).numpy()).reshape(-1)
        array([1.5], dtype=float32)
    """
    return _pool("avg_pool2d", x, pool_size, strides, padding)


# Tensor's operators (a + b, a @ b, a < b, a[i], a.T, a.reshape, a.astype) are these functions.
register_operators(
    add=add,
    sub=sub,
    mul=mul,
    div=div,
    pow=pow,
    matmul=matmul,
    less=less,
    less_equal=less_equal,
    greater=greater,
    greater_equal=greater_equal,
    getitem=getitem,
    transpose=transpose,
    reshape=reshape,
    cast=cast,
)
