"""Training runs with real device losses injected (pib.debug.lose_device), for the recovery tests:
run in the page by tests_e2e/test_recovery.py, each beside the same run without a loss.

The model has Dropout, so a replay after recovery must draw the same masks, and Adam, whose
slots and step count must come back from the checkpoint.
"""

from __future__ import annotations

import asyncio
import gc
import random
import time
from typing import Any

import numpy as np

import py_in_browser as pib
from py_in_browser import _js, layers, optimizers
from py_in_browser.runtime import current_backend

SAMPLES = 96
BATCH = 8  # 12 steps an epoch
FEATURES = 6
CLASSES = 3


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.Generator(np.random.PCG64(7))
    x = rng.standard_normal((SAMPLES, FEATURES)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0.5).astype(np.int32)
    return x, y


def model(width: int = 16) -> pib.Sequential:
    net = pib.Sequential(
        [
            layers.Dense(width, activation="relu", input_shape=(FEATURES,)),
            layers.Dropout(0.25),
            layers.Dense(CLASSES, activation="softmax"),
        ],
        seed=3,
    )
    net.compile(optimizer=optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
    return net


class LossInjector(pib.Callback):
    """Loses the device after the given training steps and, `during_replay` times, again a random
    moment (0 to 30 ms of the event loop) after a recovery, while fit replays the steps since its
    checkpoint. `in_replay` {step: k} arms, after that step, a loss right after the k-th command
    of the next replayed step (inside its one JS call). Keeps the runtime events fit hands it,
    and counts the losses it injected (one that would fall on a device already lost is not
    injected: it would not be a second loss)."""

    def __init__(
        self,
        at_steps: list[int],
        restore: bool,
        during_replay: int,
        seed: int,
        in_replay: dict[int, int] | None = None,
    ) -> None:
        super().__init__()
        self.at_steps, self.restore, self.during_replay = set(at_steps), restore, during_replay
        self.in_replay = in_replay or {}
        self.random = random.Random(seed)
        self.epoch = 0
        self.events: list[dict[str, Any]] = []
        self.injected = 0
        self.steps_per_epoch = -(-SAMPLES // BATCH)

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any]) -> None:
        self.epoch = epoch

    async def on_batch_end(self, batch: int, logs: dict[str, Any]) -> None:
        step = self.epoch * self.steps_per_epoch + batch
        if step in self.at_steps and not current_backend().is_lost():
            self.injected += 1
            await pib.debug.lose_device(restore=self.restore)
        if step in self.in_replay and not current_backend().is_lost():
            self.injected += 1
            await pib.debug.lose_device(in_replay=self.in_replay.pop(step))

    def _lose_during_replay(self, backend: Any) -> None:
        if not backend.is_lost():
            self.injected += 1
            backend.lose_device(True, 0.05)

    def on_runtime_event(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        if event["type"] == "context_restored" and self.during_replay > 0:
            self.during_replay -= 1
            asyncio.get_event_loop().call_later(
                self.random.uniform(0.0, 0.03), self._lose_during_replay, current_backend()
            )


async def train(
    backend: str,
    epochs: int = 3,
    at_steps: list[int] | None = None,
    restore: bool = True,
    during_replay: int = 0,
    every: int = 5,
    timeout_s: float = 30.0,
    seed: int = 0,
    width: int = 16,
    in_replay: dict[int, int] | None = None,
) -> dict[str, Any]:
    """Trains on `backend` with losses after `at_steps` (and armed inside replays: `in_replay`,
    see LossInjector); returns the final weights, the events the callback heard, the backend
    training ended on, the wall time and memory before/after."""
    await pib.init(backend)
    x, y = data()
    net = model(width)
    injector = LossInjector(at_steps or [], restore, during_replay, seed, in_replay)
    before = pib.memory()
    started = time.perf_counter()
    history = await net.fit(
        x,
        y,
        epochs=epochs,
        batch_size=BATCH,
        callbacks=[injector],
        recovery_every=every,
        recovery_timeout_s=timeout_s,
    )
    seconds = time.perf_counter() - started
    weights = [w.tolist() for w in await net.get_weights()]
    after = pib.memory()
    return {
        "weights": weights,
        "losses": history.history["loss"],
        "events": injector.events,
        "injected": injector.injected,
        "backend": pib.get_backend(),
        "seconds": seconds,
        "memory_before": before,
        "memory_after": after,
    }


async def checkpoint_overhead(backend: str, epochs: int = 2, rounds: int = 2) -> dict[str, Any]:
    """W2's shape (784-128-10, Adam, batch 64) trained side by side in one page with and without
    recovery checkpoints (the default every 50 steps), alternating; seconds per fit of each."""
    await pib.init(backend)
    rng = np.random.Generator(np.random.PCG64(2))
    x = rng.standard_normal((1024, 784)).astype(np.float32)
    y = rng.integers(0, 10, 1024).astype(np.int32)
    net = pib.Sequential(
        [
            layers.Dense(128, activation="relu", input_shape=(784,)),
            layers.Dense(10, activation="softmax"),
        ],
        seed=2,
    )
    net.compile(optimizer=optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy")
    await net.fit(x, y, epochs=1, batch_size=64, recovery_every=None)  # warm-up: compiles
    seconds: dict[str, list[float]] = {"without": [], "with": []}
    for _ in range(rounds):
        for mode, every in (("without", None), ("with", 50)):
            started = time.perf_counter()
            await net.fit(x, y, epochs=epochs, batch_size=64, recovery_every=every)
            await net.layers[0].weights[0].numpy()  # the last step has run
            seconds[mode].append(time.perf_counter() - started)
    return {"seconds": seconds, "steps_per_fit": epochs * 16}


def _footprint() -> dict[str, Any]:
    """What must not grow: tensors and their bytes, the backend's GPU bytes, live JS proxies."""
    gc.collect()
    memory = pib.memory()
    return {
        "num_tensors": memory["num_tensors"],
        "num_bytes": memory["num_bytes"],
        "num_data_buffers": memory["num_data_buffers"],
        # GPU memory held by tensors and recordings (pools of free memory aside).
        "gpu_bytes_in_use": (
            memory["gpu_bytes_in_use"]
            if "gpu_bytes_in_use" in memory
            else memory["gpu_bytes"] - memory["pooled_bytes"]
        ),
        "js_proxies": _js.live_proxies(),
    }


async def long_run(backend: str, epochs: int = 84, loss_at: int = 500) -> dict[str, Any]:
    """A tiny model trained 12 * epochs steps (1008) with one context loss at step `loss_at`;
    the footprint after a first fit (weights, slots and recordings made) and at the end."""
    await pib.init(backend)
    x, y = data()
    net = model(width=4)
    await net.fit(x, y, epochs=1, batch_size=BATCH)
    before = _footprint()
    injector = LossInjector([loss_at], True, 0, 0)
    await net.fit(x, y, epochs=epochs, batch_size=BATCH, callbacks=[injector])
    return {"before": before, "after": _footprint(), "events": injector.events}


_background: dict[str, asyncio.Task[dict[str, Any]]] = {}
progress: dict[str, int] = {}  # steps each background fit has run (replays of a resume aside)


async def _fit_to_the_end(name: str, epochs: int, resume: Any) -> dict[str, Any]:
    x, y = data()
    net = model()
    events = LossInjector([], True, 0, 0)
    counter = pib.LambdaCallback(on_batch_end=lambda batch, logs: _count(name))
    await net.fit(x, y, epochs=epochs, batch_size=BATCH, callbacks=[events, counter], resume=resume)
    return {"weights": [w.tolist() for w in await net.get_weights()], "events": events.events}


def _count(name: str) -> None:
    progress[name] = progress.get(name, 0) + 1


def start_fit(name: str, epochs: int, resume: Any = False) -> None:
    """Starts a fit in the background (the page hides and shows meanwhile); finish_fit awaits it."""
    progress[name] = 0
    _background[name] = asyncio.ensure_future(_fit_to_the_end(name, epochs, resume))


async def finish_fit(name: str) -> dict[str, Any]:
    return await _background.pop(name)
