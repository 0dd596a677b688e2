"""Every engine call with a real device loss before it and inside it (resilience.py), for
tests_e2e/test_recovery_calls.py: each case starts from the same trained state and its result is
compared with the same call without a loss, all in one page.

A loss "before" is pib.debug.lose_device() right before the call (the browser gives the device
back 50 ms later); a loss "during" is the same fault made by the backend itself right before the
call's DURING_AFTER-th command to the device (an op, an upload or a read), so the call is
interrupted in its middle.
"""

from __future__ import annotations

import asyncio
import functools
import io
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

import py_in_browser as pib
from py_in_browser import layers, model_file, resilience
from py_in_browser.runtime import current_backend
from py_in_browser.tensor import LostTensorError
from py_in_browser.testing import graph_models, recovery_runs

DURING_AFTER = 2  # the loss comes before the call's second command to the device
FRAME = 8  # side of the frames classify_bitmap classifies
PREPROCESSING = {"schema": "py_in_browser.image_preprocessing", "version": 1, "size": [8, 8]}
COMMANDS = ("run", "upload", "download", "upload_image")


class LoseDuring:
    """Makes the current backend lose its device right before its `after`-th command (run,
    upload, download, upload_image) from now on; the commands are the backend's own, only
    counted on the way."""

    def __init__(self, after: int) -> None:
        self.backend = current_backend()
        self.after, self.count, self.fired = after, 0, False
        for name in COMMANDS:
            setattr(self.backend, name, self._counting(getattr(self.backend, name)))

    def _counting(self, command: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any) -> Any:
            self.count += 1
            if self.count == self.after and not self.backend.is_lost():
                self.fired = True
                self.disarm()
                self.backend.lose_device(True, 0.05)
            return command(*args)

        return counted

    def disarm(self) -> None:
        for name in COMMANDS:
            self.backend.__dict__.pop(name, None)


async def lose_reported() -> None:
    """A loss the browser has reported (WebGPU reports a destroyed device a little later)."""
    backend = current_backend()
    await pib.debug.lose_device()
    for _ in range(100):
        if backend.is_lost():
            return
        await asyncio.sleep(0.01)


def image_model() -> pib.Sequential:
    net = pib.Sequential(
        [layers.Flatten(input_shape=(FRAME, FRAME, 3)), layers.Dense(4, activation="softmax")],
        seed=4,
    )
    net.build()
    rng = np.random.Generator(np.random.PCG64(4))
    net.set_weights([rng.standard_normal(w.shape).astype(np.float32) for w in net.weights])
    return net


async def post_frame(name: str = "frame") -> None:
    """Posts the same frame under `name` as the page does (an ImageBitmap in pibBitmaps)."""
    import js
    from pyodide.ffi import to_js

    rgba = np.arange(FRAME * FRAME * 4, dtype=np.uint8) * 7
    pixels = js.Uint8ClampedArray.new(to_js(rgba.tobytes()))
    bitmap = await js.createImageBitmap(js.ImageData.new(pixels, FRAME, FRAME))
    js.pibBitmaps.set(name, bitmap)


def _arrays(blob: bytes) -> list[np.ndarray]:
    with np.load(io.BytesIO(blob), allow_pickle=False) as data:
        return [data[k] for k in sorted(data.files) if data[k].dtype.kind in "fiu"]


def _calls(x: np.ndarray, y: np.ndarray) -> dict[str, Callable[[pib.Sequential], Awaitable[Any]]]:
    """Each call of issue 27's list, returning what it gave and what it left in the model."""

    async def predict(m: pib.Sequential) -> Any:
        return await (await m.predict(x)).numpy()

    async def train_on_batch(m: pib.Sequential) -> Any:
        first = await m.train_on_batch(x[:8], y[:8], return_dict=True)
        second = await (await m.train_on_batch(x[8:16], y[8:16])).numpy()
        return [first["loss"], second, await m.get_weights()]

    async def fit(m: pib.Sequential) -> Any:
        history = await m.fit(x, y, epochs=1, batch_size=16)
        return [history.history["loss"], await m.get_weights()]

    async def set_weights(m: pib.Sequential) -> Any:
        m.set_weights(
            [np.full(w.shape, 0.01 * (i + 1), np.float32) for i, w in enumerate(m.weights)]
        )
        return await (await m.predict(x)).numpy()

    async def save(m: pib.Sequential) -> Any:
        return model_file.read(await m.save()).weights

    async def save_checkpoint(m: pib.Sequential) -> Any:
        return _arrays(await m.save_checkpoint())

    async def export_tfjs(m: pib.Sequential) -> Any:
        weights = (await m.export_tfjs())["group1-shard1of1.bin"]
        assert isinstance(weights, bytes)
        return np.frombuffer(weights, np.uint8)

    async def top_k(m: pib.Sequential) -> Any:
        return await pib.data.top_k(m, x[:5], k=2)

    return {
        "predict": predict,
        "evaluate": lambda m: m.evaluate(x, y),
        "train_on_batch": train_on_batch,
        "fit": fit,
        "get_weights": lambda m: m.get_weights(),
        "set_weights": set_weights,
        "save": save,
        "save_checkpoint": save_checkpoint,
        "export_tfjs": export_tfjs,
        "top_k": top_k,
    }


def _flat(value: Any) -> list[float]:
    """Every number in a result, in order (dicts by key, scores and indices of top-k rows)."""
    if isinstance(value, dict):
        return [n for k in sorted(value) for n in _flat(value[k])]
    if isinstance(value, list | tuple):
        return [n for v in value for n in _flat(v)]
    return [float(n) for n in np.asarray(value, dtype=np.float64).ravel()]


def _difference(got: Any, want: Any) -> float:
    a, b = np.array(_flat(got)), np.array(_flat(want))
    if a.shape != b.shape:
        return float("inf")
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def _summary(results: dict[str, Any]) -> dict[str, Any]:
    """A case's answer: how far the runs with a loss before and during the call are from the
    run without one, whether the loss inside it fired, and the backend it ended on."""
    return {
        "before": _difference(results["before"], results["none"]),
        "during": _difference(results["during"], results["none"]),
        "fired": results.get("fired", False),
        "backend": pib.get_backend(),
    }


async def _lose(when: str) -> LoseDuring | None:
    if when == "before":
        await lose_reported()
        return None
    return LoseDuring(DURING_AFTER) if when == "during" else None


async def every_call(backend: str) -> dict[str, Any]:
    """Each call with no loss, a loss before it and a loss inside it, each from the same trained
    model (a checkpoint loaded into a new one); per case the largest difference from the run
    without a loss, whether the loss was really made, the backend after it and the seconds of
    each recovery."""
    await pib.init(backend)
    x, y = recovery_runs.data()
    trained = recovery_runs.model()
    await trained.fit(x, y, epochs=1, batch_size=8)
    blob = await trained.save_checkpoint()
    runs: dict[str, Callable[[], Awaitable[dict[str, Any]]]] = {
        **{name: functools.partial(_case, call, blob) for name, call in _calls(x, y).items()},
        "results_read_later": functools.partial(_results_read_later, x, blob),
        "classify_bitmap": _classify_bitmap,
        "graph_model": _graph_model,
        "pretrained_predict": _pretrained_predict,
        "init": functools.partial(_init, backend),
        "eager_tensor": _eager_tensor,
        "never_back": _never_back,  # last: webgpu ends on webgl2
    }
    cases: dict[str, Any] = {}
    case_seconds: dict[str, float] = {}
    started = len(resilience.recovery_seconds)
    for name, run in runs.items():
        began = time.perf_counter()
        cases[name] = await _reported(run())
        case_seconds[name] = round(time.perf_counter() - began, 2)
    return {
        "cases": cases,
        "seconds": resilience.recovery_seconds[started:],
        "case_seconds": case_seconds,
    }


async def _reported(case: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """The case's result, or the traceback of what it raised (the other cases still run)."""
    try:
        return await case
    except Exception:
        await resilience.ensure_ready()
        return {"error": traceback.format_exc(), "backend": pib.get_backend()}


async def _case(call: Callable[[pib.Sequential], Awaitable[Any]], blob: bytes) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for when in ("none", "before", "during"):
        model = recovery_runs.model()
        model.build()
        model.load_checkpoint(blob)
        await model.get_weights()  # the loaded state is on the device, synced
        lose = await _lose(when)
        results[when] = await call(model)
        if lose is not None:
            lose.disarm()
            results["fired"] = lose.fired
    return _summary(results)


async def _results_read_later(x: np.ndarray, blob: bytes) -> dict[str, Any]:
    """What a page does with predict's result (the benchmark's I3, a live prediction): ops made
    from it (an argmax, a softmax of it plus a constant), read after; with a loss before
    predict, inside it, after it returned but before the ops (reported first: they get
    placeholders), and after the ops but before the reads. The result and each op carry their
    lineage (lineage.py) until a read, which computes them again on the recovered device."""
    results: dict[str, Any] = {}
    fired = []
    for when in ("none", "before", "during", "before_ops", "before_reads"):
        model = recovery_runs.model()
        model.build()
        model.load_checkpoint(blob)
        await model.get_weights()
        lose = await _lose(when)
        scores = await model.predict(x)
        if lose is not None:
            lose.disarm()
            fired.append(lose.fired)
        if when == "before_ops":
            await lose_reported()
        top = pib.argmax(scores, axis=-1)
        soft = pib.softmax(scores + 0.5)
        if when == "before_reads":
            await lose_reported()
        results[when] = [await top.numpy(), await soft.numpy(), await scores.numpy()]
    return {
        **{when: _difference(got, results["none"]) for when, got in results.items()},
        "fired": fired == [True],
        "backend": pib.get_backend(),
    }


async def _classify_bitmap() -> dict[str, Any]:
    model = image_model()
    results: dict[str, Any] = {}
    for when in ("none", "before", "during"):
        await post_frame()
        lose = await _lose(when)
        got = await pib.data.classify_bitmap(model, "frame", PREPROCESSING, k=2)
        results[when] = got["top"]
        if lose is not None:
            lose.disarm()
            results["fired"] = lose.fired
    return _summary(results)


async def _graph_model() -> dict[str, Any]:
    """A graph model's calls: a list of node values (eager), then its signature output (a
    recorded pass, verified and replaying before the first loss: each loss must leave it
    behind with its backend). Its weights are on the device before each loss."""
    gm = await pib.load_graph_model(graph_models.tiny_graph_model())
    x = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(4, 3)

    async def signature() -> np.ndarray:
        out = await gm(x)
        assert isinstance(out, pib.Tensor)
        return await out.numpy()

    for _ in range(3):
        await signature()

    async def call() -> Any:
        nodes = await gm(x, output=["h", "y"])
        assert isinstance(nodes, list)
        return [*[await t.numpy() for t in nodes], await signature()]

    return await _losing(call)


async def _pretrained_predict() -> dict[str, Any]:
    """predict of a Sequential over a frozen layers.Pretrained (the graph model's own weights,
    rebuilt with the model's) and a Dense head, its passes recorded before the first loss."""
    backbone = graph_models.small_backbone(seed=1)
    model = pib.Sequential(
        [layers.Pretrained(backbone, input_shape=(6, 6, 2)), layers.Dense(3)], seed=5
    )
    model.build()
    x = graph_models.seeded_images(3, batch=4, size=6)[..., :2]
    for _ in range(3):
        await (await model.predict(x)).numpy()

    async def call() -> Any:
        return await (await model.predict(x)).numpy()

    return await _losing(call)


async def _losing(call: Callable[[], Awaitable[Any]]) -> dict[str, Any]:
    """`call` with no loss, a loss before it and one inside it, on the same objects."""
    results: dict[str, Any] = {}
    for when in ("none", "before", "during"):
        lose = await _lose(when)
        results[when] = await call()
        if lose is not None:
            lose.disarm()
            results["fired"] = lose.fired
    return _summary(results)


async def _init(backend: str) -> dict[str, Any]:
    """pib.init right after a loss, and a loss while pib.init prepares the backend it chose
    (after the model's own backend was lost, so that the model moves to the new one)."""
    x, _ = recovery_runs.data()
    model = recovery_runs.model()
    model.build()
    want = await (await model.predict(x)).numpy()
    await lose_reported()
    after_loss = await pib.init(backend)
    before = _difference(await (await model.predict(x)).numpy(), want)
    kind = type(current_backend())
    prepare = kind.prepare
    fired: list[bool] = []

    async def losing_prepare(self: Any, after_loss: bool = False) -> None:
        kind.prepare = prepare  # type: ignore[method-assign]
        self.lose_device(True, 0.05)
        fired.append(True)
        for _ in range(100):  # reported while init runs (WebGPU reports it a little later)
            if self.is_lost():
                break
            await asyncio.sleep(0.01)
        await prepare(self, after_loss)

    kind.prepare = losing_prepare  # type: ignore[method-assign]
    await lose_reported()  # the model's backend too: it moves to the one init makes
    try:
        during_init = await pib.init(backend)
    finally:
        kind.prepare = prepare  # type: ignore[method-assign]
    during = _difference(await (await model.predict(x)).numpy(), want)
    product = float(await pib.sum(pib.tensor([1.0, 2.0]) * 2.0).item())
    return {
        "before": before,
        "during": during,
        "fired": bool(fired),
        "backend": during_init if after_loss == during_init else f"{after_loss}/{during_init}",
        "new_tensor": product,
    }


async def _eager_tensor() -> dict[str, Any]:
    """A tensor made by hand before a loss raises one clear error; later work is unaffected."""
    kept = pib.tensor(np.ones((2, 3), np.float32))
    await lose_reported()
    await resilience.ensure_ready()
    errors = []
    for use in (lambda: (kept * 2.0).numpy(), kept.numpy):
        try:
            await use()
            errors.append("no error")
        except LostTensorError as exc:
            errors.append(str(exc))
    kept.dispose()
    later = float(await pib.sum(pib.tensor([1.0, 2.0]) * 2.0).item())
    return {"errors": errors, "later": later, "backend": pib.get_backend()}


async def _never_back() -> dict[str, Any]:
    """A loss the browser never gives back (lose_device(restore=False)) with a short wait for it:
    webgl2 is released and a new context made on a new canvas, webgpu moves to webgl2."""
    x, _ = recovery_runs.data()
    model = recovery_runs.model()
    model.build()
    want = await (await model.predict(x)).numpy()
    lost = current_backend()
    timeout, resilience.TIMEOUT_S = resilience.TIMEOUT_S, 0.5
    try:
        await pib.debug.lose_device(restore=False)
        for _ in range(100):
            if lost.is_lost():
                break
            await asyncio.sleep(0.01)
        got = await (await model.predict(x)).numpy()
    finally:
        resilience.TIMEOUT_S = timeout
    return {
        "difference": _difference(got, want),
        "backend": pib.get_backend(),
        "released": lost.retired and lost is not current_backend(),
        "events": [e["type"] for e in pib.runtime_events()[-2:]],
    }


async def host_copy_cost(backend: str, rounds: int = 3) -> dict[str, Any]:
    """What bringing the host copies up to date at the end of a fit costs (bytes read and ms)
    for the app's model (64x64 gesture CNN, 4 classes, Adam) and W2 (784-128-10, Adam), each
    measured `rounds` times after a warm-up fit."""
    await pib.init(backend)
    from py_in_browser.testing import workloads

    rng = np.random.Generator(np.random.PCG64(1))
    app = pib.Sequential(_app_layers(), seed=0)
    app.compile(optimizer=pib.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy")
    w2 = pib.Sequential(
        [layers.Dense(128, activation="relu", input_shape=(784,)), layers.Dense(10)], seed=2
    )
    w2.compile(optimizer=pib.optimizers.Adam(1e-3), loss="mse")
    images, labels = workloads.synthetic_images(16, 64, seed=0)
    x2 = rng.standard_normal((64, 784)).astype(np.float32)
    y2 = rng.standard_normal((64, 10)).astype(np.float32)
    out: dict[str, Any] = {}
    for name, model, x, y in (("app", app, images, labels), ("W2", w2, x2, y2)):
        await model.fit(x, y, epochs=1, batch_size=16)
        ms = []
        for _ in range(rounds):
            await model.fit(x, y, epochs=1, batch_size=16)
            ms.append(model.device_state.last_sync["ms"])
        out[name] = {"bytes": model.device_state.last_sync["bytes"], "ms": ms}
    return out


async def compiled_ahead_after_loss(backend: str) -> dict[str, Any]:
    """What a backend revived after a loss compiles ahead of the call that noticed the loss:
    webgl2 programs linked or drawn ahead right after the recovery (none: the first step's go to
    the idle warm-up), webgpu pipelines its background work starts at once (one: the idle
    warm-up's first). bench/recovery_overhead times that call (predict_after_loss)."""
    await pib.init(backend)
    lost = current_backend()
    await lose_reported()
    fresh = await resilience.recover(lost)
    holder: Any = fresh.queue if backend == "webgl2" else fresh  # type: ignore[attr-defined]
    engine = holder.engine  # bridge.js's Engine
    if backend == "webgl2":
        ahead = int(engine.linking.size) + int(engine.toDrawWarm.length)
    else:
        started = sum(1 for e in engine.pipelines.values() if e.promise)
        fresh.start_background()  # what prepare scheduled, now
        ahead = sum(1 for e in engine.pipelines.values() if e.promise) - started
    return {"backend": fresh.name, "fresh": fresh is not lost, "ahead": ahead}


async def predict_after_loss(backend: str, rounds: int = 5) -> list[float]:
    """Seconds from a loss to the result of the predict that notices it (its recovery, and the
    kernels it compiles again on the new device), `rounds` times, for bench/recovery_overhead."""
    await pib.init(backend)
    x, _ = recovery_runs.data()
    model = recovery_runs.model()
    model.build()
    await (await model.predict(x)).numpy()
    seconds = []
    for _ in range(rounds):
        await asyncio.sleep(0.5)  # idle, as between a person's actions
        began = time.perf_counter()
        await lose_reported()
        await (await model.predict(x)).numpy()
        seconds.append(time.perf_counter() - began)
    return seconds


def _app_layers() -> list[Any]:
    """web/py/gesture_trainer.py's classifier_layers(4, 64)."""
    return [
        layers.Conv2D(8, 3, activation="relu", padding="same", input_shape=(64, 64, 3)),
        layers.MaxPooling2D(2),
        layers.Conv2D(16, 3, activation="relu", padding="same"),
        layers.MaxPooling2D(2),
        layers.Flatten(),
        layers.Dense(32, activation="relu"),
        layers.Dense(4, activation="softmax"),
    ]


def timed(seconds: list[float]) -> str:
    """Median and worst of recovery times, for the test's printout."""
    if not seconds:
        return "no recoveries"
    return (
        f"{len(seconds)} recoveries: median {np.median(seconds):.3f} s, worst {max(seconds):.3f} s"
    )
