"""pib.data and the image preprocessing config: the schema, preprocessing against a numpy
reference, model files carrying it, top-k ranking, and RandomAugmentation's seeded draws."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import py_in_browser as pib
from py_in_browser import layers, preprocessing
from py_in_browser.model import loads
from py_in_browser.model_file import ModelFileError
from py_in_browser.preprocessing import ImagePreprocessing
from py_in_browser.testing.op_cases import affine_sample_reference


def run(coro):
    return asyncio.run(coro)


def reference_preprocessing(frame: np.ndarray, prep: ImagePreprocessing) -> np.ndarray:
    """The preprocessing steps as the schema states them, with op_cases' per-pixel sampler: the
    crop's share of the frame, mirror, resize, then (v - mean) / std per channel."""
    height, width = frame.shape[1:3]
    out_h, out_w = prep.size
    share_x = share_y = 1.0
    if prep.crop == "centre":
        if height * out_w / out_h < width:
            share_x = height * out_w / out_h / width
        else:
            share_y = width * out_h / out_w / height
    row = [-share_x if prep.mirror else share_x, 0, 0, 0, share_y, 0, 1, 0]
    sampled = affine_sample_reference(frame, np.array([row] * frame.shape[0]), prep.size)
    return (sampled - np.array(prep.mean)) / np.array(prep.std)


def test_config_round_trips_and_is_versioned() -> None:
    prep = ImagePreprocessing(size=(24, 32), mirror=True, crop="none", mean=(0.1, 0.2, 0.3))
    data = prep.to_dict()
    assert data["schema"] == preprocessing.SCHEMA and data["version"] == 1
    assert ImagePreprocessing.from_dict(data) == prep
    assert ImagePreprocessing.from_dict(
        {"schema": preprocessing.SCHEMA, "version": 1, "size": [8, 8]}
    ) == ImagePreprocessing(size=(8, 8))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"version": 2}, "version 2 is not supported"),
        ({"size": [0, 8]}, "size must be"),
        ({"size": [8]}, "size must be"),
        ({"crop": "left"}, "crop must be"),
        ({"std": [1, 0, 1]}, "std must be positive"),
        ({"mean": [0, 0]}, "mean must be 3"),
        ({"mirror": "yes"}, "mirror must be"),
        ({"colour": "rgb"}, "unknown keys"),
    ],
)
def test_config_refuses_malformed_values(change, message) -> None:
    data = {**ImagePreprocessing(size=(8, 8)).to_dict(), **change}
    with pytest.raises(ValueError, match=message):
        ImagePreprocessing.from_dict(data)


@pytest.mark.parametrize(
    ("frame_hw", "prep"),
    [
        ((12, 20), ImagePreprocessing(size=(8, 8), mirror=True)),  # landscape: sides cropped
        ((20, 12), ImagePreprocessing(size=(6, 9), mean=(0.5, 0.4, 0.3), std=(0.2, 0.3, 0.4))),
        ((9, 7), ImagePreprocessing(size=(16, 16), crop="none", mean=(0.5,) * 3, std=(0.25,) * 3)),
    ],
)
def test_preprocess_matches_the_reference(frame_hw, prep) -> None:
    frame = np.random.default_rng(0).uniform(size=(2, *frame_hw, 3)).astype(np.float32)
    got = run(pib.data.preprocess(frame, prep.to_dict()).numpy())
    np.testing.assert_allclose(got, reference_preprocessing(frame, prep), atol=1e-5)


def test_model_file_carries_validated_preprocessing() -> None:
    model = pib.Sequential([layers.Flatten(input_shape=(8, 8, 3)), layers.Dense(2)])
    prep = ImagePreprocessing(size=(8, 8), mirror=True, mean=(0.5,) * 3)
    data = run(model.save(labels=["a", "b"], preprocessing=prep.to_dict()))
    _, header = loads(data)
    assert ImagePreprocessing.from_dict(header.preprocessing) == prep
    with pytest.raises(ModelFileError, match="does not match the input shape"):
        run(model.save(preprocessing=ImagePreprocessing(size=(4, 4)).to_dict()))
    with pytest.raises(ModelFileError, match="version 9 is not supported"):
        run(model.save(preprocessing={**prep.to_dict(), "version": 9}))
    free_form = {"scale": 1 / 255}  # other schemas are stored as given
    assert loads(run(model.save(preprocessing=free_form)))[1].preprocessing == free_form


def test_top_k_ranks_on_the_device_like_numpy() -> None:
    scores = np.random.default_rng(3).permutation(40).reshape(5, 8).astype(np.float32)
    labels = [f"class {i}" for i in range(8)]
    ranked = run(pib.data.top_k(lambda x, training: x, scores, k=3, labels=labels))
    for row, got in zip(scores, ranked, strict=True):
        best = np.argsort(-row)[:3]
        assert [r["index"] for r in got] == best.tolist()
        assert [r["score"] for r in got] == row[best].tolist()
        assert [r["label"] for r in got] == [labels[i] for i in best]
    with pytest.raises(ValueError, match="classes >= 9"):
        run(pib.data.top_k(lambda x, training: x, scores, k=9))


def test_random_augmentation_is_seeded_and_advances_per_batch() -> None:
    images = np.random.default_rng(0).uniform(size=(4, 10, 10, 3)).astype(np.float32)

    def augmented_twice(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Two training batches through a model's augmentation layer, keyed (seed, layer 0)."""
        layer = layers.RandomAugmentation(0.2, 0.2, 0.05, 0.1, 0.2)
        model = pib.Sequential([layer], seed=seed)
        model.build((10, 10, 3))
        first = run(model(images, training=True).numpy())
        params = run(layer.params(4).numpy())  # draw 1, what the second batch uses
        second = run(model(images, training=True).numpy())
        assert run(layer.draw_count()) == 2
        return first, second, params

    first, second, params = augmented_twice(5)
    again, _, _ = augmented_twice(5)
    np.testing.assert_array_equal(first, again)  # reproducible
    assert np.abs(first - second).max() > 0.05  # a new draw per batch
    assert np.abs(first - augmented_twice(6)[0]).max() > 0.05  # another seed, other draws
    # The second batch is affine_sample under the params of draw 1.
    np.testing.assert_allclose(second, affine_sample_reference(images, params, (10, 10)), atol=1e-5)
    zoom = np.hypot(params[:, 0], params[:, 3])
    angle = np.arctan2(params[:, 3], params[:, 0])
    assert ((zoom >= 0.8) & (zoom <= 1.2)).all() and (np.abs(angle) <= 0.05 * 2 * np.pi).all()
    assert (np.abs(params[:, 2:6:3]) <= 0.4).all()  # shifts: 0.2 of the size, normalized
    np.testing.assert_allclose(params[:, 4], params[:, 0], rtol=1e-6)  # rotation and zoom only
    np.testing.assert_allclose(params[:, 1], -params[:, 3], rtol=1e-6)
    assert ((params[:, 6] >= 0.8) & (params[:, 6] <= 1.2)).all()  # contrast


def test_random_augmentation_refuses_large_rotations() -> None:
    with pytest.raises(ValueError, match="rotation must be in"):
        layers.RandomAugmentation(rotation=0.2)
