"""The engine's model file: exact round trips for every layer type, and malformed files refused."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import zipfile

import numpy as np
import pytest

import py_in_browser as pib
from py_in_browser import layer_configs, layers, limits, model_file
from py_in_browser.model import loads
from py_in_browser.model_file import ModelFileError


def run(coro):
    return asyncio.run(coro)


def every_layer_model() -> pib.Sequential:
    """One model holding every layer type the file format knows (checked against layers.py)."""
    return pib.Sequential(
        [
            layers.RandomAugmentation(
                translation=0.2,
                rotation=0.05,
                contrast=0.1,
                value_range=(-1, 1),
                seed=3,
                input_shape=(8, 8, 2),
            ),
            layers.Conv2D(4, 3, padding="same", activation="relu"),
            layers.BatchNormalization(momentum=0.9, epsilon=1e-4),
            layers.MaxPool2D(2),
            layers.Conv2D(
                3, (2, 1), strides=(1, 2), use_bias=False, kernel_initializer="he_normal"
            ),
            layers.AveragePooling2D(pool_size=(1, 2), padding="same"),
            layers.Dropout(0.25, seed=7),
            layers.BatchNormalization(center=False, scale=False),
            layers.GlobalAveragePooling2D(),
            layers.Activation("tanh"),
            layers.Dense(5, activation="gelu"),
            layers.Dropout(0.1),
            layers.Flatten(),
            layers.Dense(3, activation="softmax"),
        ],
        name="every_layer",
        seed=11,
    )


def mlp() -> pib.Sequential:
    return pib.Sequential(
        [layers.Dense(4, activation="relu", input_shape=(3,)), layers.Dense(2)], name="mlp"
    )


def test_the_test_model_covers_every_public_layer_class() -> None:
    public = {
        cls
        for cls in vars(layers).values()
        if isinstance(cls, type)
        and issubclass(cls, layers.Layer)
        and not cls.__name__.startswith("_")
    } - {layers.Layer}
    # A Pretrained layer wraps a graph model loaded from its own files: a model file holds the
    # head after it and names the backbone (save(backbone=...), interop/backbones.py), so a
    # Sequential holding the layer itself is refused by name (test below), not silently wrong.
    saveable = public - {layers.Pretrained}
    assert saveable == {spec.cls for spec in layer_configs.LAYER_SPECS}
    assert saveable == {type(layer) for layer in every_layer_model().layers}


def test_a_model_with_a_pretrained_layer_is_refused_by_name_when_saved() -> None:
    from py_in_browser.testing import graph_models

    gm = run(pib.load_graph_model(graph_models.tiny_graph_model()))
    model = pib.Sequential([layers.Pretrained(gm, output="h"), layers.Dense(1)])
    model.build((3,))
    with pytest.raises(ModelFileError, match="Pretrained cannot be saved"):
        run(model.save())


def test_round_trip_is_exact_for_every_layer_type() -> None:
    model = every_layer_model()
    model.build()
    rng = np.random.default_rng(0)
    # Distinct values everywhere (moving statistics too), so any mix-up of arrays shows.
    model.set_weights([rng.normal(size=w.shape).astype(np.float32) for w in model.weights])
    data = run(
        model.save(labels=["a", "b", "c"], preprocessing={"scale": 1 / 255}, description="d")
    )
    loaded, header = loads(data)
    assert [layer_configs.layer_config(layer) for layer in loaded.layers] == [
        layer_configs.layer_config(layer) for layer in model.layers
    ]
    assert (loaded.name, loaded.seed, loaded.input_shape) == ("every_layer", 11, (8, 8, 2))
    for original, restored in zip(run(model.get_weights()), run(loaded.get_weights()), strict=True):
        assert original.dtype == restored.dtype == np.float32
        np.testing.assert_array_equal(original, restored)
    assert header.labels == ["a", "b", "c"]
    assert header.preprocessing == {"scale": 1 / 255}
    assert header.description == "d"
    assert header.param_count == model.count_params()
    x = rng.normal(size=(4, 8, 8, 2)).astype(np.float32)
    np.testing.assert_array_equal(
        run(run(model.predict(x)).numpy()), run(run(loaded.predict(x)).numpy())
    )
    # Saving the loaded model gives the same bytes: nothing is lost or renamed on the way.
    assert (
        run(loaded.save(labels=["a", "b", "c"], preprocessing={"scale": 1 / 255}, description="d"))
        == data
    )


def test_load_model_is_the_public_reverse_of_save() -> None:
    model = mlp()
    restored = run(pib.load_model(run(model.save())))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(
        run(run(model.predict(x)).numpy()), run(run(restored.predict(x)).numpy())
    )


def test_weight_shapes_in_the_format_match_what_layers_build() -> None:
    model = every_layer_model()
    model.build()
    header = model_file.read_header(run(model.save()))
    assert [(w["name"], tuple(w["shape"])) for w in header.weights] == [
        (w.name, w.shape) for w in model.weights
    ]


def test_header_is_keras_config_form() -> None:
    header = json.loads(zipfile.ZipFile(io.BytesIO(run(mlp().save()))).read("model.json"))
    arch = header["architecture"]
    assert arch["class_name"] == "Sequential"
    first = arch["config"]["layers"][0]
    assert first["class_name"] == "Dense"
    assert first["config"]["batch_input_shape"] == [None, 3]
    assert first["config"]["units"] == 4 and first["config"]["activation"] == "relu"


def test_custom_activation_cannot_be_saved() -> None:
    model = pib.Sequential([layers.Dense(2, activation=lambda x: x, input_shape=(3,))])
    with pytest.raises(ModelFileError, match="custom activation"):
        run(model.save())


def test_labels_must_match_the_output() -> None:
    with pytest.raises(ModelFileError, match="3 labels for an output of 2 classes"):
        run(mlp().save(labels=["a", "b", "c"]))


# ---- malformed files: each rejected with a message naming the problem ----


def rezip(data: bytes, edit_header=None, weights: bytes | None = None, extra=None) -> bytes:
    source = zipfile.ZipFile(io.BytesIO(data))
    header = json.loads(source.read("model.json"))
    if edit_header is not None:
        edit_header(header)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("model.json", json.dumps(header))
        archive.writestr("weights.bin", source.read("weights.bin") if weights is None else weights)
        if extra:
            archive.writestr(extra, b"")
    return buffer.getvalue()


def set_path(path, value):
    def edit(header):
        target = header
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return edit


@pytest.fixture(scope="module")
def good() -> bytes:
    return run(mlp().save(labels=["yes", "no"]))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d[: len(d) // 2], "damaged or truncated"),
        (lambda d: d[:-10], "damaged or truncated"),
        (lambda d: b"GIF89a" + d[6:], "does not start with a zip header"),
        (lambda d: b"", "does not start with a zip header"),
        (lambda d: rezip(d, extra="evil.py"), "exactly model.json and weights.bin"),
        (lambda d: rezip(d, set_path(["format"], "keras")), "format must be"),
        (lambda d: rezip(d, set_path(["version"], 99)), "version 99 is not supported"),
        (
            lambda d: rezip(
                d, set_path(["architecture", "config", "layers", 0, "class_name"], "Lambda")
            ),
            "unknown layer type 'Lambda'",
        ),
        (
            lambda d: rezip(
                d, set_path(["architecture", "config", "layers", 0, "config", "units"], 10**9)
            ),
            "max_params",
        ),
        (lambda d: rezip(d, set_path(["input_shape"], [10**6, 10**6])), "max_input_side"),
        (lambda d: rezip(d, set_path(["input_shape"], [-3])), "positive ints"),
        (
            lambda d: rezip(d, set_path(["weights", 0, "shape"], [3, 400000000])),
            "the architecture expects",
        ),
        (lambda d: rezip(d, weights=bytes(4)), "weights.bin holds 4 bytes"),
        (
            lambda d: rezip(
                d,
                weights=np.full(
                    (len(zipfile.ZipFile(io.BytesIO(d)).read("weights.bin")) // 4,), np.nan, "<f4"
                ).tobytes(),
            ),
            "NaN or Inf",
        ),
        (lambda d: rezip(d, set_path(["labels"], ["only one"])), "1 labels for an output of 2"),
        (lambda d: rezip(d, set_path(["param_count"], 1)), "param_count says 1"),
        (
            lambda d: rezip(
                d, set_path(["architecture", "config", "layers", 0, "config", "activation"], "evil")
            ),
            "unknown 'evil'",
        ),
        (
            lambda d: rezip(
                d, set_path(["architecture", "config", "layers", 0, "config", "surprise"], 1)
            ),
            "unexpected keyword argument 'surprise'",
        ),
    ],
)
def test_malformed_files_are_refused_with_a_reason(good: bytes, mutate, message: str) -> None:
    with pytest.raises(ModelFileError, match=message):
        model_file.read_header(mutate(good))


def test_too_many_layers_is_named() -> None:
    model = pib.Sequential([layers.Dense(2, input_shape=(2,)) for _ in range(3)])
    small = limits.Limits(max_layers=2)
    with pytest.raises(ModelFileError, match="max_layers=2"):
        model_file.read_header(run(model.save()), small)


def test_file_size_cap_is_checked_before_parsing(good: bytes) -> None:
    with pytest.raises(ModelFileError, match="max_model_file_bytes"):
        model_file.read_header(good, limits.Limits(max_model_file_bytes=100))


def test_a_declared_huge_member_is_refused_before_reading(good: bytes) -> None:
    """A zip whose weights.bin claims gigabytes (a zip bomb's shape) is refused from its header."""
    source = zipfile.ZipFile(io.BytesIO(good))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("model.json", source.read("model.json"))
        archive.writestr("weights.bin", bytes(50_000_000))
    with pytest.raises(ModelFileError, match=r"weights\.bin holds 50,000,000 bytes"):
        model_file.read_header(buffer.getvalue())


def test_random_bytes_never_escape_as_another_error(good: bytes) -> None:
    rng = np.random.default_rng(1)
    for _ in range(2000):
        data = bytearray(good)
        for index in rng.integers(0, len(data), size=rng.integers(1, 8)):
            data[index] = int(rng.integers(0, 256))
        with contextlib.suppress(ModelFileError):
            model_file.read_header(bytes(data))


def test_a_head_names_its_backbone_and_every_export_carries_it() -> None:
    from py_in_browser.interop import backbones, tfjs

    backbone = backbones.HAND_LANDMARK_LITE
    head = pib.Sequential([layers.Dense(3, activation="softmax", input_shape=(672,))], name="h")
    head.build()
    prep = backbone.preprocessing(mirror=True).to_dict()
    data = run(head.save(labels=["a", "b", "c"], preprocessing=prep, backbone=backbone.reference()))
    loaded, header = loads(data)
    assert loaded.input_shape == (672,) and header.backbone == backbone.reference()
    assert header.metadata()["backbone"] == backbone.reference()
    assert header.input_shape == (672,) and header.preprocessing == prep  # sized for the backbone
    # TF.js: the head alone, the backbone named in userDefinedMetadata, and read back.
    files = tfjs.from_model_file(data)
    meta = json.loads(files["model.json"])["userDefinedMetadata"]["py_in_browser"]
    assert meta["backbone"] == backbone.reference()
    assert model_file.read_header(tfjs.to_model_file(files)).backbone == backbone.reference()
    # A file without a backbone has no such key (its bytes are as before).
    plain = run(head.save())
    assert "backbone" not in json.loads(zipfile.ZipFile(io.BytesIO(plain)).read("model.json"))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sha256": "ABC"}, "64 lowercase hex"),
        ({"name": ""}, "backbone name"),
        ({"input_shape": [224, 0, 3]}, "backbone input_shape"),
        ({"extra": 1}, "exactly"),
    ],
)
def test_a_malformed_backbone_is_refused(change: dict, message: str) -> None:
    from py_in_browser.interop import backbones

    head = pib.Sequential([layers.Dense(2, input_shape=(672,))])
    head.build()
    with pytest.raises(ModelFileError, match=message):
        run(head.save(backbone={**backbones.HAND_LANDMARK_LITE.reference(), **change}))


def test_preprocessing_of_a_head_must_fit_its_backbone_input() -> None:
    from py_in_browser.interop import backbones

    backbone = backbones.HAND_LANDMARK_LITE
    head = pib.Sequential([layers.Dense(2, input_shape=(672,))])
    head.build()
    wrong = {**backbone.preprocessing(mirror=False).to_dict(), "size": [64, 64]}
    with pytest.raises(ModelFileError, match="does not match the input shape"):
        run(head.save(preprocessing=wrong, backbone=backbone.reference()))
