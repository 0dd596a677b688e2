"""Recovery: fit survives a lost WebGL context or WebGPU device and loses nothing.

While fit runs, Recovery keeps a host checkpoint (checkpoint.py's blob: weights, optimizer slots
and step, Dropout draw counters, the data cursor and the epoch's running sums) taken at fit's
start and every `every` steps (a replay may cross an epoch's end: fit's callbacks hear each
step and epoch once). When a step fails because the backend's
device is gone, it waits for the device to come back (webgl2: webglcontextrestored on the same
canvas; webgpu: a fresh adapter and device, since a lost device's adapter is consumed), starts a
new backend there (programs compiled again, empty pools, no recordings), restores the checkpoint
and fit replays the steps since it: same batches (the order is a function of seed and epoch),
same Dropout masks (counter-based draws), so the final weights are those of an uninterrupted run.

If the device does not come back within `timeout_s`, or one backend was lost DEMOTE_LOSSES times
within DEMOTE_WINDOW_S (it keeps failing), training moves to the next backend of CHAIN and that
backend is not chosen again by this fit's recoveries. Events (runtime_events and each callback's
on_runtime_event, with the training step): context_lost / device_lost, context_restored,
backend_switched.

Visibility: with on_hidden="pause" (the default) fit finishes the step it is in when the page is
hidden, writes a checkpoint to IndexedDB (persist.py, key "fit/<model name>") and waits until the
page is visible again (events paused, resumed); on_hidden="continue" trains on. After a reload,
fit(..., resume="auto") continues from that checkpoint when there is one (else from the start),
and a fit that completes removes it.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from . import checkpoint, persist, resilience, runtime, visibility
from .backends import Backend
from .callbacks import Callback, History, call_hook
from .events import record_event, runtime_events
from .trainable import TrainableModel
from .training import Trainer

DEFAULT_EVERY = 50  # steps between recovery checkpoints (each costs one readback of the state)
DEFAULT_TIMEOUT_S = 10.0  # how long a lost device may take to come back before the next backend
CHAIN = resilience.CHAIN  # where training goes when a backend does not come back
# A backend lost this many times within this many seconds is demoted for the rest of the fit
# (module settings, like replay.ENABLED: a stress test of recovery itself raises them).
DEMOTE_LOSSES = 3
DEMOTE_WINDOW_S = 60.0
# The events fit callbacks hear through on_runtime_event.
CALLBACK_EVENTS = frozenset(
    {"context_lost", "device_lost", "context_restored", "backend_switched", "paused", "resumed"}
)


ON_HIDDEN = ("pause", "continue")
# The options of Sequential.fit that this module reads (Trainer.fit takes the others).
FIT_OPTIONS = ("recovery_every", "recovery_timeout_s", "on_hidden")


def persist_key(model: TrainableModel) -> str:
    """Where fit keeps the checkpoint of a paused fit in IndexedDB."""
    return f"fit/{getattr(model, 'name', 'model')}"


async def fit(
    model: TrainableModel, trainer: Trainer, history: History, x: Any, y: Any, **kwargs: Any
) -> History:
    """Sequential.fit with recovery: reads recovery_every, recovery_timeout_s, on_hidden and
    resume="auto" from the keyword arguments and hands the rest to Trainer.fit."""
    every = kwargs.pop("recovery_every", DEFAULT_EVERY)
    timeout_s = kwargs.pop("recovery_timeout_s", DEFAULT_TIMEOUT_S)
    on_hidden = kwargs.pop("on_hidden", "pause")
    if on_hidden not in ON_HIDDEN:
        raise ValueError(f"on_hidden must be one of {ON_HIDDEN}, got {on_hidden!r}")
    key = persist_key(model)
    if kwargs.get("resume") == "auto":
        blob = await persist.load(key)
        if blob is not None:
            if not model.built:
                model.build(model.input_shape or tuple(np.shape(x))[1:])
            checkpoint.load(model, trainer, blob)
        kwargs["resume"] = blob is not None
    if runtime.current_backend().name == "cpu":
        every = None  # the cpu backend has no device to lose
    guard = None
    if every is not None or on_hidden == "pause":
        guard = Recovery(model, trainer, every, timeout_s, pause=on_hidden == "pause")
    # A loss while this fit runs is its own to recover (resilience.py starts none then).
    recovering = 1 if guard is not None and every is not None else 0
    resilience.fits_running += recovering
    try:
        result = await trainer.fit(x, y, history, guard=guard, **kwargs)
    finally:
        resilience.fits_running -= recovering
    if guard is not None and guard.stored:
        await persist.remove(key)
    return result


class Recovery:
    """fit's guard (training.FitGuard): recovery checkpoints and recovery from device loss, and
    the pause of a hidden page."""

    def __init__(
        self,
        model: TrainableModel,
        trainer: Trainer,
        every: int | None = DEFAULT_EVERY,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        pause: bool = True,
    ) -> None:
        if every is not None and (
            isinstance(every, bool) or not isinstance(every, int) or every < 1
        ):
            raise ValueError(f"recovery_every must be None or an int >= 1, got {every!r}")
        if not timeout_s > 0:
            raise ValueError(f"recovery_timeout_s must be > 0, got {timeout_s!r}")
        self.model, self.trainer = model, trainer
        self.every, self.timeout_s, self.pause = every, timeout_s, pause
        self.stored = False  # whether a pause wrote a checkpoint to IndexedDB
        self.blob: bytes | None = None
        self.steps_since = 0
        self.losses: dict[str, list[float]] = {}  # backend name -> monotonic times of its losses
        self.demoted: set[str] = set()
        self.recovery_s: list[float] = []  # wall time of each recovery, loss noticed to restored
        self._delivered = len(runtime_events())

    # ---- checkpoints (training.FitGuard) ----

    async def begin(self, callbacks: list[Callback]) -> None:
        """The first checkpoint, with the optimizer's slots made (zeros) so it holds them."""
        assert self.model.optimizer is not None
        self.model.optimizer.build(self.model.trainable_weights)
        if self.every is not None:
            await self._checkpoint()

    async def after_step(self, callbacks: list[Callback]) -> None:
        self.steps_since += 1
        if self.every is not None and self.steps_since >= self.every:
            await self._checkpoint()
        if self.pause and visibility.is_hidden():
            await self._pause(callbacks)
        await self._deliver(callbacks)

    async def _pause(self, callbacks: list[Callback]) -> None:
        """The step has run: checkpoint (also to IndexedDB), wait for the page to be visible."""
        step = self._step()
        blob = await checkpoint.save(self.model, self.trainer, event=False)
        if self.every is not None:
            self.blob, self.steps_since = blob, 0
        self.stored = await persist.save(persist_key(self.model), blob) or self.stored
        record_event("paused", step, stored=self.stored)
        await self._deliver(callbacks)
        await visibility.wait_visible()
        record_event("resumed", step)

    async def _checkpoint(self) -> None:
        self.blob = await checkpoint.save(self.model, self.trainer, event=False)
        self.steps_since = 0

    # ---- recovery ----

    async def recover(self, exc: Exception, callbacks: list[Callback]) -> bool:
        lost = runtime.current_backend()
        if self.blob is None or not lost.is_lost():
            return False  # not a device loss: fit raises it
        started = time.monotonic()
        step = self._step()
        self._stamp_losses(step)  # before the restored cursor moves fit's step back
        fresh = await self._revive(lost, step)
        self.trainer.reset()  # the DeviceStep (state, recordings) of the lost backend
        checkpoint.load(self.model, self.trainer, self.blob)
        resilience.retire(lost)  # other models' state is rebuilt by their next call
        self.steps_since = 0
        self.recovery_s.append(time.monotonic() - started)
        if fresh.name == lost.name:
            record_event("context_restored", step, backend=fresh.name, seconds=self.recovery_s[-1])
        await self._deliver(callbacks)
        return True

    async def _revive(self, lost: Backend, step: int) -> Backend:
        """The backend training continues on: the lost one's device back, else the next one."""
        now = time.monotonic()
        times = [t for t in self.losses.get(lost.name, []) if now - t < DEMOTE_WINDOW_S]
        self.losses[lost.name] = [*times, now]
        if len(times) + 1 >= DEMOTE_LOSSES:
            self.demoted.add(lost.name)
            reason = f"{len(times) + 1} losses within {DEMOTE_WINDOW_S:.0f} s"
        else:
            # Shared with resilience.py: a loss another call noticed too is waited for once.
            fresh = await resilience.revive(lost, self.timeout_s)
            if fresh is not None:
                runtime.use_backend(fresh)
                return fresh
            reason = f"the device did not come back within {self.timeout_s} s"
        return await self._switch(lost.name, step, reason)

    async def _switch(self, lost: str, step: int, reason: str) -> Backend:
        self.demoted.add(lost)
        usable = runtime.available_backends()
        following = CHAIN[CHAIN.index(lost) + 1 :] if lost in CHAIN else ("cpu",)
        for name in following:
            if name not in usable or name in self.demoted:
                continue
            try:
                await runtime.init(name)
            except RuntimeError:  # it cannot start here either: try the one after it
                continue
            record_event("backend_switched", step, backend=name, previous=lost, reason=reason)
            return runtime.current_backend()
        raise RuntimeError(f"training lost {lost!r} ({reason}) and no other backend could start")

    # ---- events ----

    def _step(self) -> int:
        """The training step fit had reached: the optimizer steps of completed epochs' batches."""
        cursor = self.trainer.saved_cursor()
        return int(cursor.get("epoch", 0)) * self._steps_per_epoch(cursor) + int(
            cursor.get("batch", 0)
        )

    @staticmethod
    def _steps_per_epoch(cursor: dict[str, Any]) -> int:
        samples, batch_size = cursor.get("samples", 0), cursor.get("batch_size", 1)
        return -(-int(samples) // int(batch_size))

    def _stamp_losses(self, step: int) -> None:
        """The backend recorded its loss with its own step count; fit's step is added here: the
        step fit had reached when it learned of the loss."""
        for event in runtime_events()[self._delivered :]:
            if event["type"] in ("context_lost", "device_lost"):
                event.setdefault("fit_step", step)

    async def _deliver(self, callbacks: list[Callback]) -> None:
        """Hands the runtime events since the last delivery to the callbacks."""
        self._stamp_losses(self._step())
        events = runtime_events()
        fresh, self._delivered = events[self._delivered :], len(events)
        for event in fresh:
            if event["type"] in CALLBACK_EVENTS:
                await call_hook(callbacks, "on_runtime_event", dict(event))
