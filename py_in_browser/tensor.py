"""Tensor and Variable: shaped, typed handles to backend memory, plus the op dispatcher."""

from __future__ import annotations

import functools
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np

from . import autograd, ops
from .backends import Backend, OutSpec
from .limits import check_allocation
from .runtime import current_backend, tracker

_ITEMSIZE = {"float32": 4, "float64": 8, "int32": 4, "bool": 1}
# Tensors made from host data with at most this many elements keep a copy of it (Tensor._remake),
# and ops on such constants pass that on for at most this many ops (a constant updated in a loop
# is not remade through its whole history).
REMADE_SIZE = 16
REMADE_DEPTH = 8


class LostTensorError(RuntimeError):
    """A tensor whose GPU context or device was lost: the engine rebuilt the models it tracks on
    the new device (resilience.py), but not tensors made by hand, whose data only the lost
    device held. Only that tensor fails; everything made after the recovery works."""


class _Storage:
    """One backend buffer, shared by the tensors that reference it (e.g. a Variable after assign)."""

    __slots__ = ("backend", "handle", "nbytes", "refs")

    def __init__(self, backend: Backend, handle: Any, nbytes: int) -> None:
        self.backend, self.handle, self.nbytes, self.refs = backend, handle, nbytes, 0
        tracker.num_bytes += nbytes
        tracker.num_buffers += 1

    def release(self) -> None:
        self.refs -= 1
        if self.refs == 0:
            # A lost device's memory went with it; a placeholder (lineage.py) never had any.
            if self.handle is not None and not self.backend.retired:
                self.backend.free(self.handle)
            self.handle = None
            tracker.num_bytes -= self.nbytes
            tracker.num_buffers -= 1


class Tensor:
    """An immutable n-d array living on a backend; read it back with `await t.numpy()`.

    `==` and `!=` keep Python identity semantics (tensors are used as dict keys); use
    pib.equal / pib.not_equal for elementwise comparison.

    Operators broadcast as numpy's: ``+ - * / **`` (`add`, `sub`, `mul`, `div`, `pow`), ``@``
    (`matmul`), unary ``-``, ``< <= > >=`` (bool results), and indexing with ints and step-1
    slices. Python numbers take the tensor's dtype; two tensors must share a dtype. dtypes:
    float32 (the default), int32, bool (float64 where the backend supports it). Create tensors
    with `tensor`, `full` or the functions; free them with `dispose` or a `tidy` scope.

    Example:
        >>> t = pib.tensor([[1.0, 2.0], [3.0, 4.0]])
        >>> t.shape, t.dtype
        ((2, 2), 'float32')
        >>> await (t * 2 + 1).numpy()
        array([[3., 5.],
               [7., 9.]], dtype=float32)
        >>> await t[1].numpy()
        array([3., 4.], dtype=float32)
    """

    _scoped = True  # plain tensors belong to the innermost tidy scope
    # How to compute the value again if its device was lost before it was made (lineage.py):
    # set on the results of guarded calls and passed on by ops, until a read settles it.
    _lineage: Any = None
    # How to make a constant again from host data: set by `tensor` on small arrays and by ops on
    # such constants only (a scalar operand of x * 2.0, broadcast); a lineage uses it for an
    # operand that was on the lost device.
    _remake: Callable[[], Tensor] | None = None
    _remake_depth = 0  # ops between _remake's host data and this tensor
    shape: tuple[int, ...]
    dtype: str

    def __init__(self, storage: _Storage, shape: tuple[int, ...], dtype: str) -> None:
        storage.refs += 1
        self._storage: _Storage | None = storage
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype
        self._kept = False
        tracker.num_tensors += 1
        if self._scoped and tracker.scopes:
            tracker.scopes[-1].append(self)

    # ---- identity and life cycle ----

    @property
    def size(self) -> int:
        """Number of elements (the product of the shape; 1 for a scalar)."""
        return int(math.prod(self.shape))  # math.prod: np.prod costs ~40x more per call

    @property
    def ndim(self) -> int:
        """Number of axes (0 for a scalar)."""
        return len(self.shape)

    @property
    def backend(self) -> Backend:
        """The backend whose memory holds the data (raises once disposed)."""
        return self._live_storage().backend

    @property
    def is_disposed(self) -> bool:
        """Whether `dispose` (or a tidy scope) has freed the data."""
        return self._storage is None

    def _live_storage(self) -> _Storage:
        storage = self._storage
        if storage is None:
            raise RuntimeError(
                f"tensor of shape {self.shape} was disposed (by dispose() or a tidy scope)"
            )
        if storage.backend.retired:
            raise LostTensorError(
                f"a {self.dtype} tensor of shape {self.shape} was on the {storage.backend.name} "
                "device that was lost; the engine rebuilt its models on the new device but "
                "cannot rebuild tensors made by hand: create it again from your data (e.g. "
                "pib.tensor(array)) and dispose this one"
            )
        return storage

    def _handle(self) -> Any:
        return self._live_storage().handle

    def dispose(self) -> None:
        """Frees the tensor's memory now; further use raises. Idempotent.

        Example:
            >>> t = pib.ones((1000,))
            >>> t.dispose()
            >>> t.is_disposed
            True
        """
        self._lineage = None
        if self._storage is not None:
            storage, self._storage = self._storage, None
            tracker.num_tensors -= 1
            storage.release()

    def _take_storage(self, other: Tensor) -> None:
        """Holds `other`'s data (and lineage) in place of its own, which is released: a value
        computed again after a loss (lineage.py) lands in the tensor the caller holds. `other`
        is left disposed."""
        if self._storage is None:  # disposed while its value was computed again
            other.dispose()
            self._live_storage()  # raises: disposed
        storage, other._storage = other._storage, None
        if storage is None:
            raise RuntimeError("_take_storage: the other tensor was disposed")
        tracker.num_tensors -= 1
        old, self._storage = self._storage, storage
        assert old is not None
        old.release()
        self._lineage, other._lineage = other._lineage, None

    def __del__(self) -> None:
        # Safety net for tensors dropped without dispose(); counted so leak tests can see them.
        try:
            if self._storage is not None:
                tracker.collected += 1
                self.dispose()
        except Exception:  # interpreter shutdown: module globals may already be gone
            pass

    async def numpy(self) -> np.ndarray:
        """Copies the data back to the host: the one way to read a tensor on every backend.

        On a GPU this waits for the work queued so far; returns a new numpy array.

        Example:
            >>> await pib.tensor([1, 2], dtype="int32").numpy()
            array([1, 2], dtype=int32)
        """
        if self._lineage is not None and _LINEAGE_READER:
            return await _LINEAGE_READER[0](self)
        storage = self._live_storage()
        return await storage.backend.download(storage.handle)

    async def item(self) -> float | int | bool:
        """The value of a one-element tensor as a Python scalar.

        Example:
            >>> await pib.sum(pib.tensor([1.0, 2.0])).item()
            3.0
        """
        if self.size != 1:
            raise ValueError(f"item() needs a one-element tensor, got shape {self.shape}")
        value: float | int | bool = (await self.numpy()).reshape(()).item()
        return value

    def __repr__(self) -> str:
        storage = self._storage
        state = "disposed" if storage is None else storage.backend.name
        if storage is not None and storage.backend.retired:
            state += ", lost"
        return f"{type(self).__name__}(shape={self.shape}, dtype={self.dtype}, {state})"

    def __bool__(self) -> bool:
        raise TypeError("a Tensor has no synchronous truth value; read it with `await t.numpy()`")

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    __hash__ = object.__hash__

    # ---- operators (broadcasting composites in functional.py) ----

    def __add__(self, other: Any) -> Tensor:
        return _operator("add")(self, other)

    def __radd__(self, other: Any) -> Tensor:
        return _operator("add")(other, self)

    def __sub__(self, other: Any) -> Tensor:
        return _operator("sub")(self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return _operator("sub")(other, self)

    def __mul__(self, other: Any) -> Tensor:
        return _operator("mul")(self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return _operator("mul")(other, self)

    def __truediv__(self, other: Any) -> Tensor:
        return _operator("div")(self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return _operator("div")(other, self)

    def __pow__(self, other: Any) -> Tensor:
        return _operator("pow")(self, other)

    def __rpow__(self, other: Any) -> Tensor:
        return _operator("pow")(other, self)

    def __matmul__(self, other: Any) -> Tensor:
        return _operator("matmul")(self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        return _operator("matmul")(other, self)

    def __neg__(self) -> Tensor:
        return apply_op("neg", (self,), {})

    def __lt__(self, other: Any) -> Tensor:
        return _operator("less")(self, other)

    def __le__(self, other: Any) -> Tensor:
        return _operator("less_equal")(self, other)

    def __gt__(self, other: Any) -> Tensor:
        return _operator("greater")(self, other)

    def __ge__(self, other: Any) -> Tensor:
        return _operator("greater_equal")(self, other)

    def __getitem__(self, index: Any) -> Tensor:
        return _operator("getitem")(self, index)

    @property
    def T(self) -> Tensor:
        """The axes reversed (a matrix's transpose), as `transpose` without perm."""
        return _operator("transpose")(self)

    def reshape(self, *shape: Any) -> Tensor:
        """The same data in a new shape, given as a tuple or as arguments; one -1 is inferred.

        Example:
            >>> pib.zeros((2, 6)).reshape(3, -1).shape
            (3, 4)
        """
        target = shape[0] if len(shape) == 1 and isinstance(shape[0], list | tuple) else shape
        return _operator("reshape")(self, target)

    def astype(self, dtype: str) -> Tensor:
        """A copy converted to dtype, as `cast` (float to int truncates toward zero).

        Example:
            >>> await pib.tensor([1.7, -1.7]).astype("int32").numpy()
            array([ 1, -1], dtype=int32)
        """
        return _operator("cast")(self, dtype)


class Variable(Tensor):
    """A mutable tensor for weights and optimizer slots: persists across tidy scopes.

    `trainable` variables are watched by every GradientTape; `name` shows in errors and
    checkpoints. The dtype is inferred from `value` (floats become float32) unless given.

    Example:
        >>> w = pib.Variable([1.0, 2.0], name="w")
        >>> with pib.tidy():
        ...     w.assign(w * 10)
        Variable(shape=(2,), dtype=float32, cpu)
        >>> await w.numpy()
        array([10., 20.], dtype=float32)
    """

    _scoped = False

    def __init__(
        self, value: Any, trainable: bool = True, name: str = "", dtype: str | None = None
    ):
        source = tensor(value, dtype=dtype or _infer_dtype(value))
        storage = source._live_storage()
        super().__init__(storage, source.shape, source.dtype)
        if source is not value:
            source.dispose()
        self.trainable = trainable
        self.name = name

    def assign(self, value: Tensor) -> Variable:
        """Points the variable at `value`'s data (no copy); shape and dtype must match.

        Returns the variable. A non-tensor value is converted to the variable's dtype.

        Example:
            >>> step = pib.Variable(0, trainable=False)
            >>> await step.assign(5).numpy()
            array(5, dtype=int32)
        """
        if not isinstance(value, Tensor):
            value = tensor(value, dtype=self.dtype)
        if value.shape != self.shape or value.dtype != self.dtype:
            raise ValueError(
                f"assign to variable {self.name!r}: expected shape {self.shape} dtype "
                f"{self.dtype}, got shape {value.shape} dtype {value.dtype}"
            )
        new = value._live_storage()
        old = self._storage
        if old is None:
            self._live_storage()  # raises: disposed
        new.refs += 1
        # The old storage may be on a lost device (a model restored after recovery): released.
        assert old is not None
        old.release()
        self._storage = new
        return self

    def _rebuild(self, array: np.ndarray) -> None:
        """Puts `array` (a host copy of this variable) on the current backend in place of the
        storage it had, which may be on a lost device (resilience.py rebuilds models so)."""
        if array.shape != self.shape:
            raise ValueError(f"rebuild {self.name!r}: shape {array.shape}, not {self.shape}")
        backend = current_backend()
        data = np.asarray(array, dtype=self.dtype)
        storage = _Storage(backend, backend.upload(data), data.nbytes)
        storage.refs += 1
        old, self._storage = self._storage, storage
        if old is not None:
            old.release()
        else:  # it had been disposed: live again
            tracker.num_tensors += 1


# Tensor's operators are functional.py's broadcasting functions, but functional.py sits above
# this module (it builds on Tensor), so it registers them here when it is imported, as numpy's
# umath fills in ndarray's number protocol. The package imports functional.py before user code
# can make a tensor; an operator used before that says so.
_OPERATORS: dict[str, Callable[..., Tensor]] = {}
# Tensor.numpy for tensors with a lineage: resilience.read_recovering, registered by resilience.py
# (which sits above this module) when the package is imported.
_LINEAGE_READER: list[Callable[[Tensor], Awaitable[np.ndarray]]] = []


def register_lineage_reader(reader: Callable[[Tensor], Awaitable[np.ndarray]]) -> None:
    """Called by resilience.py: how a tensor that has a lineage is read."""
    _LINEAGE_READER[:] = [reader]


def register_operators(**functions: Callable[..., Tensor]) -> None:
    """Called by functional.py: the function behind each operator, by name (add, getitem, ...)."""
    _OPERATORS.update(functions)


def _operator(name: str) -> Callable[..., Tensor]:
    function = _OPERATORS.get(name)
    if function is None:
        raise RuntimeError(f"Tensor operator {name!r} is unset: import py_in_browser first")
    return function


def _infer_dtype(value: Any) -> str:
    if isinstance(value, Tensor):
        return value.dtype
    kind = np.asarray(value).dtype.kind
    return {"b": "bool", "i": "int32", "u": "int32"}.get(kind, "float32")


def _wrap(backend: Backend, handle: Any, shape: tuple[int, ...], dtype: str) -> Tensor:
    nbytes = int(math.prod(shape)) * _ITEMSIZE[dtype]
    return Tensor(_Storage(backend, handle, nbytes), shape, dtype)


def tensor(data: Any, dtype: str | None = "float32") -> Tensor:
    """Creates a tensor from nested lists, a scalar, a numpy array or a Tensor (cast if needed).

    dtype: "float32" (default), "int32", "bool", or None to infer it (bool, int32 for
    integers, else float32). The data is copied to the current backend.

    Example:
        >>> pib.tensor([[1, 2], [3, 4]]).dtype
        'float32'
        >>> pib.tensor(np.arange(3), dtype=None).dtype
        'int32'
    """
    if dtype is None:
        dtype = _infer_dtype(data)
    if dtype not in _ITEMSIZE:
        raise TypeError(f"dtype must be one of {list(_ITEMSIZE)}, got {dtype!r}")
    if isinstance(data, Tensor):
        return data if data.dtype == dtype else apply_op("cast", (data,), {"dtype": dtype})
    try:
        array = np.asarray(data, dtype=dtype)
    except (TypeError, ValueError) as err:
        raise TypeError(f"tensor(data): cannot convert {type(data).__name__} to {dtype}") from err
    backend = current_backend()
    check_allocation(array.shape, _ITEMSIZE[dtype], tracker.num_bytes)
    made = _wrap(backend, backend.upload(array), array.shape, dtype)
    if array.size <= REMADE_SIZE:
        made._remake = functools.partial(tensor, array.copy(), dtype)
    return made


def full(shape: Sequence[int], value: float, dtype: str = "float32") -> Tensor:
    """A constant tensor: one scalar upload broadcast by expand (no full-size host buffer).

    Example:
        >>> await pib.full((2, 2), 7.0).numpy()
        array([[7., 7.],
               [7., 7.]], dtype=float32)
    """
    shape = tuple(shape)
    scalar = tensor(np.full((1,) * len(shape), value), dtype=dtype)
    if all(d == 1 for d in shape):
        return scalar
    return apply_op("expand", (scalar,), {"shape": shape})


def apply_op(op: str, inputs: Sequence[Tensor], attrs: dict[str, Any]) -> Tensor:
    """Checks the op's rule, runs the backend kernel, wraps the result and tells active tapes."""
    for i, t in enumerate(inputs):
        if not isinstance(t, Tensor):
            raise TypeError(f"{op}: input {i} must be a Tensor, got {type(t).__name__}")
    shape, dtype = ops.infer(op, [t.shape for t in inputs], [t.dtype for t in inputs], attrs)
    # An input with an open lineage gives the result one; one whose device is lost first, so that
    # the result is a placeholder, computed when it is read, whatever the order of the inputs.
    parents = [t._lineage for t in inputs if t._lineage is not None and t._lineage.open()]
    lost = [p for p in parents if p.lost()]
    lineage = (lost or parents)[0].derived(op, list(inputs), attrs) if parents else None
    if lost and lineage is not None:
        out = Tensor(_Storage(lineage.backend, None, 0), shape, dtype)
        out._lineage = lineage
        return out
    backend = inputs[0].backend if inputs else current_backend()
    if any(t.backend is not backend for t in inputs):
        raise ValueError(f"{op}: inputs live on different backends")
    spec = OutSpec(shape, dtype, tuple(t.shape for t in inputs), tuple(t.dtype for t in inputs))
    check_allocation(shape, _ITEMSIZE[dtype], tracker.num_bytes)
    handle = backend.run(op, [t._handle() for t in inputs], attrs, spec)
    out = _wrap(backend, handle, shape, dtype)
    if lineage is not None:
        out._lineage = lineage
    elif inputs and not parents:
        remakes = [t._remake for t in inputs if t._remake is not None]
        depth = 1 + max(t._remake_depth for t in inputs)
        if len(remakes) == len(inputs) and depth <= REMADE_DEPTH:  # a constant of constants
            out._remake = functools.partial(_remade, op, remakes, attrs)
            out._remake_depth = depth
    if autograd.active_tapes:
        autograd.record(op, inputs, attrs, out)
    return out


def _remade(op: str, remakes: list[Callable[[], Tensor]], attrs: dict[str, Any]) -> Tensor:
    """op's result on constants made again from their host data (Tensor._remake)."""
    made = [remake() for remake in remakes]
    try:
        return apply_op(op, made, attrs)
    finally:
        for t in made:
            t.dispose()


def call(op: str, *inputs: Tensor, **attrs: Any) -> Tensor:
    """Runs primitive `op` on tensors: the entry point of the composites in functional.py."""
    return apply_op(op, inputs, attrs)


# The op table's VJPs and the tape run ops through these (see "running ops" in ops.py).
ops.register_executor(ops.Executor(apply_op=apply_op, full=full))
