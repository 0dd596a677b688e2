"""Reverse-mode autograd: a TF-style GradientTape that replays the op table's VJPs backwards."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .ops import FLOAT, OPS, TensorLike, Thunk, call, full

active_tapes: list[GradientTape] = []

# The op name of a record made by record_composite: its attrs hold the composite's own VJP,
# which receives the output's gradient as a tensor.Tensor (Any: this module sits below it).
COMPOSITE = "composite"
CompositeVjp = Callable[[Any], Sequence[Thunk | None]]


def record(op: str, inputs: Sequence[TensorLike], attrs: dict[str, Any], out: TensorLike) -> None:
    for tape in active_tapes:
        tape._record(op, inputs, attrs, out)


@contextmanager
def paused() -> Iterator[None]:
    """Hides every active tape: no tape records what runs inside (stop_gradient, and composites
    that give their own gradient with record_composite)."""
    hidden = active_tapes[:]
    active_tapes.clear()
    try:
        yield
    finally:
        active_tapes.extend(hidden)


def recording() -> bool:
    """Whether some tape records ops now. While a tape computes a gradient it records nothing,
    but an outer tape may (a gradient of a gradient)."""
    return any(tape._recording for tape in active_tapes)


def record_composite(inputs: Sequence[TensorLike], out: TensorLike, vjp: CompositeVjp) -> None:
    """Tells the active tapes that `out` came from `inputs` through ops run under paused():
    `vjp(g)` returns, per input, a thunk computing its gradient or None, as the op table's VJPs
    do. A composite whose gradient is simpler than its ops' (softmax cross-entropy) runs its
    backward pass as one kernel this way; a VJP written in recorded ops keeps gradients of
    gradients working."""
    for tape in active_tapes:
        tape._record(COMPOSITE, inputs, {"vjp": vjp}, out)


class GradientTape:
    """Records ops on watched tensors inside `with`, then `tape.gradient(target, sources)`.

    Trainable Variables are watched automatically (watch_accessed_variables=True); other tensors
    need `tape.watch(t)`. A non-persistent tape can compute gradients once. Gradients of
    unconnected sources are None, as in TensorFlow.

    Example:
        >>> x = pib.tensor([3.0])
        >>> with pib.GradientTape() as tape:
        ...     tape.watch(x)
        ...     y = x * x
        >>> await tape.gradient(y, x).numpy()  # d(x^2)/dx = 2x
        array([6.], dtype=float32)
    """

    def __init__(self, persistent: bool = False, watch_accessed_variables: bool = True) -> None:
        self.persistent = persistent
        self.watch_accessed_variables = watch_accessed_variables
        self._records: list[tuple[str, tuple[TensorLike, ...], dict[str, Any], TensorLike]] = []
        self._tracked: dict[int, TensorLike] = {}
        self._recording = False
        self._used = False

    def __enter__(self) -> GradientTape:
        active_tapes.append(self)
        self._recording = True
        return self

    def __exit__(self, *exc: object) -> None:
        self._recording = False
        active_tapes.remove(self)

    def watch(self, *tensors: TensorLike) -> None:
        """Records the ops that read these tensors from now on, so they can be sources."""
        for t in tensors:
            self._tracked[id(t)] = t

    def _tracks(self, t: TensorLike) -> bool:
        if id(t) in self._tracked:
            return True
        return self.watch_accessed_variables and bool(getattr(t, "trainable", False))

    def _record(
        self, op: str, inputs: Sequence[TensorLike], attrs: dict[str, Any], out: TensorLike
    ):
        if self._recording and any(self._tracks(t) for t in inputs):
            self._records.append((op, tuple(inputs), attrs, out))
            self._tracked[id(out)] = out

    def gradient(
        self, target: TensorLike, sources: Any, output_gradients: TensorLike | None = None
    ) -> Any:
        """d(sum of target * output_gradients)/d(source) for one source or a list/tuple of them.

        output_gradients defaults to ones of the target's shape (the gradient of the sum). The
        result has the sources' structure, None where a source does not affect the target.
        """
        if self._used and not self.persistent:
            raise RuntimeError("a non-persistent GradientTape can compute gradients only once")
        self._used = True
        if target.dtype not in FLOAT:
            raise TypeError(f"gradient target must be a float tensor, got {target.dtype}")
        seed = (
            output_gradients
            if output_gradients is not None
            else full(target.shape, 1.0, target.dtype)
        )
        was_recording, self._recording = self._recording, False
        try:
            grads = self._backward(target, seed)
        finally:
            self._recording = was_recording
        if not self.persistent:
            self._records.clear()
            self._tracked.clear()
        if isinstance(sources, list | tuple):
            return type(sources)(grads.get(id(s)) for s in sources)
        return grads.get(id(sources))

    def _backward(self, target: TensorLike, seed: TensorLike) -> dict[int, TensorLike]:
        grads: dict[int, TensorLike] = {id(target): seed}
        for op, inputs, attrs, out in reversed(self._records):
            g = grads.get(id(out))
            if g is None:
                continue
            if op == COMPOSITE:
                thunks = attrs["vjp"](g)
            else:
                spec = OPS[op]
                if spec.vjp is None:
                    if out.dtype in FLOAT:
                        raise NotImplementedError(f"{op} has no gradient (second-order pooling)")
                    continue
                thunks = spec.vjp(g, inputs, out, attrs)
            for x, thunk in zip(inputs, thunks, strict=True):
                if thunk is None or not self._tracks(x):
                    continue
                gx = thunk()
                prev = grads.get(id(x))
                grads[id(x)] = gx if prev is None else call("add", prev, gx)
        return grads


def grad(fn: Callable[..., TensorLike]) -> Callable[..., Any]:
    """``grad(f)(*tensors)``: gradient of f's (summed) output w.r.t. each positional tensor argument.

    Returns one gradient for one argument, else a list in argument order.

    Example:
        >>> dot_grads = pib.grad(lambda a, b: pib.sum(a * b))
        >>> da, db = dot_grads(pib.tensor([1.0, 2.0]), pib.tensor([3.0, 4.0]))
        >>> await da.numpy(), await db.numpy()
        (array([3., 4.], dtype=float32), array([1., 2.], dtype=float32))
    """

    def gradient_of(*args: Any) -> Any:
        with GradientTape() as tape:
            tape.watch(*args)
            out = fn(*args)
        grads = tape.gradient(out, list(args))
        return grads[0] if len(args) == 1 else grads

    return gradient_of
