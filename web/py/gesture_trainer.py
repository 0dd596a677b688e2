"""The gesture trainer's side of the engine, run in the engine's Worker (web/js/trainer/engine.js
loads it as the module `gesture_trainer`).

Pixels arrive as ImageBitmaps transferred to this worker (engine.js posts them; pib.data.take_bitmap
takes them) and go straight into device memory (pib.data.from_image_bitmap). A live camera frame
is mirrored, centre-cropped, resized and normalised there and only the top TOP_K classes are read
back (pib.data.classify_bitmap). Stored training samples (SAMPLE_SIZE squares, already mirrored
and cropped as the person saw them) arrive stacked top to bottom, up to engine.js's
SAMPLES_PER_BITMAP to a bitmap, and become one (N, size, size, 3) tensor resized on the device;
pib.Model.fit takes host arrays, so that tensor is read back once before training. During
training the model's first layer, pib.layers.RandomAugmentation, crops, scales, turns and
relights each batch on the device from seeded device random numbers. Progress goes back to the
page as "train" events posted from this worker.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import js  # type: ignore[import-not-found]
import numpy as np
from pyodide.ffi import to_js  # type: ignore[import-not-found]

import py_in_browser as pib
from py_in_browser import events
from py_in_browser.data import ImagePreprocessing
from py_in_browser.interop import tfjs
from py_in_browser.limits import ModelSummary
from py_in_browser.model import loads
from py_in_browser.preprocessing import SCHEMA

SAMPLE_SIZE = 64  # web/js/trainer/frames.js SAMPLE_SIZE: the side of a stored sample
HELD_OUT = 0.15
# Small batches generalise better on a few hundred samples; the device limits may lower it.
MAX_AUTO_BATCH = 32
TOP_K = 3  # live prediction reads back this many classes, best first
SEED = 0
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
        self.bitmaps = {"samples": 0, "frames": 0}


session = Session()


def emit(name: str, payload: dict[str, Any]) -> None:
    """An event for the page: pib.events fires `name` with `payload` as its detail."""
    message = {"type": "event", "name": name, "json": json.dumps(payload)}
    js.postMessage(to_js(message, dict_converter=js.Object.fromEntries))


def _runtime_event(event: dict[str, Any]) -> None:
    """Losses and recoveries go to the page as they happen (its status panel polls only every
    few seconds): its banner says what happened and clears once prediction runs again."""
    if event["type"] in ("context_lost", "device_lost", "context_restored", "backend_switched"):
        emit("runtime", {"type": event["type"], "backend": event.get("backend")})


events.add_listener(_runtime_event)


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


def held_out_split(labels: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, held out): HELD_OUT of each class, at least one where a class has two."""
    rng = np.random.default_rng(seed)
    train, held = [], []
    for cls in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == cls))
        count = round(len(members) * HELD_OUT)
        count = max(count, 1) if len(members) >= 2 else 0
        held.extend(members[:count])
        train.extend(members[count:])
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


async def classes_of(x: np.ndarray) -> np.ndarray:
    """argmax over the model's outputs on the device; only the class indices are read back."""
    ranked = await pib.data.top_k(session.model, x, k=1)
    return np.array([row[0]["index"] for row in ranked], dtype=np.int64)


async def train(
    names: list[str],
    labels: list[int],
    class_names: list[str],
    size: int,
    epochs: int,
    learning_rate: float,
    batch_size: int | None,
    permit: str | None = None,
) -> dict[str, Any]:
    """Trains a new model on the samples sent as the bitmaps `names`; returns the held-out
    evaluation. `permit`: the server's training permit, when it requires one (fit trains within
    it)."""
    samples = await samples_on_device(names, len(labels), size)
    try:
        x = await samples.numpy()  # fit reads host arrays
    finally:
        samples.dispose()
    y = np.asarray(labels, dtype=np.int32)
    train_idx, held_idx = held_out_split(y, SEED)
    training = build_model(len(class_names), size, learning_rate)
    batch = batch_size or auto_batch_size(training, len(train_idx))
    session.model = training
    session.labels, session.size = list(class_names), size
    session.preprocessing = live_preprocessing(size)
    steps = -(-len(train_idx) // batch)
    started = time.perf_counter()

    def report(event: dict[str, Any]) -> None:
        logs = {k: float(v) for k, v in (event["logs"] or {}).items()}
        emit(
            "train",
            {
                "event": event["event"],
                "epoch": event["epoch"],
                "batch": event["batch"],
                "steps": steps,
                "epochs": epochs,
                "logs": logs,
                "seconds": time.perf_counter() - started,
            },
        )

    emit("train", {"event": "begin", "epochs": epochs, "steps": steps, "batch_size": batch})
    validation = (x[held_idx], y[held_idx]) if len(held_idx) else None
    await training.fit(
        x[train_idx],
        y[train_idx],
        epochs=epochs,
        batch_size=batch,
        shuffle=True,
        seed=SEED,
        validation_data=validation,
        callbacks=[pib.ProgressCallback(report, every_batches=1)],
        permit=permit,
    )
    stopped = bool(training.stop_training)
    session.model = await without_augmentation(training, len(class_names), size)
    result = await evaluate_held_out(x[held_idx], y[held_idx])
    result.update(
        batch_size=batch,
        train_count=len(train_idx),
        held_out_count=len(held_idx),
        seconds=time.perf_counter() - started,
        stopped=stopped,
    )
    return result


async def evaluate_held_out(x: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """Accuracy, per-class accuracy and the confusion matrix (rows: true, columns: predicted)."""
    classes = len(session.labels)
    confusion = np.zeros((classes, classes), dtype=np.int64)
    if len(y):
        np.add.at(confusion, (y, await classes_of(x)), 1)
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
    """What `train` with these arguments will ask of fit, as POST /api/training/permits reads
    it: the model's summary, the samples it trains on (after the held-out split), epochs and
    the batch size (the automatic one when none is given)."""
    train_idx, _ = held_out_split(np.asarray(labels, dtype=np.int32), SEED)
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
        labels=session.labels, preprocessing=session.preprocessing.to_dict()
    )
    return base64.b64encode(data).decode()


async def export_tfjs() -> str:
    """The model as a zip of TF.js Layers files (model.json + shard), as base64."""
    data = await tfjs.export_zip(
        session.model, labels=session.labels, preprocessing=session.preprocessing.to_dict()
    )
    return base64.b64encode(data).decode()


async def load(key: str) -> dict[str, Any]:
    """Loads a model file put under `key`; its labels, input size and preprocessing become the
    session's (files without the image preprocessing schema get the live one of their size)."""
    model, header = loads(take_bytes(key))
    shape = list(header.input_shape)
    if len(shape) != 3 or shape[0] != shape[1] or shape[2] != 3:
        raise ValueError(f"not an image classifier for this app: input shape {shape}")
    session.model, session.size = model, int(shape[0])
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
