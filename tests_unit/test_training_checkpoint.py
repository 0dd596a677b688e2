"""Checkpoint mid-run, restore into a fresh model, continue: bit-identical to an uninterrupted run."""

import asyncio
import io

import numpy as np

import py_in_browser as pib
from py_in_browser import layers


def make_model() -> pib.Sequential:
    model = pib.Sequential(
        [
            layers.Dense(16, activation="relu", input_shape=(6,)),
            layers.BatchNormalization(),
            layers.Dropout(0.3),
            layers.Dense(3, activation="softmax"),
        ],
        seed=5,
    )
    model.compile(optimizer="adamw", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


class CheckpointAt(pib.Callback):
    """Saves a checkpoint after a given (epoch, batch), as a UI's pause button would."""

    def __init__(self, epoch: int, batch: int) -> None:
        super().__init__()
        self.at, self.epoch, self.blob = (epoch, batch), 0, b""

    def on_epoch_begin(self, epoch: int, logs: dict) -> None:
        self.epoch = epoch

    async def on_batch_end(self, batch: int, logs: dict) -> None:
        if (self.epoch, batch) == self.at:
            assert self.model is not None
            self.blob = await self.model.save_checkpoint()
            self.model.stop_training = True


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.Generator(np.random.PCG64(1))
    return rng.standard_normal((50, 6)).astype(np.float32), rng.integers(0, 3, 50)


def test_resume_mid_epoch_is_bit_identical() -> None:
    x, y = data()
    settings = {"epochs": 4, "batch_size": 8, "seed": 3}

    reference = make_model()
    full = asyncio.run(reference.fit(x, y, **settings))
    want = asyncio.run(reference.get_weights())

    interrupted = make_model()
    saver = CheckpointAt(epoch=1, batch=2)
    asyncio.run(interrupted.fit(x, y, callbacks=[saver], **settings))
    assert saver.blob

    restored = make_model()
    restored.load_checkpoint(saver.blob)
    resumed = asyncio.run(restored.fit(x, y, resume=True, **settings))
    got = asyncio.run(restored.get_weights())

    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert np.array_equal(a, b)
    assert resumed.history["loss"] == full.history["loss"][1:]


def test_checkpoint_is_plain_npz_with_documented_keys() -> None:
    x, y = data()
    model = make_model()
    asyncio.run(model.fit(x, y, epochs=1, batch_size=10))
    blob = asyncio.run(model.save_checkpoint())
    with np.load(io.BytesIO(blob), allow_pickle=False) as archive:
        keys = set(archive.files)
    assert {"format", "weights/0000", "optimizer/config", "optimizer/state/0000"} <= keys
    assert {"rng/seed", "rng/dropout_calls", "progress/json"} <= keys
    assert any(e["type"] == "checkpoint" for e in pib.runtime_events())
