"""Our side of the benchmark, run in the engine's worker: builds a workload and times its steps."""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

import py_in_browser as pib
from py_in_browser import layers, optimizers, replay
from py_in_browser.backends.cpu_simd import SIMD
from py_in_browser.events import runtime_events

Step = Callable[[bool], Awaitable[None]]
# pib.memory() counters whose change over one step says what the step cost to send to JS.
STEP_COUNTERS = ("js_calls", "words_sent", "steps_replayed")


def _layer(spec: dict[str, Any], first: dict[str, Any]) -> Any:
    kind = spec["type"]
    if kind == "dense":
        return layers.Dense(spec["units"], activation=spec["activation"], **first)
    if kind == "conv2d":
        return layers.Conv2D(
            spec["filters"],
            spec["kernel"],
            activation=spec["activation"],
            padding=spec["padding"],
            **first,
        )
    if kind == "maxpool":
        return layers.MaxPool2D(spec["size"])
    if kind == "flatten":
        return layers.Flatten(**first)
    raise ValueError(f"unknown layer type {kind}")


def build_model(spec: dict[str, Any]) -> Any:
    first = {"input_shape": tuple(spec["input_shape"])}
    return pib.Sequential(
        [_layer(layer, first if i == 0 else {}) for i, layer in enumerate(spec["layers"])]
    )


def _optimizer(spec: dict[str, Any]) -> Any:
    rate = spec["learning_rate"]
    return optimizers.Adam(rate) if spec["name"] == "adam" else optimizers.SGD(rate)


def _loss(name: str) -> Any:
    """W2/W3 end in a linear Dense and take softmax cross-entropy on logits, as TF.js's side does."""
    return "mse" if name == "mse" else pib.losses.SparseCategoricalCrossentropy(from_logits=True)


async def _read(value: Any) -> None:
    """Syncs on `value`: reading a tensor back waits for everything that produced it."""
    await value.numpy()


def _training_data(spec: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    if spec["loss"] == "mse":
        x = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=np.float32)
        return x, np.array([[0], [1], [1], [0]], dtype=np.float32)
    rng = np.random.default_rng(spec["seed"])
    x = rng.uniform(-1, 1, (spec["batch"], *spec["input_shape"])).astype(np.float32)
    return x, rng.integers(0, spec["classes"], spec["batch"]).astype(np.int32)


def _training_step(spec: dict[str, Any]) -> tuple[Step, str]:
    x, y = _training_data(spec)
    model = build_model(spec)
    model.compile(optimizer=_optimizer(spec["optimizer"]), loss=_loss(spec["loss"]))
    xs, ys = pib.tensor(x), pib.tensor(y, dtype=str(y.dtype))

    # train_on_batch runs fit's step machinery (replayed from JS after the first steps) and
    # returns the loss unread, so "synced every 10" really syncs once per 10 steps.
    async def step(sync: bool) -> None:
        loss = await model.train_on_batch(xs, ys)
        if sync:
            await _read(loss)
        loss.dispose()

    return step, "await model.train_on_batch (fit's replayed step); sync = loss.numpy()"


def _inference_step(spec: dict[str, Any]) -> tuple[Step, str]:
    rng = np.random.default_rng(spec["seed"])
    x = pib.tensor(rng.uniform(-1, 1, (1, *spec["input_shape"])).astype(np.float32))
    model = build_model(spec)

    async def step(sync: bool) -> None:
        scores = await model.predict(x)
        top_class = pib.argmax(scores, axis=-1)
        int((await top_class.numpy())[0])
        scores.dispose()
        top_class.dispose()

    return step, "await model.predict + pib.argmax(...).numpy()"


def _matmul_step(spec: dict[str, Any]) -> tuple[Step, str]:
    rng = np.random.default_rng(spec["seed"])
    n = spec["matmul_n"]
    a = pib.tensor(rng.uniform(-1, 1, (n, n)).astype(np.float32))
    b = pib.tensor(rng.uniform(-1, 1, (n, n)).astype(np.float32))

    async def step(sync: bool) -> None:
        product = a @ b
        if sync:
            await _read(product)
        product.dispose()

    return step, "a @ b; sync = product.numpy()"


async def _graph_step(spec: dict[str, Any]) -> tuple[Step, str]:
    rng = np.random.default_rng(spec["seed"])
    x = pib.tensor(rng.uniform(0, 1, (spec["batch"], *spec["input_shape"])).astype(np.float32))
    model = await pib.load_graph_model(spec["model_url"])

    async def step(sync: bool) -> None:
        embedding = await model(x, output=spec["output"])
        assert isinstance(embedding, pib.Tensor)  # one output named: one tensor
        await _read(embedding)
        embedding.dispose()

    return step, "await gm(x, output=embedding) (replayed inference); embedding.numpy()"


def cpu_kernels() -> str:
    """Which kernels our cpu backend runs: the SIMD module (and its replayed steps) or numpy."""
    if SIMD is not None:
        fused = "relaxed SIMD, fused multiply-adds" if SIMD.fuses_multiply_adds() else "SIMD"
        helpers = (
            f", large products shared with {SIMD.helpers.count} helper worker(s)"
            if SIMD.helpers
            else ""
        )
        return f"WebAssembly SIMD module ({fused}{helpers}), train steps replayed in one call"
    reasons = [e["reason"] for e in runtime_events() if e["type"] == "simd_unavailable"]
    return "numpy (" + ("; ".join(reasons) or "no SIMD module") + ")"


async def build_step(spec: dict[str, Any]) -> tuple[Step, str]:
    """The workload's step; a graph model is fetched and converted first (hence async)."""
    if spec["kind"] == "graph":
        return await _graph_step(spec)
    builders = {"train": _training_step, "infer": _inference_step, "matmul": _matmul_step}
    return builders[spec["kind"]](spec)


class OurSide:
    """The workload being measured; mirrors TfjsSide in tfjs-side.js method for method."""

    def __init__(self) -> None:
        self.step: Step | None = None

    async def setup(self, spec: dict[str, Any]) -> dict[str, Any]:
        self.step, how = await build_step(spec)
        if pib.get_backend() == "cpu":
            how += f"; cpu kernels: {cpu_kernels()}"
        return {"ok": True, "how": how}

    async def run(self, steps: int, sync_every: int, budget_ms: float) -> dict[str, Any]:
        """One sample (ms per step) per synced block of `sync_every` steps, until the budget is spent."""
        assert self.step is not None, "setup first"
        samples: list[float] = []
        started = time.perf_counter()
        done = 0
        while done < steps and (time.perf_counter() - started) * 1000 <= budget_ms:
            block = min(sync_every, steps - done)
            block_start = time.perf_counter()
            for i in range(block):
                await self.step(i == block - 1)
            samples.append((time.perf_counter() - block_start) * 1000 / block)
            done += block
        return {"samples": samples}

    async def first_step(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Build a fresh model and finish one synced step: what a user waits for after ready."""
        started = time.perf_counter()
        step, _ = await build_step(spec)
        await step(True)
        return {"ms": (time.perf_counter() - started) * 1000}

    async def profile(self) -> dict[str, Any]:
        """pib.profile of one synced step, plus `per_step`: an unprofiled step's wall time and
        what it sent to JS (calls, command words, replayed steps: the command list's cost)."""
        assert self.step is not None, "setup first"
        step = self.step
        before, started = pib.memory(), time.perf_counter()
        await step(True)
        per_step: dict[str, Any] = {"wall_ms": (time.perf_counter() - started) * 1000}
        after = pib.memory()
        per_step |= {c: after[c] - before[c] for c in STEP_COUNTERS if c in after}
        result: dict[str, Any] = await pib.profile(lambda: step(True))
        if [kernel["name"] for kernel in result["kernels"]] == ["replayed_step"]:
            # The cpu backend replays a recorded pass as one opaque call: one eager pass's
            # kernels say where its time goes (with their per-op overhead, which replay drops).
            replay.ENABLED = False
            try:
                result["eager"] = await pib.profile(lambda: step(True))
            finally:
                replay.ENABLED = True
        return {**result, "per_step": per_step}

    async def replay_effect(self, spec: dict[str, Any], steps: int, rounds: int) -> dict[str, Any]:
        """Recorded steps replayed from JS vs the same steps run eagerly op by op, alternating
        blocks of `steps` synced-once steps on one model; per mode: ms per step and the
        per-step deltas of the backend's counters (Python->JS calls, command words, replays)."""
        step, how = await build_step(spec)
        modes: dict[str, dict[str, list[float]]] = {}
        try:
            for _ in range(rounds):
                for mode in ("recorded", "eager"):
                    replay.ENABLED = mode == "recorded"
                    for _ in range(2):  # warm-up: a fresh recording needs two agreeing steps
                        await step(True)
                    before, started = pib.memory(), time.perf_counter()
                    for i in range(steps):
                        await step(i == steps - 1)
                    elapsed_ms = (time.perf_counter() - started) * 1000
                    after = pib.memory()
                    record = modes.setdefault(mode, {"ms_per_step": []})
                    record["ms_per_step"].append(elapsed_ms / steps)
                    for counter in ("js_calls", "words_sent", "steps_replayed"):
                        if counter in after:
                            delta = (after[counter] - before[counter]) / steps
                            record.setdefault(f"{counter}_per_step", []).append(delta)
        finally:
            replay.ENABLED = True
        return {"how": how, "modes": modes}

    async def teardown(self) -> dict[str, Any]:
        self.step = None
        return {"ok": True, "memory": pib.memory()}


pib_bench_side = OurSide()


async def pib_bench_call(method: str, args_json: str) -> Any:
    """The page's entry point: bench.ours(method, args) lands here as keyword arguments."""
    result = getattr(pib_bench_side, method)(**json.loads(args_json))
    return await result if inspect.isawaitable(result) else result
