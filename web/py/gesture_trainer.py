"""The gesture trainer's side of the engine, run in the engine's Worker (web/js/trainer/engine.js
loads it as the module `gesture_trainer`).

Pixels arrive as RGBA bytes already mirrored, centre-cropped and resized to the input size by the
page (web/js/trainer/frames.js), handed over with pib.put into js.pibInbox; here they become
float32 tensors scaled to [0, 1] (PREPROCESSING, stored in the model file). Progress goes back to
the page as "train" events posted from this worker.
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
from py_in_browser.interop import tfjs
from py_in_browser.limits import DEFAULT_LIMITS, ModelSummary
from py_in_browser.model import loads

# What the page does to a frame before it gets here, and what `pixels` does after: stored in the
# model file so a program elsewhere feeds a loaded model the same numbers.
PREPROCESSING = {
    "color": "rgb",
    "layout": "NHWC",
    "steps": [
        "mirror horizontally (selfie view)",
        "centre square crop",
        "bilinear resize to input_shape[0] x input_shape[1]",
    ],
    "scale": 1 / 255,
    "mean": [0.0, 0.0, 0.0],
    "std": [1.0, 1.0, 1.0],
}
HELD_OUT = 0.15
MAX_AUTO_BATCH = 32
SEED = 0


class Session:
    """The model being trained or used, its labels and input size."""

    def __init__(self) -> None:
        self.model: Any = None
        self.labels: list[str] = []
        self.size = 0


session = Session()


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


def pixels(key: str, size: int) -> np.ndarray:
    """(N, size, size, 3) float32 in [0, 1] from the RGBA bytes put under `key`."""
    rgba = np.frombuffer(take_bytes(key), dtype=np.uint8).reshape(-1, size, size, 4)
    return rgba[..., :3].astype(np.float32) * np.float32(PREPROCESSING["scale"])


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


def build_model(classes: int, size: int, learning_rate: float) -> Any:
    """A small CNN trained from scratch: two conv + pool stages, then two dense layers."""
    layers = pib.layers
    model = pib.Sequential(
        [
            layers.Conv2D(8, 3, activation="relu", padding="same", input_shape=(size, size, 3)),
            layers.MaxPooling2D(2),
            layers.Conv2D(16, 3, activation="relu", padding="same"),
            layers.MaxPooling2D(2),
            layers.Flatten(),
            layers.Dense(32, activation="relu"),
            layers.Dense(classes, activation="softmax"),
        ],
        name="gesture_classifier",
        seed=SEED,
    )
    model.compile(
        optimizer=pib.optimizers.Adam(learning_rate),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


def auto_batch_size(size: int, train_count: int) -> int:
    """The largest batch up to MAX_AUTO_BATCH whose biggest activation fits the device's limits."""
    caps = pib.capabilities()
    # The first conv's output, 8 float32 channels per pixel, is the largest buffer of a step.
    per_sample = size * size * 8 * 4
    device_bytes = caps.get("max_storage_buffer_binding_size") or (
        caps.get("max_texture_size", 4096) ** 2 * 16
    )
    fits = max(1, device_bytes // per_sample)
    return int(max(1, min(MAX_AUTO_BATCH, DEFAULT_LIMITS.max_batch_size, fits, train_count)))


async def classes_of(x: Any) -> np.ndarray:
    """argmax over the model's outputs on the device; only the class indices are read back."""
    probabilities = await session.model.predict(x)
    top = pib.argmax(probabilities, axis=-1)
    try:
        return np.asarray(await top.numpy())
    finally:
        top.dispose()
        probabilities.dispose()


async def train(
    key: str,
    labels: list[int],
    class_names: list[str],
    size: int,
    epochs: int,
    learning_rate: float,
    batch_size: int | None,
    permit: str | None = None,
) -> dict[str, Any]:
    """Trains a new model on the samples put under `key`; returns the held-out evaluation.
    `permit`: the server's training permit, when it requires one (fit trains within it)."""
    x = pixels(key, size)
    y = np.asarray(labels, dtype=np.int32)
    train_idx, held_idx = held_out_split(y, SEED)
    batch = batch_size or auto_batch_size(size, len(train_idx))
    session.model = build_model(len(class_names), size, learning_rate)
    session.labels, session.size = list(class_names), size
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
    await session.model.fit(
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
    result = await evaluate_held_out(x[held_idx], y[held_idx])
    result.update(
        batch_size=batch,
        train_count=len(train_idx),
        held_out_count=len(held_idx),
        seconds=time.perf_counter() - started,
        stopped=bool(session.model.stop_training),
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
        "batch_size": batch_size or auto_batch_size(size, len(train_idx)),
    }


def stop() -> None:
    """Stops training after the current step; the weights trained so far stay."""
    if session.model is not None:
        session.model.stop_training = True


async def predict(key: str) -> dict[str, Any]:
    """Class probabilities of the one frame put under `key`, and the top class found on the
    device (argmax), with the engine's time for it."""
    started = time.perf_counter()
    x = pixels(key, session.size)
    probabilities = await session.model.predict(x)
    top = pib.argmax(probabilities, axis=-1)
    try:
        best = int((await top.numpy())[0])
        scores = (await probabilities.numpy())[0]
    finally:
        top.dispose()
        probabilities.dispose()
    return {
        "top": best,
        "scores": [float(s) for s in scores],
        "engine_ms": (time.perf_counter() - started) * 1000,
    }


async def save() -> str:
    """The model file (model_file.py format) as base64, with labels and PREPROCESSING."""
    data = await session.model.save(labels=session.labels, preprocessing=PREPROCESSING)
    return base64.b64encode(data).decode()


async def export_tfjs() -> str:
    """The model as a zip of TF.js Layers files (model.json + shard), as base64."""
    data = await tfjs.export_zip(session.model, labels=session.labels, preprocessing=PREPROCESSING)
    return base64.b64encode(data).decode()


async def load(key: str) -> dict[str, Any]:
    """Loads a model file put under `key`; its labels and input size become the session's."""
    model, header = loads(take_bytes(key))
    shape = list(header.input_shape)
    if len(shape) != 3 or shape[0] != shape[1] or shape[2] != 3:
        raise ValueError(f"not an image classifier for this app: input shape {shape}")
    session.model, session.size = model, int(shape[0])
    session.labels = list(header.labels or [f"class {i}" for i in range(header.output_shape[-1])])
    return {"labels": session.labels, "size": session.size, "preprocessing": header.preprocessing}


def status() -> dict[str, Any]:
    """The status panel's figures: backend, capabilities, memory and runtime events."""
    return {
        "backend": pib.get_backend(),
        "capabilities": pib.capabilities(),
        "memory": pib.memory(),
        "events": pib.runtime_events(),
    }
