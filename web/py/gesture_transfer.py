"""Transfer learning in the gesture trainer (engine.js loads it as the module `gesture_transfer`,
after gesture_trainer, whose session, events and held-out split it shares).

The backbone is MediaPipe's hand landmark model (py_in_browser/interop/backbones.py), frozen and
loaded once per worker from the server (same-origin, sha256 checked). Each sample is embedded
once, when it is added: the page sends its best pixels (the frame's or image's centre square) as
a bitmap, `embed` mirrors and resizes it to the backbone's input on the device and runs the
backbone on it and on COPIES augmented copies (seeded per sample: affine_sample with
gesture_trainer's AUGMENTATION ranges), and reads back only the embeddings, which the page keeps
with the sample. `train_head` trains a small head on those cached embeddings (standardised, then
HIDDEN relu units and a softmax layer: seconds, even on cpu); the standardisation is folded into
the first layer's weights, so the head is plain Dense layers that the model file, TF.js and ONNX
exports carry as they are. Live
prediction (`predict`) runs the backbone and the head on the device: the top classes are read
back, and the hand model's 21 landmarks and hand score with them (64 numbers), which the page
draws on the preview.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import gesture_trainer as trainer  # type: ignore[import-not-found]
import numpy as np

import py_in_browser as pib
from py_in_browser import _js, permits, resilience
from py_in_browser.interop import backbones
from py_in_browser.interop.graph_model import HAND_NODES, GraphModel
from py_in_browser.layer_configs import layer_config, layer_from_config
from py_in_browser.limits import ModelSummary, TrainingConfig, validate_training
from py_in_browser.model import Sequential

BACKBONE = backbones.HAND_LANDMARK_LITE
COPIES = 4  # augmented copies embedded per sample, beside the sample itself
HEAD_BATCH = 32
HIDDEN = 64  # units of the head's hidden layer
# What the live call reads of the backbone beside the embedding: 21 landmarks (x, y, z in input
# pixels) and the score that a hand is there.
LANDMARKS, HAND_SCORE = HAND_NODES["landmarks"], HAND_NODES["hand_score"]


class Transfer:
    """The backbone (loaded once) and the live model: Sequential([Pretrained(backbone), head])."""

    def __init__(self) -> None:
        self.backbone: GraphModel | None = None
        self.live: LiveModel | None = None
        self.embedded = 0  # samples embedded (the e2e tests read it)


state = Transfer()


async def backbone() -> GraphModel:
    """The backbone, fetched same-origin and checked against its sha256 on first use."""
    if state.backbone is None:
        state.backbone = await backbones.resolve(BACKBONE.reference())
    return state.backbone


def info() -> dict[str, Any]:
    """What the page shows and keys its cached embeddings by."""
    return {**BACKBONE.reference(), "copies": COPIES}


def augmentation_params(seed: int, copies: int) -> np.ndarray:
    """affine_sample params (copies, 8) of `copies` augmented views, drawn from `seed` with
    gesture_trainer.AUGMENTATION's ranges (as RandomAugmentation draws them: zoom, a small turn,
    shifts of the side, contrast around mid-grey and a brightness delta). Every other view is
    mirrored too: the other hand making the same gesture (a person may use either, and uploaded
    images are not mirrored while live frames are)."""
    ranges = trainer.AUGMENTATION
    u = np.random.default_rng([trainer.SEED, seed]).uniform(-1.0, 1.0, size=(copies, 6))
    zoom = 1.0 + ranges["zoom"] * u[:, 0]
    turn = ranges["rotation"] * 2.0 * np.pi * u[:, 1]
    shift_x, shift_y = 2.0 * ranges["translation"] * u[:, 2], 2.0 * ranges["translation"] * u[:, 3]
    delta = ranges["brightness"] * u[:, 4]
    gain = 1.0 + ranges["contrast"] * u[:, 5]
    cos, sin = zoom * np.cos(turn), zoom * np.sin(turn)
    flip = np.where(np.arange(copies) % 2 == 1, -1.0, 1.0)  # x = a u + ...: negating a, d mirrors
    offset = 0.5 * (1.0 - gain) + delta
    return np.stack([flip * cos, -sin, shift_x, flip * sin, cos, shift_y, gain, offset], 1).astype(
        np.float32
    )


async def embed(name: str, mirror: bool, seed: int, copies: int = COPIES) -> dict[str, Any]:
    """The embeddings of the bitmap `name` (a sample's pixels) and of `copies` augmented views
    of it, seeded by `seed`: {"embedding": base64 of (1 + copies, D) float32, "rows", "ms"}.
    The work is guarded (resilience.py): a GPU lost before or during it is recovered, the
    backbone's weights uploaded again and the sample embedded again from a kept copy."""
    started = time.perf_counter()
    gm = await backbone()
    preprocessing = BACKBONE.preprocessing(mirror)
    side = preprocessing.size
    params = augmentation_params(seed, copies)
    bitmap = pib.data.take_bitmap(name)
    spare = [await _js.copy_bitmap(bitmap) if resilience.losable() else None]

    async def run() -> np.ndarray:
        source = bitmap
        if bitmap.width == 0:  # an earlier try uploaded (and closed) it on a device since lost
            source, spare[0] = spare[0], await _js.copy_bitmap(spare[0])
        frame = await pib.data.from_image_bitmap(source, preprocessing)

        def views() -> Any:
            batch = [frame]
            if copies:
                repeated = pib.concat([frame] * copies, axis=0)
                batch.append(pib.affine_sample(repeated, params, side))
            return gm.run(pib.concat(batch, axis=0), BACKBONE.output)

        try:
            out = pib.tidy(views)()
        finally:
            frame.dispose()
        try:
            return np.asarray(await out.numpy(), dtype="<f4")
        finally:
            out.dispose()

    try:
        values = await resilience.guarded(run, gm.device_state)
    finally:
        if spare[0] is not None:
            spare[0].close()
    state.embedded += 1
    return {
        "embedding": base64.b64encode(values.tobytes()).decode(),
        "rows": int(values.shape[0]),
        "ms": (time.perf_counter() - started) * 1000.0,
    }


def head_layers(classes: int, features: int) -> list[Any]:
    """A small MLP: measured on hand_gestures.py's held-out images beyond the training ones (30
    per class, 25 held out per class), it reached 96.0% where one softmax Dense layer reached
    92.0-93.3% (CPython, the same embeddings)."""
    return [
        pib.layers.Dense(HIDDEN, activation="relu", input_shape=(features,), name="hidden"),
        pib.layers.Dense(classes, activation="softmax", name="classes"),
    ]


def fresh_layers(head: Sequential) -> list[Any]:
    """Unbuilt copies of a head's layers (from their configs, as a model file keeps them)."""
    return [layer_from_config(layer_config(layer), i)[0] for i, layer in enumerate(head.layers)]


def folded_weights(
    weights: list[np.ndarray], mean: np.ndarray, std: np.ndarray
) -> list[np.ndarray]:
    """The weights of a head trained on standardised embeddings, (e - mean) / std, with the
    standardisation folded into its first layer: W / std and b - (mean / std) W."""
    kernel, bias, *rest = weights
    folded = (kernel / std[:, None]).astype(np.float32)
    return [folded, (bias - mean @ folded).astype(np.float32), *rest]


def new_head(classes: int, features: int, learning_rate: float) -> Sequential:
    head = pib.Sequential(head_layers(classes, features), name="gesture_head", seed=trainer.SEED)
    head.compile(
        optimizer=pib.optimizers.Adam(learning_rate),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    head.build()
    return head


async def embedding_size() -> int:
    """The number of values in one embedding (by the op table's shape rules: no device work)."""
    return (await backbone()).output_shape(BACKBONE.input_shape, BACKBONE.output)[-1]


async def head_training(
    labels: list[int], classes: int, epochs: int, batch_size: int | None
) -> TrainingConfig:
    """What train_head with these arguments runs (within the caps of limits.py): the head on
    the training samples' embeddings and their augmented views."""
    features = await embedding_size()
    train_idx, _ = trainer.held_out_split(np.asarray(labels, dtype=np.int32))
    rows = len(train_idx) * (COPIES + 1)
    batch = int(batch_size or HEAD_BATCH)
    summary = ModelSummary.of(new_head(classes, features, 1e-3))
    return TrainingConfig(summary, rows, epochs, batch, streamed=False)


async def training_config(
    labels: list[int], class_names: list[str], epochs: int, batch_size: int | None
) -> dict[str, Any]:
    """gesture_trainer.training_config's answer for the head (POST /api/training/permits)."""
    config = await head_training(labels, len(class_names), epochs, batch_size)
    return {
        "model": {
            "input_shape": list(config.model.input_shape),
            "param_count": config.model.param_count,
            "layer_count": config.model.layer_count,
        },
        "samples": config.samples,
        "epochs": config.epochs,
        "batch_size": config.batch_size,
        "streamed": config.streamed,
    }


async def train_head(
    key: str,
    labels: list[int],
    class_names: list[str],
    epochs: int,
    learning_rate: float,
    batch_size: int | None,
    permit: str | None = None,
) -> dict[str, Any]:
    """Trains the head on the cached embeddings put under `key` (float32 (samples, 1 + COPIES,
    D): each sample's own embedding, then its augmented views; labels[i] is sample i's class).
    HELD_OUT of each class (gesture_trainer.held_out_split) is held out with its views and
    evaluated on its own embedding; the others train with their views. Returns what
    gesture_trainer.train returns (the page shows it the same way)."""
    started = time.perf_counter()
    y = np.asarray(labels, dtype=np.int32)
    features = await embedding_size()
    data = np.frombuffer(trainer.take_bytes(key), dtype="<f4").reshape(len(y), -1, features)
    train_idx, held_idx = trainer.held_out_split(y)
    x_train = data[train_idx].reshape(-1, features)
    y_train = np.repeat(y[train_idx], data.shape[1])
    mean, std = x_train.mean(axis=0), x_train.std(axis=0) + 1e-6
    classes = len(class_names)
    config = await head_training(labels, classes, epochs, batch_size)
    validate_training(config)
    permits.check_training(config, permit, required=False)
    batch = config.batch_size
    gm = await backbone()
    # As gesture_trainer.train: the head's initial weights go to a live device, never to one the
    # engine is still recovering after a loss while samples were embedded.
    await resilience.ensure_ready()
    head = new_head(classes, features, learning_rate)
    trainer.session.model = head  # gesture_trainer.stop() stops it
    steps = -(-len(x_train) // batch)
    epoch_seconds: list[float] = []
    epoch_started = [time.perf_counter()]
    trainer.emit("train", {"event": "begin", "epochs": epochs, "steps": steps, "batch_size": batch})

    def epoch_end(epoch: int, logs: dict[str, float]) -> None:
        epoch_seconds.append(time.perf_counter() - epoch_started[0])
        epoch_started[0] = time.perf_counter()
        trainer.emit(
            "train",
            {
                "event": "epoch",
                "epoch": epoch,
                "batch": None,
                "steps": steps,
                "epochs": epochs,
                "logs": {k: float(v) for k, v in logs.items()},
                "seconds": time.perf_counter() - started,
            },
        )

    held = ((data[held_idx, 0] - mean) / std, y[held_idx]) if len(held_idx) else None
    await head.fit(
        (x_train - mean) / std,
        y_train,
        epochs=epochs,
        batch_size=batch,
        seed=trainer.SEED,
        validation_data=held,
        callbacks=[pib.callbacks.LambdaCallback(on_epoch_end=epoch_end)],
    )
    stopped = bool(head.stop_training)
    weights = folded_weights(await head.get_weights(), mean, std)
    trained = pib.Sequential(head_layers(classes, features), name="gesture_head", seed=trainer.SEED)
    trained.set_weights(weights)
    use_head(gm, trained, weights, list(class_names))
    predicted = np.zeros(0, np.int64)
    if len(held_idx):
        out = await trainer.session.model.predict(data[held_idx, 0])
        predicted = np.argmax(await out.numpy(), axis=-1).astype(np.int64)
        out.dispose()
    result = trainer.evaluation(y[held_idx], predicted, classes)
    result.update(
        batch_size=batch,
        train_count=len(train_idx),
        held_out_count=len(held_idx),
        trained_rows=len(x_train),
        seconds=time.perf_counter() - started,
        epoch_seconds=epoch_seconds,
        waited_seconds=0.0,
        memory_peaks={},
        stopped=stopped,
        backbone=BACKBONE.reference(),
    )
    return result


class LiveModel:
    """Sequential([Pretrained(backbone, output=embedding), head]) for classify_bitmap, whose
    call also keeps the hand's score and landmarks of the same backbone run (`hand`, one
    (1, 64) tensor, read back after the call): one pass of the backbone per frame."""

    def __init__(self, gm: GraphModel, head: Sequential, weights: list[np.ndarray]) -> None:
        self.pretrained = pib.layers.Pretrained(gm, output=BACKBONE.output)
        self.model = pib.Sequential([self.pretrained, *fresh_layers(head)], name="gesture_live")
        self.model.build(BACKBONE.input_shape)
        head = [w for layer in self.model.layers[1:] for w in layer.weights]
        for var, array in zip(head, weights, strict=True):
            with pib.tidy():
                var.assign(pib.tensor(array))
        # Host copies for a rebuild after a GPU loss: the head's arrays and the backbone's own
        # (its weights are shared with the GraphModel, never uploaded again).
        reads = self.pretrained._reads
        self.model.device_state.keep(
            [(v, gm.host_weights[ref]) for ref, v in reads.items()]
            + list(zip(head, weights, strict=True))
        )
        self.device_state = self.model.device_state  # the guard rebuilds backbone and head
        self.gm = gm
        self.hand: Any = None

    def __call__(self, x: Any, training: bool = False) -> Any:
        embedding, landmarks, score = self.gm.run(
            x, [BACKBONE.output, LANDMARKS, HAND_SCORE], self.pretrained._reads
        )
        out = embedding
        for layer in self.model.layers[1:]:
            out = layer(out, training=False)
        if self.hand is not None:
            self.hand.dispose()
        flat = pib.concat([pib.reshape(score, (1, -1)), pib.reshape(landmarks, (1, -1))], axis=1)
        self.hand = pib.keep(flat)
        return out


def use_head(
    gm: GraphModel, head: Sequential, weights: list[np.ndarray], labels: list[str]
) -> None:
    """Makes backbone + `head` (its weights `weights`) the session's model: live prediction uses
    both, save and export the head alone (naming the backbone)."""
    side = BACKBONE.input_shape[0]
    state.live = LiveModel(gm, head, weights)
    session = trainer.session
    session.model, session.labels, session.size = head, labels, side
    session.preprocessing = BACKBONE.preprocessing(mirror=True)
    session.backbone = BACKBONE.reference()


async def predict(name: str) -> dict[str, Any]:
    """gesture_trainer.predict's result for the transfer model, with "hand": {"score",
    "landmarks": 21 [x, y] in [0, 1] of the square the backbone saw (mirrored, as the preview)}."""
    live = state.live
    if live is None:
        raise RuntimeError("no transfer model: train one or load a model file")
    k = min(trainer.TOP_K, len(trainer.session.labels))
    result = await pib.data.classify_bitmap(
        live, name, trainer.session.preprocessing, k=k, labels=trainer.session.labels
    )
    trainer.session.bitmaps["frames"] += 1
    values = await live.hand.numpy()
    side = float(BACKBONE.input_shape[0])
    points = values[0, 1:].reshape(-1, 3)[:, :2] / side
    result["hand"] = {"score": float(values[0, 0]), "landmarks": points.round(4).tolist()}
    return result


async def load(key: str) -> dict[str, Any]:
    """Loads a model file put under `key`: a head that names a backbone gets it (resolved
    same-origin, sha256 checked: backbones.BackboneError names what is missing); any other
    file is gesture_trainer's."""
    model, header = trainer.loads(trainer.take_bytes(key))
    if header.backbone is None:
        state.live = None
        return trainer.use_loaded(model, header)
    named = header.backbone
    if (named["name"], named["sha256"]) != (BACKBONE.name, BACKBONE.sha256):
        raise backbones.BackboneError(
            f"this model reads the backbone {named['name']} ({named['version']}, sha256 "
            f"{named['sha256'][:12]}…); this app has {BACKBONE.name} ({BACKBONE.version}, sha256 "
            f"{BACKBONE.sha256[:12]}…), whose embeddings its head was not trained on"
        )
    gm = await backbone()  # BackboneError when the server does not serve it as pinned
    expected = gm.output_shape(BACKBONE.input_shape, BACKBONE.output)
    if tuple(expected) != tuple(header.input_shape):
        raise backbones.BackboneError(
            f"the head takes {list(header.input_shape)}, but {BACKBONE.name}'s embedding is "
            f"{list(expected)}"
        )
    labels = list(header.labels or [f"class {i}" for i in range(header.output_shape[-1])])
    use_head(gm, model, await model.get_weights(), labels)
    return {
        "labels": labels,
        "size": trainer.session.size,
        "preprocessing": trainer.session.preprocessing.to_dict(),
        "backbone": named,
    }
