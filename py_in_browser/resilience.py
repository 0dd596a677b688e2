"""Recovery everywhere: a GPU context or device lost at any moment, not only inside fit.

Every engine call that touches the device (Sequential's predict, evaluate, train_on_batch, fit,
get_weights, save, save_checkpoint, export_tfjs; pib.data.top_k and classify_bitmap; graph-model
runs) goes through `guarded`. Before the call, a lost backend is recovered; when the call fails
because the device went away during it, or finishes on a device that was lost meanwhile (its
results may be garbage, a lost WebGL context draws nothing), the backend is recovered and the
call runs again. Recovering (`recover`, shared by every caller that notices the same loss, and
started by itself when the browser reports a loss between calls) waits for the device to come
back (webgl2: webglcontextrestored on the same canvas; webgpu: a fresh adapter and device);
when it does not within TIMEOUT_S, webgl2 gets a new context on a new canvas, then the next
backend of recovery.CHAIN is tried. The lost backend is then retired: its tensors' data is gone.

What the engine rebuilds on the new device: the variables of every `DeviceState`. A model keeps
one (the hook a graph model uses too): host copies of its variables (weights, optimizer slots and
step, Dropout draw counters) brought up to date at the end of each fit, set_weights and load, and
the train_on_batch steps run since (their inputs kept on the host), which a rebuild replays: the
state after the replay is the one the lost device held, bit for bit on the same kind of backend.
Tensors made by hand have no host copy: using one after its device was lost raises
tensor.LostTensorError naming its shape, and nothing else is affected.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import numpy as np

from . import autograd, events, lineage, runtime
from .backends import Backend
from .tensor import LostTensorError, Tensor, Variable, register_lineage_reader

T = TypeVar("T")

TIMEOUT_S = 10.0  # how long a lost device may take to come back before a new one is made
RETRIES = 3  # runs of one call after the first, each after a loss
LOSS_REPORT_S = 1.0  # how long a failed call waits for a loss the browser reports late
# A call failing with these was given bad input: a loss cannot be behind it, so it fails at once.
USER_ERRORS = (ValueError, TypeError, KeyError, IndexError)
# A DeviceState brings its host copies up to date (one read of every variable) when this many
# train_on_batch steps, or this many bytes of their inputs, are waiting in its replay log.
SYNC_EVERY_STEPS = 50
SYNC_EVERY_BYTES = 8 << 20
LOSS_EVENTS = ("context_lost", "device_lost")
# Backends tried, in order, when a lost one does not come back (recovery.CHAIN's order).
CHAIN = ("webgpu", "webgl2", "cpu")

_inside: contextvars.ContextVar[bool] = contextvars.ContextVar("pib_guarded", default=False)
_recoveries: dict[int, asyncio.Future[Backend]] = {}  # id(lost backend) -> its recovery
_revivals: dict[int, asyncio.Future[Backend | None]] = {}  # id(lost backend) -> its wait
# Fits with their own recovery running (recovery.py): a loss they see is theirs to recover.
fits_running = 0
_loss_count = [0]  # losses recorded (events.record_event) since import
recovery_seconds: list[float] = []  # each recovery's wall time, loss noticed to backend back


class DeviceState:
    """What one owner (a model, a graph model) keeps on the device, and can rebuild elsewhere.

    `variables` returns the owner's variables now (they may change: compile makes new optimizer
    slots). `sync()` reads them all into host copies; `keep(pairs)` takes host copies the owner
    already has (set_weights' arrays); `record(replay, nbytes)` logs a step run since the last
    sync, replayed by a rebuild after the copies are uploaded. `on_rebuilt` runs after the
    upload, before the replay (a model drops its recorded steps there: they name lost buffers).
    """

    def __init__(
        self,
        variables: Callable[[], list[Variable]],
        on_rebuilt: Callable[[], None] | None = None,
    ) -> None:
        self._variables = variables
        self._on_rebuilt = on_rebuilt
        self._host: weakref.WeakKeyDictionary[Variable, np.ndarray] = weakref.WeakKeyDictionary()
        self._log: list[Callable[[], Awaitable[Any]]] = []
        self._log_bytes = 0
        self._syncing: asyncio.Future[None] | None = None
        self.last_sync = {"bytes": 0, "ms": 0.0}  # what the last sync read and how long it took
        # Counts changes of the variables' values (set_weights, loads, training calls): a result
        # computed before one cannot be computed again (lineage.py).
        self.changes = 0

    def changed(self) -> None:
        """The owner's variables got new values."""
        self.changes += 1

    # ---- host copies ----

    async def sync(self) -> None:
        """Reads every variable into its host copy (all reads at once: one wait for the GPU) and
        clears the replay log. Nothing changes if a read fails (the device went away)."""
        started = time.perf_counter()
        variables = [v for v in self._variables() if not v.is_disposed]
        arrays = await asyncio.gather(*(v.numpy() for v in variables))
        for var, array in zip(variables, arrays, strict=True):
            self._host[var] = array
        self._log, self._log_bytes = [], 0
        self.last_sync = {
            "bytes": int(sum(a.nbytes for a in arrays)),
            "ms": (time.perf_counter() - started) * 1000.0,
        }

    def sync_soon(self) -> None:
        """A sync in the background (after a checkpoint load, which is not async); the next
        guarded call of this owner waits for it first. Without an event loop (CPython tools,
        where no device is lost) nothing is scheduled."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._syncing is None or self._syncing.done():
            self._syncing = asyncio.ensure_future(self.sync())

    def keep(self, pairs: list[tuple[Variable, np.ndarray]]) -> None:
        """Host copies the owner has already: each variable's value now is `array` (set_weights
        and loads: no read). Steps logged before are not replayed on them: the copies of the
        other variables (optimizer slots) are refreshed by a background sync."""
        self.changed()
        for var, array in pairs:
            self._host[var] = np.array(array, dtype=var.dtype)
        if self._log:
            self._log, self._log_bytes = [], 0
            self.sync_soon()

    def missing(self) -> bool:
        """Whether a variable has no host copy yet (made since the last sync: new slots)."""
        return any(var not in self._host for var in self._variables() if not var.is_disposed)

    def record(self, replay: Callable[[], Awaitable[Any]], nbytes: int) -> bool:
        """Logs a step run since the last sync (replay runs it again after a rebuild); True when
        the log is long enough that the owner should sync now."""
        self.changed()
        self._log.append(replay)
        self._log_bytes += nbytes
        return len(self._log) >= SYNC_EVERY_STEPS or self._log_bytes >= SYNC_EVERY_BYTES

    # ---- rebuilding ----

    def needs_rebuild(self) -> bool:
        """Whether a variable of the owner lives on a retired backend (its data is gone), or on
        a lost one that is no longer the active backend (pib.init replaced it before its loss
        was reported): nothing recovers that one, so it is retired here."""
        current = runtime.current_backend()
        for var in self._variables():
            storage = var._storage
            if storage is None or storage.backend is current:
                continue
            if not storage.backend.retired and storage.backend.is_lost():
                retire(storage.backend)
            if storage.backend.retired:
                return True
        return False

    async def rebuild(self) -> None:
        """Uploads the host copies to the current backend, then replays the logged steps. A
        variable without a host copy (made after the last sync and never synced) stays lost:
        using it raises LostTensorError."""
        if self._syncing is not None and not self._syncing.done():
            await asyncio.wait([self._syncing])  # a failed one (the loss) leaves the copies
        for var in self._variables():
            array = self._host.get(var)
            if array is not None and not var.is_disposed:
                var._rebuild(array)
        if self._on_rebuilt is not None:
            self._on_rebuilt()
        log, self._log, self._log_bytes = self._log, [], 0
        for done, replay in enumerate(log):
            try:
                await replay()
            except LostTensorError as exc:  # a step's input tensor was on the lost device
                raise LostTensorError(
                    f"{exc}. The model is back at its state {len(log) - done} train_on_batch "
                    "steps ago: those steps took tensors on the lost device (pass numpy "
                    "arrays, which the engine keeps, to have them replayed)"
                ) from None
        self._log = log

    async def ready(self) -> None:
        """Before a call: the background sync done and, after a loss, the state rebuilt."""
        if self._syncing is not None and not self._syncing.done():
            await asyncio.wait([self._syncing])
        if self.needs_rebuild():
            await self.rebuild()


def losable() -> bool:
    """Whether the active backend has a device to lose (the cpu backend has none: its models
    need no host copies)."""
    return runtime.current_backend().name != "cpu"


def state_of(owner: Any) -> DeviceState | None:
    """The DeviceState an owner keeps as its `device_state` attribute (a Sequential, a graph
    model), or None for any other callable (then only the backend is recovered)."""
    state = getattr(owner, "device_state", None)
    return state if isinstance(state, DeviceState) else None


# ---- the guard ---------------------------------------------------------------------------------


def losses() -> int:
    """Losses recorded so far: work during which this changed ran on a lost device."""
    return _loss_count[0]


def _lost(state: DeviceState | None) -> bool:
    return runtime.current_backend().is_lost() or (state is not None and state.needs_rebuild())


async def guarded(
    call: Callable[[], Awaitable[T]],
    state: DeviceState | None = None,
    sync: bool = False,
    settle: bool = True,
    inputs: tuple[Any, ...] = (),
) -> T:
    """Runs `call` (an engine call) with recovery: before it, a lost backend is recovered and
    `state` rebuilt; if a loss interrupts it, or happens while it runs, it runs again (up to
    RETRIES times). With `sync`, `state`'s host copies are brought up to date after it (fit).
    With `settle`, device tensors it gives carry their lineage (lineage.py): a loss found by
    their read (WebGPU reports a device destroyed inside the call only after it returned) runs
    the call again then, instead of a fence before they are handed back. train_on_batch opts
    out: a loss inside it is recovered for the model by the replay log. `inputs` are the
    call's arguments: tensors among them that an earlier call gave, lost since, are computed
    again first (recompute_lost). A call with `sync` (fit) changes `state`.
    A guarded call inside another runs plainly: the outer one retries."""
    if _inside.get():
        return await call()
    token = _inside.set(True)
    try:
        for attempt in range(RETRIES + 1):
            await ensure_ready(state)
            await recompute_lost_inputs(inputs)
            before = losses()
            result: Any = None
            try:
                result = await call()
                if sync and state is not None and losable() and not _lost(state):
                    await state.sync()
            except Exception as exc:
                if attempt == RETRIES or not await loss_behind(exc, before, state):
                    raise
                for t in lineage.tensors_of(result):
                    t.dispose()
                continue
            if attempt < RETRIES and (_lost(state) or _on_lost_device(result)):
                for t in lineage.tensors_of(result):
                    t.dispose()
                continue  # computed on a device that was lost meanwhile: run it again
            if sync and state is not None:  # fit (train_on_batch's steps count in record)
                state.changed()
            if settle and losable():
                lineage.attach(
                    result,
                    runtime.current_backend(),
                    lambda: guarded(call, state, sync=sync, settle=settle, inputs=inputs),
                    (lambda: state.changes) if state is not None else (lambda: 0),
                )
            return result
        raise AssertionError("unreachable")  # the last attempt returns or raises
    finally:
        _inside.reset(token)


async def read_recovering(t: Tensor) -> np.ndarray:
    """Tensor.numpy for a tensor with a lineage: if its device is lost, or the read fails because
    it was lost, the backend is recovered and the tensor computed again (lineage.py) and read,
    up to RETRIES times. Inside a guarded call it reads plainly: that call runs again."""
    if t.is_disposed:
        t._live_storage()  # raises: disposed (at once, not after waiting for a loss)
    for attempt in range(RETRIES + 1):
        if not _inside.get():
            await recompute_lost(t)
        before = losses()
        try:
            values: np.ndarray = await lineage.read(t)
            return values
        except Exception as exc:
            if t._lineage is None or _inside.get() or attempt == RETRIES:
                raise
            if not await loss_behind(exc, before) and not t._lineage.lost():
                raise
    raise AssertionError("unreachable")  # the last attempt returns or raises


async def recompute_lost(t: Tensor) -> None:
    """Computes t again on the recovered backend (into t itself) when its device is lost and its
    lineage can give its value; a lineage that cannot (settled, or its model changed) is dropped,
    so that t fails as a tensor made by hand does."""
    chain = t._lineage
    if chain is None or not chain.lost():
        return
    if not chain.usable():
        t._lineage = None
        return
    if not chain.backend.retired:
        await recover(chain.backend)
    memo: lineage.Memo = {}
    try:
        with autograd.paused():  # computing a value again is not a step of a tape
            t._take_storage(await chain.recompute(memo))
    finally:
        lineage.dispose_memo(memo)


async def recompute_lost_inputs(inputs: tuple[Any, ...]) -> None:
    """recompute_lost for the tensors a guarded call takes (an earlier call's result, lost since)."""
    for t in inputs:
        if isinstance(t, Tensor) and not t.is_disposed:
            await recompute_lost(t)


register_lineage_reader(read_recovering)


async def loss_behind(exc: Exception, before: int, state: DeviceState | None = None) -> bool:
    """Whether a loss made work that began when `losses()` was `before` fail with `exc`. The
    browser may report it a little after the work that ran into it failed (WebGPU's device.lost
    settles after a mapAsync it aborted; a read on a lost WebGL context fails before its
    webglcontextlost event), so a failure on a GPU backend that is not a caller's mistake waits
    up to LOSS_REPORT_S for it."""
    deadline = time.monotonic() + LOSS_REPORT_S
    while not (_lost(state) or losses() != before):
        if isinstance(exc, USER_ERRORS) or not losable() or time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def _on_lost_device(result: Any) -> bool:
    """Whether a tensor `result` gave has its device lost (a lost WebGL context draws nothing)."""
    for t in lineage.tensors_of(result):
        if t._storage is not None and (t._storage.backend.retired or t._storage.backend.is_lost()):
            return True
    return False


async def ensure_ready(state: DeviceState | None = None) -> None:
    """Recovers the current backend if its device is lost, then rebuilds `state` if needed."""
    backend = runtime.current_backend()
    if backend.is_lost():
        await recover(backend)
    if state is not None:
        await state.ready()
        if state.missing() and losable():  # variables made since (a build): copies now
            await state.sync()


# ---- recovering a backend ----------------------------------------------------------------------


async def recover(lost: Backend) -> Backend:
    """The backend that replaces `lost` (made active), shared by everyone who asks about the
    same loss: its device back, a new one of its kind, or the next backend."""
    key = id(lost)
    task = _recoveries.get(key)
    if task is None:
        task = _recoveries[key] = asyncio.ensure_future(_recover(lost))
        task.add_done_callback(lambda _: _recoveries.pop(key, None))
    return await asyncio.shield(task)


async def revive(lost: Backend, timeout_s: float) -> Backend | None:
    """A started, self-tested backend of `lost`'s kind on the device the browser gave back
    within timeout_s, or None. recovery.py's fit uses it too, so one loss is waited for once."""
    key = id(lost)
    task = _revivals.get(key)
    if task is None:
        task = _revivals[key] = asyncio.ensure_future(_revive(lost, timeout_s))
        task.add_done_callback(lambda _: _revivals.pop(key, None))
    return await asyncio.shield(task)


async def _revive(lost: Backend, timeout_s: float) -> Backend | None:
    fresh = await lost.recovered(timeout_s)
    if fresh is None:
        return None
    try:
        passed = (await fresh.self_test()).passed
    except Exception:  # lost again while it was tested: the caller makes a new one
        passed = False
    if not passed:
        fresh.close()
        return None
    await fresh.prepare(after_loss=True)
    return fresh


def retire(lost: Backend) -> None:
    """The lost backend is replaced: its listeners go, its tensors raise LostTensorError."""
    lost.detach()
    lost.retired = True


async def _recover(lost: Backend) -> Backend:
    started = time.monotonic()
    waiting = asyncio.ensure_future(revive(lost, TIMEOUT_S))
    while not waiting.done():
        await asyncio.wait([waiting], timeout=0.05)
        if lost.retired and not waiting.done():  # pib.init replaced it meanwhile
            waiting.add_done_callback(_close_unused)
            return runtime.current_backend()
    fresh = waiting.result()
    if lost.retired:  # replaced by pib.init while it came back: the new one stays
        if fresh is not None:
            fresh.close()
        return runtime.current_backend()
    if fresh is not None:
        retire(lost)
        runtime.use_backend(fresh)
        seconds = time.monotonic() - started
        events.record_event(
            "context_restored", 0, backend=fresh.name, seconds=seconds, source="engine"
        )
    else:
        retire(lost)  # before init: a webgpu backend lost for good stops withholding adapters
        fresh = await _replacement(lost.name)
        seconds = time.monotonic() - started
        events.record_event(
            "backend_switched",
            0,
            backend=fresh.name,
            previous=lost.name,
            reason=f"the device did not come back within {TIMEOUT_S} s",
            seconds=seconds,
            source="engine",
        )
    recovery_seconds.append(seconds)
    return fresh


def _close_unused(waiting: asyncio.Future[Backend | None]) -> None:
    """A device that came back after its backend was replaced: nobody uses it."""
    if not waiting.cancelled() and waiting.exception() is None:
        fresh = waiting.result()
        if fresh is not None:
            fresh.close()


async def _replacement(lost: str) -> Backend:
    """A new backend where the lost one did not come back: a new WebGL context on a new canvas
    first (the lost one is released), else the backends after it in CHAIN."""
    usable = runtime.available_backends()
    following = CHAIN[CHAIN.index(lost) + 1 :] if lost in CHAIN else ("cpu",)
    candidates = ("webgl2", *following) if lost == "webgl2" else following
    for name in candidates:
        if name not in usable:
            continue
        try:
            await runtime.init(name)
        except (RuntimeError, ValueError):  # it cannot start here either: the next one
            continue
        return runtime.current_backend()
    raise RuntimeError(f"the {lost} device was lost and no backend could start again")


def _on_event(event: dict[str, Any]) -> None:
    """A loss reported by the browser between calls starts its recovery at once, so that the
    page's next call (or its next tensor) finds a working backend. A fit recovers its own."""
    if event["type"] not in LOSS_EVENTS:
        return
    _loss_count[0] += 1
    if fits_running:
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # no event loop runs (CPython tools): the next guarded call recovers
        return
    loop.call_soon(_recover_in_background)


def _recover_in_background() -> None:
    backend = runtime.current_backend()
    if fits_running or not backend.is_lost():
        return
    task = asyncio.ensure_future(recover(backend))
    task.add_done_callback(_quiet)


def _quiet(task: asyncio.Future[Any]) -> None:
    """A background recovery that failed: the next guarded call tries again and raises it."""
    if not task.cancelled():
        task.exception()


events.add_listener(_on_event)
