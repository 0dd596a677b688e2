"""TF.js Layers export/import, ONNX export (checked by onnxruntime) and `py-in-browser convert`."""

from __future__ import annotations

import asyncio
import functools
import http.server
import json
import threading
import zipfile
from io import BytesIO
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest

import py_in_browser as pib
from py_in_browser import layers as L
from py_in_browser.interop import onnx_export, tfjs
from py_in_browser.model import loads
from py_in_browser.model_file import ModelFileError
from py_in_browser.testing import interop_models
from server.cli import main

KINDS = sorted(interop_models.MODELS)


def _run(coroutine):
    return asyncio.run(coroutine)


async def _predict(model: pib.Sequential, x: np.ndarray) -> np.ndarray:
    return await (await model.predict(x)).numpy()


@pytest.fixture(scope="module", params=KINDS)
def saved(request: pytest.FixtureRequest) -> tuple[str, bytes, np.ndarray, np.ndarray]:
    """(kind, model file, inputs, our predictions) for each interop model."""
    model, x = interop_models.build(request.param)
    blob = _run(model.save(labels=None, description=f"the {request.param} model"))
    return request.param, blob, x, _run(_predict(model, x))


# ---- TF.js ----


def test_tfjs_export_is_a_layers_model_with_keras_names(saved) -> None:
    kind, blob, _, _ = saved
    files = tfjs.from_model_file(blob)
    model_json = json.loads(files["model.json"])
    assert model_json["format"] == "layers-model"
    topology = model_json["modelTopology"]
    assert topology["class_name"] == "Sequential" and topology["backend"] == "tensor_flow.js"
    first = topology["config"]["layers"][0]["config"]
    assert first["batch_input_shape"][0] is None
    names = [w["name"] for w in model_json["weightsManifest"][0]["weights"]]
    _, header = loads(blob)
    assert names == [w["name"] for w in header.weights]
    if kind == "gesture_cnn":
        # Keras' BatchNormalization order, which TF.js matches by name
        assert [name.split("/")[1] for name in names[2:6]] == [
            "gamma",
            "beta",
            "moving_mean",
            "moving_variance",
        ]
    if kind == "every_layer":  # our leaky_relu activation is Keras' LeakyReLU layer
        classes = [layer["class_name"] for layer in topology["config"]["layers"]]
        assert "LeakyReLU" in classes
    total = sum(int(np.prod(w["shape"])) for w in model_json["weightsManifest"][0]["weights"])
    assert len(files["group1-shard1of1.bin"]) == 4 * total


def test_tfjs_round_trip_gives_the_same_model_file(saved) -> None:
    _, blob, x, ours = saved
    files = tfjs.from_model_file(blob)
    assert tfjs.to_model_file(files) == blob
    loaded = _run(pib.load_tfjs(files))
    np.testing.assert_array_equal(_run(_predict(loaded, x)), ours)


def test_float16_export_halves_the_bytes_within_the_documented_bound(saved) -> None:
    _, blob, x, ours = saved
    full, half = tfjs.from_model_file(blob), tfjs.from_model_file(blob, quantize="float16")
    assert 2 * len(half["group1-shard1of1.bin"]) == len(full["group1-shard1of1.bin"])
    for spec in json.loads(half["model.json"])["weightsManifest"][0]["weights"]:
        assert spec["dtype"] == "float32"
        assert spec["quantization"] == {"dtype": "float16", "original_dtype": "float32"}
    imported = loads(tfjs.to_model_file(half))[0]
    original = loads(blob)[0]
    for a, b in zip(_run(imported.get_weights()), _run(original.get_weights()), strict=True):
        np.testing.assert_allclose(a, b, rtol=2**-11, atol=2**-24)  # half's rounding
    difference = np.abs(_run(_predict(imported, x)) - ours).max()
    assert 0 < difference <= tfjs.FLOAT16_PREDICTION_BOUND


def test_float16_export_refuses_weights_beyond_its_range() -> None:
    model = pib.Sequential([L.Dense(1, input_shape=(1,), kernel_initializer="ones")])
    model.build()
    model.set_weights([np.array([[1e5]], np.float32), np.zeros(1, np.float32)])
    with pytest.raises(tfjs.FormatError, match="beyond float16's range"):
        _run(model.export_tfjs(quantize="float16"))


def test_tfjs_files_through_a_folder_and_a_zip(tmp_path: Path, saved) -> None:
    _, blob, _, _ = saved
    files = tfjs.from_model_file(blob)
    path = tfjs.write_folder(files, tmp_path / "web_model")
    assert tfjs.read_folder(path.parent) == files
    assert _run(tfjs.read_source(path)) == files
    archive = zipfile.ZipFile(BytesIO(tfjs.zip_files(files)))
    assert sorted(archive.namelist()) == ["group1-shard1of1.bin", "model.json"]
    assert archive.read("group1-shard1of1.bin") == files["group1-shard1of1.bin"]


def test_export_zip_is_one_call() -> None:
    model, _ = interop_models.build("mlp")
    blob = _run(tfjs.export_zip(model, labels=["a", "b", "c"]))
    model_json = json.loads(zipfile.ZipFile(BytesIO(blob)).read("model.json"))
    assert model_json["userDefinedMetadata"]["py_in_browser"]["labels"] == ["a", "b", "c"]


def _tfjs_files(layers: list[dict], weights: list[tuple[str, np.ndarray]], **model_json) -> dict:
    """A model as TF.js's model.save writes it (camel-free Keras configs, objects for initializers)."""
    specs = [{"name": n, "shape": list(a.shape), "dtype": "float32"} for n, a in weights]
    body = {
        "modelTopology": {
            "class_name": "Sequential",
            "config": {"name": "sequential_1", "layers": layers},
        },
        "format": "layers-model",
        "generatedBy": "TensorFlow.js tfjs-layers v4.22.0",
        "convertedBy": None,
        "weightsManifest": [{"paths": ["weights.bin"], "weights": specs}],
        **model_json,
    }
    data = b"".join(a.astype("<f4").tobytes() for _, a in weights)
    return {"model.json": json.dumps(body), "weights.bin": data}


GLOROT = {
    "class_name": "VarianceScaling",
    "config": {"scale": 1, "mode": "fan_avg", "distribution": "normal", "seed": None},
}


def _dense(name: str, units: int, **extra) -> dict:
    config = {
        "units": units,
        "activation": "relu",
        "use_bias": True,
        "kernel_initializer": GLOROT,
        "bias_initializer": {"class_name": "Zeros", "config": {}},
        "kernel_regularizer": None,
        "name": name,
        "trainable": True,
        **extra,
    }
    return {"class_name": "Dense", "config": config}


def test_a_tfjs_style_model_with_an_input_layer_imports() -> None:
    rng = np.random.default_rng(0)
    kernel, bias = rng.normal(size=(3, 2)).astype(np.float32), rng.normal(size=2).astype(np.float32)
    files = _tfjs_files(
        [
            {
                "class_name": "InputLayer",
                "config": {"batch_input_shape": [None, 3], "name": "input1"},
            },
            _dense("dense_Dense1", 2),
        ],
        [("dense_Dense1/kernel", kernel), ("dense_Dense1/bias", bias)],
    )
    model = _run(pib.load_tfjs(files))
    x = rng.normal(size=(4, 3)).astype(np.float32)
    np.testing.assert_allclose(
        _run(_predict(model, x)), np.maximum(x @ kernel + bias, 0), atol=1e-6
    )
    assert model.name == "sequential_1"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda f: f.pop("weights.bin"), "weight shard 'weights.bin' is missing"),
        (lambda f: f.update({"weights.bin": f["weights.bin"][:-4]}), "the shards end"),
        (
            lambda f: f.update({"weights.bin": f["weights.bin"] + b"1234"}),
            "hold 36 bytes; the manifest needs 32",
        ),
        (lambda f: f.pop("model.json"), "no model.json"),
        (lambda f: f.update({"model.json": "{"}), "not valid JSON"),
        (
            lambda f: f.update({"model.json": json.dumps({"format": "graph-model"})}),
            "only a TF.js 'layers-model'",
        ),
    ],
)
def test_malformed_tfjs_files_are_named(change, message: str) -> None:
    files = _tfjs_files(
        [_dense("d", 2, batch_input_shape=[None, 3])],
        [("d/kernel", np.ones((3, 2))), ("d/bias", np.ones(2))],
    )
    change(files)
    with pytest.raises(tfjs.FormatError, match=message):
        _run(pib.load_tfjs(files))


@pytest.mark.parametrize(
    ("layer", "message"),
    [
        (
            {"class_name": "LSTM", "config": {"name": "lstm", "units": 4}},
            "layer 1 \\(LSTM 'lstm'\\): layer type 'LSTM' is not supported",
        ),
        (
            {"class_name": "Activation", "config": {"name": "a", "activation": "elu"}},
            "activation 'elu' is not supported",
        ),
        (
            {"class_name": "Dropout", "config": {"name": "x", "rate": 0.1, "noise_shape": [1, 2]}},
            "noise_shape",
        ),
        (
            {"class_name": "LeakyReLU", "config": {"name": "l", "alpha": 0.3}},
            "alpha 0.3 is not supported",
        ),
    ],
)
def test_unsupported_tfjs_layers_are_named(layer: dict, message: str) -> None:
    files = _tfjs_files(
        [_dense("d", 2, batch_input_shape=[None, 3]), layer],
        [("d/kernel", np.ones((3, 2))), ("d/bias", np.ones(2))],
    )
    with pytest.raises(tfjs.FormatError, match=message):
        tfjs.to_model_file(files)


def test_a_weight_of_the_wrong_shape_is_named() -> None:
    files = _tfjs_files(
        [_dense("d", 2, batch_input_shape=[None, 3])],
        [("d/kernel", np.ones((2, 3))), ("d/bias", np.ones(2))],
    )
    with pytest.raises(
        ModelFileError,
        match=r"weight d/kernel has shape \[2, 3\]; the architecture expects \[3, 2\]",
    ):
        tfjs.to_model_file(files)


def test_conv_and_functional_models_with_unsupported_settings_are_refused() -> None:
    conv = {
        "class_name": "Conv2D",
        "config": {
            "name": "c",
            "filters": 2,
            "kernel_size": 3,
            "dilation_rate": 2,
            "batch_input_shape": [None, 8, 8, 1],
        },
    }
    with pytest.raises(tfjs.FormatError, match="dilation_rate 2"):
        tfjs.to_model_file(_tfjs_files([conv], []))
    files = _tfjs_files([], [])
    body = json.loads(files["model.json"])
    body["modelTopology"]["class_name"] = "Model"
    with pytest.raises(tfjs.FormatError, match="must be a Sequential model, got 'Model'"):
        tfjs.to_model_file({**files, "model.json": json.dumps(body)})


def test_an_activation_tfjs_lacks_is_refused_on_export() -> None:
    model = pib.Sequential([L.Dense(2, activation="leaky_relu", input_shape=(3,))])
    with pytest.raises(tfjs.FormatError, match=r"activation 'leaky_relu' has no TF\.js equivalent"):
        _run(model.export_tfjs())


# ---- ONNX ----


@pytest.mark.parametrize("opset", [onnx_export.OPSET, onnx_export.MIN_OPSET])
def test_onnx_export_runs_in_onnxruntime_like_ours(saved, opset: int) -> None:
    kind, blob, x, ours = saved
    proto = onnx_export.from_model_file(blob, opset=opset)
    onnx.checker.check_model(onnx.load_from_string(proto), full_check=True)
    session = onnxruntime.InferenceSession(proto, providers=["CPUExecutionProvider"])
    theirs = session.run(None, {"input": x})[0]
    assert theirs.shape == ours.shape
    print(f"{kind}: largest difference ours vs onnxruntime {np.abs(theirs - ours).max():.3g}")
    np.testing.assert_allclose(theirs, ours, atol=1e-4, rtol=0)


def test_onnx_keeps_the_engine_layout_at_input_and_output() -> None:
    model, _ = interop_models.build("gesture_cnn")
    labels = ["fist, closed", "open", "point", "none"]
    proto = onnx.load_from_string(onnx_export.from_model_file(_run(model.save(labels=labels))))
    assert {p.key: json.loads(p.value) for p in proto.metadata_props} == {"labels": labels}
    dims = [d.dim_value or d.dim_param for d in proto.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", 16, 16, 3]
    assert proto.opset_import[0].version == onnx_export.OPSET
    ops = [node.op_type for node in proto.graph.node]
    # one transpose into NCHW for the convolutions, one back before Flatten
    assert ops.count("Transpose") == 2 and ops.index("Transpose") < ops.index("Conv")


# ---- the CLI ----


def test_convert_between_every_format(tmp_path: Path, saved, capsys) -> None:
    kind, blob, x, ours = saved
    source = tmp_path / f"{kind}.pib"
    source.write_bytes(blob)
    main(["convert", str(source), str(tmp_path / "web")])
    main(["convert", str(tmp_path / "web"), str(tmp_path / "back.pib")])
    assert (tmp_path / "back.pib").read_bytes() == blob
    main(
        [
            "convert",
            str(tmp_path / "web" / "model.json"),
            str(tmp_path / "model.onnx"),
            "--opset",
            "20",
        ]
    )
    assert onnx.load(str(tmp_path / "model.onnx")).opset_import[0].version == 20
    session = onnxruntime.InferenceSession(
        str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    np.testing.assert_allclose(session.run(None, {"input": x})[0], ours, atol=1e-4, rtol=0)
    main(["convert", str(source), str(tmp_path / "half"), "--quantize", "float16"])
    assert (tmp_path / "half" / "group1-shard1of1.bin").stat().st_size * 2 == len(
        tfjs.from_model_file(blob)["group1-shard1of1.bin"]
    )
    assert "convert: wrote" in capsys.readouterr().out


def _a_model_file(folder: Path) -> Path:
    path = folder / "a.pib"
    path.write_bytes(_run(pib.Sequential([L.Dense(2, input_shape=(3,))]).save()))
    return path


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda tmp: (tmp / "missing.pib", tmp / "out"), "does not exist"),
        (
            lambda tmp: (
                (tmp / "bad.pib").write_bytes(b"nonsense") and tmp / "bad.pib",
                tmp / "o.onnx",
            ),
            "does not start with a zip header",
        ),
        (lambda tmp: (tmp, tmp / "o.onnx"), "model.json does not exist"),
        (
            lambda tmp: (_a_model_file(tmp), tmp / "o.onnx", "--opset", "19"),
            "opset must be between 20 and 28",
        ),
        (
            lambda tmp: (_a_model_file(tmp), tmp / "o.pib", "--opset", "20"),
            "--opset applies to ONNX output only",
        ),
    ],
)
def test_convert_refuses_bad_input_in_one_line(tmp_path: Path, capsys, setup, message: str) -> None:
    source, target, *options = setup(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", str(source), str(target), *options])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("error: ")


def test_load_tfjs_from_a_url_and_a_path(tmp_path: Path) -> None:
    model, x = interop_models.build("mlp")
    files = _run(model.export_tfjs())
    tfjs.write_folder(files, tmp_path)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            url = f"http://127.0.0.1:{server.server_address[1]}/model.json"
            from_url = _run(pib.load_tfjs(url))
            (tmp_path / "group1-shard1of1.bin").unlink()
            with pytest.raises(tfjs.FormatError, match="HTTP Error 404"):
                _run(pib.load_tfjs(url))
        finally:
            server.shutdown()
    np.testing.assert_array_equal(_run(_predict(from_url, x)), _run(_predict(model, x)))
    with pytest.raises(tfjs.FormatError, match=r"weight shard 'group1-shard1of1\.bin' is missing"):
        _run(pib.load_tfjs(tmp_path))


def test_shard_paths_stay_beside_model_json(tmp_path: Path) -> None:
    files = _tfjs_files([_dense("d", 2, batch_input_shape=[None, 3])], [])
    body = json.loads(files["model.json"])
    body["weightsManifest"][0]["paths"] = ["../secret.bin"]
    (tmp_path / "model.json").write_text(json.dumps(body))
    with pytest.raises(tfjs.FormatError, match=r"must be relative to model\.json"):
        tfjs.read_folder(tmp_path)
