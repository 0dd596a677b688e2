"""What the in-browser image tests run (tests_e2e/test_image_data.py): frames the page sent as
ImageBitmaps taken onto the active backend and preprocessed there, top-k on the device, and a
small CNN with RandomAugmentation trained step by step (also run by CPython on cpu to compare).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import py_in_browser as pib
from py_in_browser import layers, optimizers

# Preprocessing configs the frame test applies (JSON form): a mirrored centre crop folded into
# one kernel, and a stretched resize with per-channel normalisation.
PREPROCESSINGS: list[dict[str, Any]] = [
    pib.data.ImagePreprocessing(
        size=(12, 12), mirror=True, mean=(0.5,) * 3, std=(0.25,) * 3
    ).to_dict(),
    pib.data.ImagePreprocessing(
        size=(16, 9), crop="none", mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)
    ).to_dict(),
]


async def frames_on_device(raw_name: str, preprocessed_name: str) -> dict[str, Any]:
    """Bitmap `raw_name` as a tensor and preprocessed by each of PREPROCESSINGS on the device;
    bitmap `preprocessed_name` through from_image_bitmap with PREPROCESSINGS[0] in one call."""
    with pib.tidy():
        frame = await pib.data.from_image_bitmap(pib.data.take_bitmap(raw_name))
        out: dict[str, Any] = {"frame": (await frame.numpy()).tolist(), "preprocessed": []}
        for prep in PREPROCESSINGS:
            out["preprocessed"].append((await pib.data.preprocess(frame, prep).numpy()).tolist())
        bitmap = pib.data.take_bitmap(preprocessed_name)
        direct = await pib.data.from_image_bitmap(bitmap, PREPROCESSINGS[0])
        out["direct"] = (await direct.numpy()).tolist()
    return out


def scores_to_rank() -> np.ndarray:
    return np.random.default_rng(4).permutation(60).reshape(6, 10).astype(np.float32) / 60


async def ranked_on_device() -> list[list[dict[str, Any]]]:
    """top_k(3) of scores_to_rank() through an identity model."""
    return await pib.data.top_k(lambda x, training: x, scores_to_rank(), k=3)


async def augmented_cnn_losses() -> tuple[list[float], int, int, int]:
    """12 train_on_batch steps of a small CNN behind RandomAugmentation: the losses, the steps
    replayed and JS calls over the last 6 (GPU backends record the step and replay it), and the
    layer's draw count."""
    rng = np.random.Generator(np.random.PCG64(0))
    x = rng.uniform(size=(48, 10, 10, 3)).astype(np.float32)
    y = (x[:, 3:7, 3:7, 0].mean(axis=(1, 2)) > x[:, 3:7, 3:7, 1].mean(axis=(1, 2))).astype(np.int32)
    augmentation = layers.RandomAugmentation(
        translation=0.1, zoom=0.2, rotation=0.05, brightness=0.1, contrast=0.2
    )
    model = pib.Sequential(
        [
            augmentation,
            layers.Conv2D(6, 3, activation="relu"),
            layers.MaxPool2D(2),
            layers.Flatten(),
            layers.Dense(2),
        ],
        seed=3,
    )
    model.build((10, 10, 3))
    model.compile(
        optimizer=optimizers.Adam(0.01),
        loss=pib.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    losses, pending, counts = [], [], []
    for step in range(12):
        if step == 6:
            counts.append(pib.memory())
        start = (step % 3) * 16
        pending.append(await model.train_on_batch(x[start : start + 16], y[start : start + 16]))
    counts.append(pib.memory())
    for loss in pending:
        losses.append(float(await loss.numpy()))
        loss.dispose()
    replayed = counts[1].get("steps_replayed", 0) - counts[0].get("steps_replayed", 0)
    calls = counts[1].get("js_calls", 0) - counts[0].get("js_calls", 0)
    return losses, replayed, calls, await augmentation.draw_count()


def frame_classifier() -> pib.Sequential:
    """A seeded 4-class softmax model over PREPROCESSINGS[0]'s inputs (the same weights in every
    interpreter and on every backend)."""
    height, width = PREPROCESSINGS[0]["size"]
    model = pib.Sequential(
        [layers.Flatten(), layers.Dense(4, activation="softmax", kernel_initializer="he_normal")],
        seed=7,
    )
    model.build((height, width, 3))
    return model


async def classify_frame(name: str) -> dict[str, Any]:
    """The live-prediction call on frame `name`: top 2 of frame_classifier() and its latency."""
    return await pib.data.classify_bitmap(
        frame_classifier(), name, PREPROCESSINGS[0], k=2, labels=["a", "b", "c", "d"]
    )
