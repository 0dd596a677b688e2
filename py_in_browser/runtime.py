"""Runtime state: the active backend, live-tensor accounting, tidy scopes, profiling and events."""

from __future__ import annotations

import asyncio
import inspect
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from . import _js, backends, events
from .backends import Backend, cpu, selection, webgl2, webgpu  # noqa: F401  (registers kernels)
from .events import runtime_events  # noqa: F401  (public through this module)

# The active backend and the report of the init that chose it (None before any init).
_state: dict[str, Any] = {"backend": None, "selection": None}
# Every backend init kept that is still alive (tensors keep a switched-away backend alive).
_kept_backends: weakref.WeakSet[Backend] = weakref.WeakSet()


def current_backend() -> Backend:
    """The active backend; CPython code that never called init gets the cpu backend.

    Example:
        >>> pib.runtime.current_backend().name
        'cpu'
    """
    if _state["backend"] is None:
        _state["backend"] = backends.BACKENDS["cpu"].factory(None)
    backend: Backend = _state["backend"]
    _kept_backends.add(backend)  # also one a test or tool installed by hand
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
    """Chooses the backend by measurement and returns its name.

    With backend=None every available candidate is started and self-tested (a convolution, a
    reduction and an optimizer update against numpy within 1e-4); those that pass are timed on
    a small training step within about 1.5 s in all and the fastest is kept, the others closed.
    A named backend skips the timing, still self-tests, and raises BackendSelectionError with
    the reason when it fails. pib.capabilities()["selection"] tells the choice and why each
    other candidate was rejected or ranked lower. In the browser, the engine's worker keeps these
    verdicts between visits on the same browser, GPU and engine build (backends/verdicts.py): a
    backend that passed its self-test then skips it, and a measured choice among the same
    candidates is reused without starting the others; the report says "remembered". Init with
    `limits` always tests afresh. `limits` are passed to every backend (device
    limits to emulate a weaker device, e.g. {"max_texture_size": 512}; test hook:
    {"fail_self_test": ["webgpu"]} makes that backend's self-test fail). Tensors created before
    a switch stay on their old backend.

    Example:
        >>> await pib.init("cpu")
        'cpu'
        >>> pib.capabilities()["selection"]["mode"]
        'forced'
    """
    # A named backend's own probe only: probing the others costs a WebGL2 context (~10-40 ms).
    entry = backends.BACKENDS.get(backend) if backend is not None else None
    if backend is not None and (entry is None or not entry.available()):
        usable = available_backends()
        raise ValueError(f"backend {backend!r} is not available here; available: {usable}")
    previous = _state["backend"]
    if previous is not None and previous.is_lost():
        # Nothing will recover it now: its listeners go (and a WebGPU backend lost with
        # lose_device(restore=False) stops withholding adapters, which this init may need).
        # Retired: models rebuild on the new backend at their next call (resilience.py).
        previous.detach()
        previous.retired = True
    names = [backend] if backend is not None else available_backends()
    for attempt in range(INIT_ATTEMPTS):
        losses = _losses()
        try:
            chosen, report = await selection.choose(names, limits, forced=backend is not None)
            await chosen.prepare()
            await asyncio.sleep(0)  # a WebGPU device destroyed meanwhile reports it by now
        except Exception:
            if attempt + 1 == INIT_ATTEMPTS or _losses() == losses:
                raise
            continue  # a device lost while init tested it: test a new one
        if not chosen.is_lost() or attempt + 1 == INIT_ATTEMPTS:
            break
        chosen.detach()  # lost while it was prepared: start another
        chosen.retired = True
    _state["backend"] = chosen
    _state["selection"] = report
    return chosen.name


# A device lost while init starts, tests or prepares a backend is replaced this many times.
INIT_ATTEMPTS = 3


def _losses() -> int:
    return sum(1 for e in events.runtime_events() if e["type"] in ("context_lost", "device_lost"))


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
    backends add their adapter, storage details and software_renderer; webgl2's
    renderer_masked is True where the browser reports a stand-in for the GPU's name, WebKit's
    "Apple GPU", behind which a software renderer cannot be told apart), and "selection": how
    init chose it (mode "measured" or "forced", and per candidate its status "chosen",
    "slower" or "rejected", the reason, self-test and probe-step milliseconds; "unavailable":
    for each backend that was no candidate here, why, e.g. {"webgl2": "getContext('webgl2')
    returned null in the engine's worker: ..."} in a browser whose workers get no WebGL2).

    Example:
        >>> pib.capabilities()["dtypes"]
        ['float32', 'float64', 'int32', 'bool']
    """
    return {**current_backend().capabilities(), "selection": _state["selection"]}


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
    its own statistics (GPU backends: gpu_bytes and their pools); "backends": per live backend
    (the active one and any earlier one still holding tensors) its gpu_bytes and pool figures;
    in the browser js_refs and py_proxies_traced (see _js.live_js_objects).

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
        "backends": {b.name: b.memory_stats() for b in list(_kept_backends)},
        **_js.live_js_objects(),
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
        _open_scope()
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


def _open_scope() -> None:
    tracker.scopes.append([])
    _js.proxy_scopes.append([])


def _close_scope(keep_alive: Any) -> None:
    created = tracker.scopes.pop()
    survivor_ids: set[int] = set()
    _ids_within(keep_alive, survivor_ids)
    for proxy in _js.proxy_scopes.pop():  # Pyodide proxies made through _js.create_proxy
        if id(proxy) in survivor_ids:
            if _js.proxy_scopes:
                _js.proxy_scopes[-1].append(proxy)
        else:
            _js.destroy_proxy(proxy)
    for t in created:
        if id(t) in survivor_ids:
            if tracker.scopes:  # returned tensors belong to the enclosing scope now
                tracker.scopes[-1].append(t)
        elif not t._kept:
            t.dispose()


F = TypeVar("F", bound=Callable[..., Any])


def tidy(fn: F | None = None) -> Any:
    """`with tidy():` or `tidy(fn)`: frees tensors created inside that are not returned or kept,
    and destroys the Pyodide proxies made inside through the engine (_js.create_proxy).

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
            _open_scope()
            result: Any = None
            try:
                result = await fn(*args, **kwargs)
                return result
            finally:
                _close_scope(result)

        return run_async

    def run(*args: Any, **kwargs: Any) -> Any:
        _open_scope()
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
