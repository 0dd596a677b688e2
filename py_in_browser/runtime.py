"""Runtime state: the active backend, live-tensor accounting, tidy scopes, profiling and events."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from . import backends
from .backends import Backend, cpu, webgl2, webgpu  # noqa: F401  (importing registers kernels)
from .events import runtime_events  # noqa: F401  (public through this module)

_state: dict[str, Any] = {"backend": None}


def current_backend() -> Backend:
    """The active backend; CPython code that never called init gets the cpu backend.

    Example:
        >>> pib.runtime.current_backend().name
        'cpu'
    """
    if _state["backend"] is None:
        _state["backend"] = backends.BACKENDS["cpu"].factory(None)
    backend: Backend = _state["backend"]
    return backend


def available_backends() -> list[str]:
    """Backends usable in this interpreter, most preferred first.

    In CPython that is ["cpu"]; in the browser also "webgpu" and "webgl2" where the page has them.

    Example:
        >>> "cpu" in pib.available_backends()
        True
    """
    return [n for n in backends.registered_backends() if backends.BACKENDS[n].available()]


async def init(backend: str | None = None, limits: dict[str, Any] | None = None) -> str:
    """Selects a backend (None: the most preferred one that passes its self-test); returns its name.

    `limits` are passed to the backend (e.g. memory limits of a GPU device). Tensors created
    before a switch stay on their old backend.

    Example:
        >>> await pib.init("cpu")
        'cpu'
    """
    usable = available_backends()
    if backend is not None:
        if backend not in usable:
            raise ValueError(f"backend {backend!r} is not available here; available: {usable}")
        candidates = [backend]
    else:
        candidates = usable
    failures: list[str] = []
    for name in candidates:
        chosen = backends.BACKENDS[name].factory(limits)
        try:
            await chosen.start()
            passed = await chosen.self_test()
        except Exception as exc:  # a GPU that cannot start is a reason to try the next backend
            if backend is not None:
                raise RuntimeError(f"backend {name!r} could not start: {exc}") from exc
            failures.append(f"{name}: {exc}")
            continue
        if passed:
            _state["backend"] = chosen
            return name
        if backend is not None:
            raise RuntimeError(f"backend {name!r} failed its numeric self-test")
        failures.append(f"{name}: failed its numeric self-test")
    raise RuntimeError(f"no backend passed its self-test: {failures}")


def use_backend(backend: Backend) -> None:
    """Makes a started, self-tested backend the active one (recovery.py, after a device loss).

    Example:
        >>> backend = pib.runtime.current_backend()
        >>> pib.runtime.use_backend(backend)
        >>> pib.runtime.current_backend() is backend
        True
    """
    _state["backend"] = backend


def get_backend() -> str:
    """The name of the active backend ("cpu", "webgpu" or "webgl2").

    Example:
        >>> pib.get_backend()
        'cpu'
    """
    return current_backend().name


def capabilities() -> dict[str, Any]:
    """What the active backend offers: its name, device limits and supported dtypes (GPU
    backends add their adapter and storage details).

    Example:
        >>> pib.capabilities()["dtypes"]
        ['float32', 'float64', 'int32', 'bool']
    """
    return current_backend().capabilities()


# ---- memory ------------------------------------------------------------------------------------


class _Scoped(Protocol):
    """What tidy scopes and keep need of a tensor (tensor.Tensor registers itself in scopes)."""

    _kept: bool

    def dispose(self) -> None: ...


S = TypeVar("S", bound=_Scoped)


class _Tracker:
    """Counts live tensors and bytes; `collected` counts tensors freed by GC, not by dispose/tidy."""

    def __init__(self) -> None:
        self.num_tensors = 0
        self.num_bytes = 0
        self.num_buffers = 0
        self.collected = 0
        self.scopes: list[list[_Scoped]] = []


tracker = _Tracker()


def memory() -> dict[str, Any]:
    """Live tensor accounting: num_tensors, num_bytes, num_data_buffers, num_collected_by_gc
    (tensors freed by the garbage collector instead of dispose or tidy), the backend's name and
    its own statistics.

    Example:
        >>> before = pib.memory()["num_tensors"]
        >>> t = pib.zeros((10,))
        >>> pib.memory()["num_tensors"] - before
        1
    """
    return {
        "num_tensors": tracker.num_tensors,
        "num_bytes": tracker.num_bytes,
        "num_data_buffers": tracker.num_buffers,
        "num_collected_by_gc": tracker.collected,
        "backend": current_backend().name,
        **current_backend().memory_stats(),
    }


def keep(t: S) -> S:
    """Exempts `t` from disposal by every enclosing tidy scope.

    Returns `t`. Free it yourself with dispose when done.

    Example:
        >>> with pib.tidy():
        ...     kept = pib.keep(pib.ones((2,)))
        ...     dropped = pib.ones((2,))
        >>> kept.is_disposed, dropped.is_disposed
        (False, True)
    """
    t._kept = True
    return t


class _TidyScope:
    def __enter__(self) -> _TidyScope:
        tracker.scopes.append([])
        return self

    def __exit__(self, *exc: object) -> None:
        _close_scope(keep_alive=())


def _ids_within(value: Any, out: set[int]) -> None:
    """Ids of `value` and of everything in its lists, tuples and dicts (at any depth). A tensor of
    the closing scope survives if its id is among them; ids tell without knowing what a tensor is."""
    out.add(id(value))
    if isinstance(value, list | tuple):
        for v in value:
            _ids_within(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            _ids_within(v, out)


def _close_scope(keep_alive: Any) -> None:
    created = tracker.scopes.pop()
    survivor_ids: set[int] = set()
    _ids_within(keep_alive, survivor_ids)
    for t in created:
        if id(t) in survivor_ids:
            if tracker.scopes:  # returned tensors belong to the enclosing scope now
                tracker.scopes[-1].append(t)
        elif not t._kept:
            t.dispose()


F = TypeVar("F", bound=Callable[..., Any])


def tidy(fn: F | None = None) -> Any:
    """`with tidy():` or `tidy(fn)`: frees tensors created inside that are not returned or kept.

    Variables (weights, optimizer slots) are never owned by a scope. As a wrapper, returned
    tensors (also inside lists, tuples and dicts) survive; coroutine functions are supported.

    Example:
        >>> x = pib.ones((3,))
        >>> with pib.tidy():
        ...     temporary = x * 2
        >>> temporary.is_disposed, x.is_disposed
        (True, False)
        >>> double = pib.tidy(lambda t: t * 2)  # the result survives, intermediates do not
        >>> await double(x).numpy()
        array([2., 2., 2.], dtype=float32)
    """
    if fn is None:
        return _TidyScope()
    if inspect.iscoroutinefunction(fn):

        async def run_async(*args: Any, **kwargs: Any) -> Any:
            tracker.scopes.append([])
            result: Any = None
            try:
                result = await fn(*args, **kwargs)
                return result
            finally:
                _close_scope(result)

        return run_async

    def run(*args: Any, **kwargs: Any) -> Any:
        tracker.scopes.append([])
        result: Any = None
        try:
            result = fn(*args, **kwargs)
            return result
        finally:
            _close_scope(result)

    return run


# ---- profiling ---------------------------------------------------------------------------------


async def profile(fn: Callable[[], Any]) -> dict[str, Any]:
    """Runs fn (sync or async) and reports per-kernel time; on cpu, wall time of each kernel call.

    Returns {"backend", "kernels": [{"name", "ms", "calls"}] slowest first, "kernel_ms",
    "wall_ms", "bytes_uploaded", "bytes_downloaded", plus backend details}.

    Example:
        >>> report = await pib.profile(lambda: pib.relu(pib.ones((4,))))
        >>> report["backend"], "relu" in [k["name"] for k in report["kernels"]]
        ('cpu', True)
    """
    backend = current_backend()
    backend.profile_log = {}
    uploaded, downloaded = backend.bytes_uploaded, backend.bytes_downloaded
    start = time.perf_counter()
    try:
        result = fn()
        if inspect.isawaitable(result):
            await result
        await backend.collect_profile()
    finally:
        log, backend.profile_log = backend.profile_log, None
    wall_ms = (time.perf_counter() - start) * 1000.0
    kernels: list[dict[str, Any]] = [
        {"name": op, "ms": sum(ts), "calls": len(ts)} for op, ts in log.items()
    ]
    kernels.sort(key=lambda k: -float(k["ms"]))
    return {
        "backend": backend.name,
        "kernels": kernels,
        "kernel_ms": sum(k["ms"] for k in kernels),
        "wall_ms": wall_ms,
        "bytes_uploaded": backend.bytes_uploaded - uploaded,
        "bytes_downloaded": backend.bytes_downloaded - downloaded,
        **backend.profile_details(),
    }
