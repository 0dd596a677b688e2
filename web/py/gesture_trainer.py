"""The gesture trainer's side of the engine, run in the engine's Worker (web/js/trainer/engine.js
loads it as the module `gesture_trainer`).

Pixels arrive as ImageBitmaps transferred to this worker (engine.js posts them; pib.data.take_bitmap
takes them) and go straight into device memory (pib.data.from_image_bitmap). A live camera frame
is mirrored, centre-cropped, resized and normalised there and only the top TOP_K classes are read
back (pib.data.classify_bitmap).

Training streams: the page keeps the samples (in IndexedDB, web/js/trainer/samples.js) and this
module asks it for each batch as training reaches it (a "samples-wanted" event naming the samples;
the page answers with bitmaps of up to SAMPLES_PER_BITMAP samples stacked top to bottom), AHEAD
batches in advance. Each batch is resized on the device and trained on with train_on_batch, so
neither the page nor this worker ever holds the whole data set: memory is bounded by a few
batches whatever the collection's size, and an epoch's time grows with its sample count. The
model's first layer, pib.layers.RandomAugmentation, crops, scales, turns and relights each batch
on the device from seeded device random numbers. Progress goes back to the page as "train" events.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import Any

import js  # type: ignore[import-not-found]
import numpy as np
from pyodide.ffi import to_js  # type: ignore[import-not-found]

import py_in_browser as pib
from py_in_browser import events, permits, resilience, visibility
from py_in_browser.data import ImagePreprocessing
from py_in_browser.interop import tfjs
from py_in_browser.limits import ModelSummary, TrainingConfig, validate_training
from py_in_browser.model import loads
from py_in_browser.preprocessing import SCHEMA

SAMPLE_SIZE = 64  # web/js/trainer/frames.js SAMPLE_SIZE: the side of a stored sample
HELD_OUT = 0.15
# Small batches generalise better on a few hundred samples; the device limits may lower it.
MAX_AUTO_BATCH = 32
TOP_K = 3  # live prediction reads back this many classes, best first
SEED = 0
# A bitmap of 32 samples stacked is 64 x 2048 px: within the smallest texture side WebGL2 allows.
SAMPLES_PER_BITMAP = 32
AHEAD = 3  # batches asked of the page before the one being trained on
PAGE_WAIT_S = 60.0  # how long a batch the page was asked for may take to arrive
EPOCH_RESTARTS = 3  # restarts of one epoch after GPU losses inside it, before training gives up
# Per training batch: shifts up to 10% of the side, zoom 0.85-1.15, up to 7 degrees of rotation,
# brightness +-0.1 and contrast 0.8-1.2 (the gestures of a webcam wander, and light changes).
AUGMENTATION = {
    "translation": 0.1,
    "zoom": 0.15,
    "rotation": 0.02,
    "brightness": 0.1,
    "contrast": 0.2,
}


def live_preprocessing(size: int) -> ImagePreprocessing:
    """A camera frame to the model's input: mirrored like the preview, the centre square resized
    to size x size, values bytes / 255. Model files carry it (a program elsewhere feeds a loaded
    model the same numbers)."""
    return ImagePreprocessing(size=(size, size), mirror=True, crop="centre")


def sample_preprocessing(size: int) -> ImagePreprocessing:
    """A stored sample to the model's input: already mirrored and square, so only resized."""
    return ImagePreprocessing(size=(size, size), mirror=False, crop="centre")


class Session:
    """The model being trained or used, its labels, input size and live preprocessing, and how
    many bitmaps the engine took (the e2e tests read these to see which path ran)."""

    def __init__(self) -> None:
        self.model: Any = None
        self.labels: list[str] = []
        self.size = 0
        self.preprocessing: ImagePreprocessing | None = None
        # A head on a pretrained backbone's features (web/py/gesture_transfer.py): the backbone
        # it reads, as its model file names it (interop/backbones.py); None for a CNN.
        self.backbone: dict[str, Any] | None = None
        self.bitmaps = {"samples": 0, "frames": 0}


session = Session()


def _runtime_event(event: dict[str, Any]) -> None:
    """Losses and recoveries go to the page as they happen (its status panel polls only every
    few seconds): its banner says what happened and clears once prediction runs again."""
    if event["type"] in ("context_lost", "device_lost", "context_restored", "backend_switched"):
        emit("runtime", {"type": event["type"], "backend": event.get("backend")})


events.add_listener(_runtime_event)


def emit(name: str, payload: dict[str, Any]) -> None:
    """An event for the page: pib.events fires `name` with `payload` as its detail."""
    message = {"type": "event", "name": name, "json": json.dumps(payload)}
    js.postMessage(to_js(message, dict_converter=js.Object.fromEntries))


def take_bytes(key: str) -> bytes:
    value = js.pibInbox.get(key)
    if value is None:
        raise KeyError(f"nothing was put under {key!r}")
    js.pibInbox.delete(key)
    return bytes(value.to_py())


async def samples_on_device(names: list[str], count: int, size: int) -> Any:
    """The `count` stored samples sent as the bitmaps `names` (each SAMPLE_SIZE wide, samples
    stacked top to bottom) as one (count, size, size, 3) tensor: uploaded, split by a reshape
    and resized in one kernel, all on the device."""
    stacks = []
    try:
        for name in names:
            stacks.append(await pib.data.from_image_bitmap(pib.data.take_bitmap(name)))

        def batch() -> Any:
            parts = [pib.reshape(s, (-1, SAMPLE_SIZE, SAMPLE_SIZE, 3)) for s in stacks]
            joined = pib.concat(parts, axis=0) if len(parts) > 1 else parts[0]
            return pib.data.preprocess(joined, sample_preprocessing(size))

        samples = pib.tidy(batch)()
    finally:
        for stack in stacks:
            stack.dispose()
    if samples.shape[0] != count:
        samples.dispose()
        raise ValueError(f"{count} labels for {samples.shape[0]} samples")
    session.bitmaps["samples"] += count
    return samples


def held_out_split(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, held out): the newest HELD_OUT of each class (the last added), at least
    one where a class has two. Recorded frames come in bursts of near-copies: a random pick
    would hold out copies of training frames, while the newest ones are the least like what the
    model trained on."""
    train, held = [], []
    for cls in np.unique(labels):
        members = np.flatnonzero(labels == cls)
        count = round(len(members) * HELD_OUT)
        count = max(count, 1) if len(members) >= 2 else 0
        train.extend(members[: len(members) - count])
        held.extend(members[len(members) - count :])
    return np.array(sorted(train), dtype=np.int64), np.array(sorted(held), dtype=np.int64)


def classifier_layers(classes: int, size: int) -> list[Any]:
    """A small CNN trained from scratch: two conv + pool stages, then two dense layers."""
    layers = pib.layers
    return [
        layers.Conv2D(8, 3, activation="relu", padding="same", input_shape=(size, size, 3)),
        layers.MaxPooling2D(2),
        layers.Conv2D(16, 3, activation="relu", padding="same"),
        layers.MaxPooling2D(2),
        layers.Flatten(),
        layers.Dense(32, activation="relu"),
        layers.Dense(classes, activation="softmax"),
    ]


def build_model(classes: int, size: int, learning_rate: float) -> Any:
    """The classifier behind a seeded RandomAugmentation layer (the identity outside training)."""
    augment = pib.layers.RandomAugmentation(**AUGMENTATION, input_shape=(size, size, 3))
    model = pib.Sequential(
        [augment, *classifier_layers(classes, size)], name="gesture_classifier", seed=SEED
    )
    model.compile(
        optimizer=pib.optimizers.Adam(learning_rate),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


async def without_augmentation(trained: Any, classes: int, size: int) -> Any:
    """The trained classifier without its augmentation layer: the same predictions, and a model
    file any reader (TF.js, ONNX, the registry) runs without knowing that layer."""
    model = pib.Sequential(classifier_layers(classes, size), name="gesture_classifier", seed=SEED)
    model.build()
    model.set_weights(await trained.get_weights())
    return model


def auto_batch_size(model: Any, train_count: int) -> int:
    """Up to MAX_AUTO_BATCH, and no more than one training pass of `model` fits within the
    device's limits (pib.max_batch_size: texture side, storage binding size)."""
    return int(max(1, min(MAX_AUTO_BATCH, pib.max_batch_size(model), train_count)))


class PageSamples:
    """Batches of the page's stored samples as device tensors (count, size, size, 3), asked for
    as training reaches them: `stream` keeps AHEAD batches asked in advance, so the page reads
    and sends the next ones while the device trains on this one."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.asked = 0
        self.pending: set[str] = set()
        self.waited = 0.0  # seconds spent waiting for the page's bitmaps

    def ask(self, indices: np.ndarray) -> list[str]:
        """Asks the page for the samples at `indices` (positions in the list the page sent
        labels for); returns the names their bitmaps will arrive under."""
        parts = []
        for start in range(0, len(indices), SAMPLES_PER_BITMAP):
            self.asked += 1
            name = f"gesture-trainer/batch/{self.asked}"
            part = [int(i) for i in indices[start : start + SAMPLES_PER_BITMAP]]
            parts.append({"name": name, "indices": part})
            self.pending.add(name)
        emit("samples-wanted", {"parts": parts})
        return [part["name"] for part in parts]

    async def arrived(self, names: list[str]) -> None:
        started = time.monotonic()
        while not all(js.pibBitmaps.has(name) for name in names):
            if time.monotonic() > started + PAGE_WAIT_S:
                raise TimeoutError(f"the page did not send the samples asked for ({names[0]})")
            await asyncio.sleep(0.002)  # the worker's event loop takes the page's messages
        self.waited += time.monotonic() - started

    async def receive(self, names: list[str], count: int) -> Any:
        await self.arrived(names)
        self.pending.difference_update(names)
        return await samples_on_device(names, count, self.size)

    async def stream(self, batches: Sequence[np.ndarray]) -> AsyncIterator[tuple[np.ndarray, Any]]:
        """(indices, samples tensor) per batch, in order; the caller disposes each tensor."""
        asked: deque[list[str]] = deque(self.ask(b) for b in batches[:AHEAD])
        for i, indices in enumerate(batches):
            if i + AHEAD < len(batches):
                asked.append(self.ask(batches[i + AHEAD]))
            yield indices, await self.receive(asked.popleft(), len(indices))

    async def drain(self) -> None:
        """Closes the bitmaps asked for but not trained on (a stopped training)."""
        names = list(self.pending)
        self.pending.clear()
        try:
            await self.arrived(names)
        finally:
            for name in names:
                if js.pibBitmaps.has(name):
                    pib.data.take_bitmap(name).close()


def batches_of(indices: np.ndarray, batch: int) -> list[np.ndarray]:
    return [indices[start : start + batch] for start in range(0, len(indices), batch)]


class Peaks:
    """The highest memory figures seen while training: pib.memory()'s tensor bytes and GPU bytes,
    the worker's wasm memory and (Chromium) its JS heap."""

    def __init__(self) -> None:
        self.values: dict[str, int] = {}

    def sample(self) -> None:
        figures = pib.memory()
        seen = {
            "tensor_bytes": int(figures["num_bytes"]),
            "gpu_bytes": int(figures.get("gpu_bytes") or 0),
            "wasm_bytes": wasm_memory_bytes(),
        }
        heap = getattr(js.performance, "memory", None)
        if heap is not None:
            seen["worker_js_heap_bytes"] = int(heap.usedJSHeapSize)
        for key, value in seen.items():
            self.values[key] = max(value, self.values.get(key, 0))


def wasm_memory_bytes() -> int:
    import pyodide_js  # type: ignore[import-not-found]

    return int(pyodide_js._module.HEAPU8.byteLength)


async def held_out_pass(
    model: Any, source: PageSamples, indices: np.ndarray, y: np.ndarray, batch: int
) -> tuple[float | None, np.ndarray]:
    """The held-out samples' mean loss (None for a model without one: not compiled) and their
    predicted classes, batch by batch in inference mode; only the loss sums and the class
    indices are read back."""
    total = 0.0
    predicted = []
    async for part, x in source.stream(batches_of(indices, batch)):
        try:

            def run(x: Any = x, part: np.ndarray = part) -> tuple[Any, Any]:
                out = model(x, training=False)
                if model.loss is None:
                    return None, pib.argmax(out, axis=-1)
                loss = model.loss(pib.tensor(y[part], dtype="int32"), out)
                return loss * float(len(part)), pib.argmax(out, axis=-1)

            loss_sum, classes = pib.tidy(run)()
        finally:
            x.dispose()
        try:
            if loss_sum is not None:
                total += float(await loss_sum.item())
            predicted.append(await classes.numpy())
        finally:
            if loss_sum is not None:
                loss_sum.dispose()
            classes.dispose()
    mean = total / max(1, len(indices)) if model.loss is not None else None
    return mean, np.concatenate(predicted).astype(np.int64)


async def train(
    labels: list[int],
    class_names: list[str],
    size: int,
    epochs: int,
    learning_rate: float,
    batch_size: int | None,
    permit: str | None = None,
) -> dict[str, Any]:
    """Trains a new model on the page's samples (labels[i] is the class of the page's i-th
    sample), streamed batch by batch; returns the held-out evaluation, the batch size, the
    counts, each epoch's seconds and the memory peaks. `permit`: the server's training permit,
    when it requires one (training stays within it)."""
    y = np.asarray(labels, dtype=np.int32)
    train_idx, held_idx = held_out_split(y)
    # The new model's initial weights go to a live device: made on one the engine is still
    # recovering (a loss while samples were collected), they would have no host copy to rebuild.
    await resilience.ensure_ready()
    training = build_model(len(class_names), size, learning_rate)
    training.build((size, size, 3))
    batch = batch_size or auto_batch_size(training, len(train_idx))
    config = TrainingConfig(ModelSummary.of(training), len(train_idx), epochs, batch, streamed=True)
    validate_training(config)
    granted = permits.check_training(config, permit, required=False)
    session.model = training
    session.labels, session.size = list(class_names), size
    session.preprocessing = live_preprocessing(size)
    session.backbone = None
    steps = -(-len(train_idx) // batch)
    source = PageSamples(size)
    peaks = Peaks()
    epoch_seconds: list[float] = []
    started = time.perf_counter()

    def report(event: str, epoch: int, step: int | None, logs: dict[str, float]) -> None:
        emit(
            "train",
            {
                "event": event,
                "epoch": epoch,
                "batch": step,
                "steps": steps,
                "epochs": epochs,
                "logs": logs,
                "seconds": time.perf_counter() - started,
            },
        )

    emit("train", {"event": "begin", "epochs": epochs, "steps": steps, "batch_size": batch})
    try:
        for epoch in range(epochs):
            if granted is not None:
                permits.check_unexpired(granted)
            epoch_started = time.perf_counter()
            order = train_idx[np.random.default_rng([SEED, epoch]).permutation(len(train_idx))]
            # The epoch's starting state on the host: a GPU loss inside the epoch (its batches
            # live on the lost device, so the engine cannot replay them) restarts it from here,
            # with the same batches and augmentation draws as the uninterrupted run.
            start_state = await training.save_checkpoint(event=False)
            for attempt in range(EPOCH_RESTARTS + 1):
                losses_before = resilience.losses()
                try:
                    logs = await train_epoch_and_hold_out(
                        training,
                        source,
                        batches_of(order, batch),
                        y,
                        held_idx,
                        batch,
                        epoch,
                        report,
                        peaks,
                    )
                    # The engine's host copies now hold this epoch's end (its replay log of
                    # device batches is cleared), so a later loss needs nothing of this epoch.
                    await training.device_state.sync()
                    break
                except Exception as exc:
                    if attempt == EPOCH_RESTARTS or not await resilience.loss_behind(
                        exc, losses_before
                    ):
                        raise
                    await source.drain()
                    # The restart's batches go to the device that replaces the lost one: a
                    # failure outside an engine call (a held-out read) comes before recovery.
                    await resilience.ensure_ready()
                    training.load_checkpoint(start_state)
            epoch_seconds.append(time.perf_counter() - epoch_started)
            report("epoch", epoch, None, logs)
            if training.stop_training:
                break
    finally:
        await source.drain()
    stopped = bool(training.stop_training)
    session.model = await without_augmentation(training, len(class_names), size)
    classes = len(class_names)
    predicted = np.zeros(0, np.int64)
    if len(held_idx):
        _, predicted = await held_out_pass(session.model, source, held_idx, y, batch)
    result = evaluation(y[held_idx], predicted, classes)
    peaks.sample()
    result.update(
        batch_size=batch,
        train_count=len(train_idx),
        held_out_count=len(held_idx),
        seconds=time.perf_counter() - started,
        epoch_seconds=epoch_seconds,
        waited_seconds=source.waited,
        memory_peaks=peaks.values,
        stopped=stopped,
    )
    return result


async def train_epoch(
    training: Any,
    source: PageSamples,
    batches: list[np.ndarray],
    y: np.ndarray,
    epoch: int,
    report: Any,
    peaks: Peaks,
) -> tuple[dict[str, float], int]:
    """One epoch of train_on_batch over the page's streamed batches: the running sums of loss
    and accuracy and the samples seen. While the page is hidden it waits between steps, as fit
    does (events paused / resumed)."""
    sums = {"loss": 0.0, "accuracy": 0.0}
    seen = 0
    async for step, (part, x) in aenumerate(source.stream(batches)):
        try:
            if visibility.is_hidden():
                events.record_event("paused", step)
                await visibility.wait_visible()
                events.record_event("resumed", step)
            logs = await training.train_on_batch(x, y[part], return_dict=True)
        finally:
            x.dispose()
        seen += len(part)
        for key in sums:
            sums[key] += logs[key] * len(part)
        peaks.sample()
        report("batch", epoch, step, {k: v / seen for k, v in sums.items()})
        if training.stop_training:
            break
    return sums, seen


async def train_epoch_and_hold_out(
    training: Any,
    source: PageSamples,
    batches: list[np.ndarray],
    y: np.ndarray,
    held_idx: np.ndarray,
    batch: int,
    epoch: int,
    report: Any,
    peaks: Peaks,
) -> dict[str, float]:
    """One epoch and its held-out pass: the epoch's mean loss and accuracy, and the held-out
    loss and accuracy (unless training was stopped)."""
    sums, seen = await train_epoch(training, source, batches, y, epoch, report, peaks)
    logs = {k: v / max(1, seen) for k, v in sums.items()}
    if len(held_idx) and not training.stop_training:
        val_loss, val_classes = await held_out_pass(training, source, held_idx, y, batch)
        logs.update(val_loss=val_loss, val_accuracy=float(np.mean(val_classes == y[held_idx])))
    return logs


async def aenumerate(items: AsyncIterator[Any]) -> AsyncIterator[tuple[int, Any]]:
    index = 0
    async for item in items:
        yield index, item
        index += 1


def evaluation(y: np.ndarray, predicted: np.ndarray, classes: int) -> dict[str, Any]:
    """Accuracy, per-class accuracy and the confusion matrix (rows: true, columns: predicted)."""
    confusion = np.zeros((classes, classes), dtype=np.int64)
    if len(y):
        np.add.at(confusion, (y, predicted), 1)
    totals = confusion.sum(axis=1)
    per_class = [float(confusion[i, i] / totals[i]) if totals[i] else None for i in range(classes)]
    return {
        "accuracy": float(np.trace(confusion) / max(1, len(y))),
        "per_class": per_class,
        "confusion": confusion.tolist(),
    }


def training_config(
    labels: list[int], class_names: list[str], size: int, epochs: int, batch_size: int | None
) -> dict[str, Any]:
    """What `train` with these arguments will run, as POST /api/training/permits reads it: the
    model's summary, the samples it trains on (after the held-out split), epochs, the batch size
    (the automatic one when none is given), and that the samples are streamed."""
    train_idx, _ = held_out_split(np.asarray(labels, dtype=np.int32))
    model = build_model(len(class_names), size, learning_rate=1e-3)
    model.build((size, size, 3))
    summary = ModelSummary.of(model)
    return {
        "model": {
            "input_shape": list(summary.input_shape),
            "param_count": summary.param_count,
            "layer_count": summary.layer_count,
        },
        "samples": len(train_idx),
        "epochs": epochs,
        "batch_size": batch_size or auto_batch_size(model, len(train_idx)),
        "streamed": True,
    }


def stop() -> None:
    """Stops training after the current step; the weights trained so far stay."""
    if session.model is not None:
        session.model.stop_training = True


async def predict(name: str) -> dict[str, Any]:
    """The top classes of the camera frame sent as the bitmap `name`: preprocessed, classified
    and ranked on the device, only TOP_K {"index", "score", "label"} read back; "ms" is the
    engine's time from taking the frame to the result."""
    k = min(TOP_K, len(session.labels))
    result = await pib.data.classify_bitmap(
        session.model, name, session.preprocessing, k=k, labels=session.labels
    )
    session.bitmaps["frames"] += 1
    return result


async def save() -> str:
    """The model file (model_file.py format) as base64, with labels and the live preprocessing."""
    data = await session.model.save(
        labels=session.labels,
        preprocessing=session.preprocessing.to_dict(),
        backbone=session.backbone,
    )
    return base64.b64encode(data).decode()


async def export_tfjs() -> str:
    """The model as a zip of TF.js Layers files (model.json + shard), as base64. A head on a
    backbone is exported alone; its metadata names the backbone its input comes from."""
    data = await tfjs.export_zip(
        session.model,
        labels=session.labels,
        preprocessing=session.preprocessing.to_dict(),
        backbone=session.backbone,
    )
    return base64.b64encode(data).decode()


async def load(key: str) -> dict[str, Any]:
    """Loads a model file put under `key` (gesture_transfer.load takes those that name a
    backbone too)."""
    return use_loaded(*loads(take_bytes(key)))


def use_loaded(model: Any, header: Any) -> dict[str, Any]:
    """Makes a loaded image classifier the session's model: its labels, input size and
    preprocessing (files without the image preprocessing schema get the live one of their
    size)."""
    shape = list(header.input_shape)
    if len(shape) != 3 or shape[0] != shape[1] or shape[2] != 3:
        raise ValueError(f"not an image classifier for this app: input shape {shape}")
    session.model, session.size, session.backbone = model, int(shape[0]), None
    session.labels = list(header.labels or [f"class {i}" for i in range(header.output_shape[-1])])
    stored = header.preprocessing
    if isinstance(stored, dict) and stored.get("schema") == SCHEMA:
        session.preprocessing = ImagePreprocessing.from_dict(stored)
    else:
        session.preprocessing = live_preprocessing(session.size)
    return {
        "labels": session.labels,
        "size": session.size,
        "preprocessing": session.preprocessing.to_dict(),
    }


def status() -> dict[str, Any]:
    """The status panel's figures: backend, capabilities, memory, runtime events, and how many
    training samples and camera frames reached the engine as bitmaps."""
    return {
        "backend": pib.get_backend(),
        "capabilities": pib.capabilities(),
        "memory": pib.memory(),
        "events": pib.runtime_events(),
        "bitmaps": dict(session.bitmaps),
    }
