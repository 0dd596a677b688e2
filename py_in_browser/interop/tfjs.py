"""The TensorFlow.js Layers format, to and from the engine's model file (bytes in, bytes out).

A TF.js Layers model is two or more files, as tf.loadLayersModel reads them::

    model.json  {"format": "layers-model", "generatedBy", "convertedBy",
                 "modelTopology": {"class_name": "Sequential", "config": {"name", "layers": [...]},
                                   "keras_version", "backend"},
                 "weightsManifest": [{"paths": [shard file names], "weights": [{"name", "shape",
                                      "dtype", "quantization"?}]}],
                 "userDefinedMetadata": {"py_in_browser": {"seed", "labels", "preprocessing",
                                                           "description", "backbone"?}}}
    shards      the weights back to back, in manifest order, little-endian.

The layers are Keras' config form, which the engine's model file already uses (model_file.py), so
an export copies them: Dense, Conv2D, MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D,
Flatten, Dropout, BatchNormalization and Activation (Activation("leaky_relu") becomes Keras'
LeakyReLU layer with alpha 0.2). Weights are named "<layer>/<weight>" as Keras names them.
`quantize="float16"` stores each weight as IEEE half (numpy's round-to-nearest-even, as the TF.js
converter's --quantize_float16): the manifest keeps dtype "float32" and adds
"quantization": {"dtype": "float16", "original_dtype": "float32"}, which TF.js 4.22 decodes back
to float32 on load (tfjs-core io_utils decodeWeight). Half the bytes; each weight moves by at most
2^-11 of its magnitude (relative error <= 4.9e-4), so predictions move by that order: on the
test models (py_in_browser/testing/interop_models.py, softmax outputs) at most 2e-4 against the
float32 model, in the engine and in TF.js alike; the tests hold it to FLOAT16_PREDICTION_BOUND.

An import reads what TF.js's model.save and the TF.js converter write: a leading InputLayer,
initializers as strings or {"class_name", "config"}, float32 weights or uint8/uint16/float16
quantized ones, several shards and groups. Initializers only decide a fresh model's weights, so
unknown ones fall back to Keras' defaults (glorot_uniform kernels, zeros biases). What would
change the numbers is refused with a FormatError naming the layer and the setting: an
unsupported layer class or activation, channels_first, dilation, causal padding, a noise shape, a
functional (non-Sequential) model, a missing shard, a weight of the wrong shape or size.
"""

from __future__ import annotations

import io
import json
import math
import posixpath
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import numpy as np

from .. import layer_configs, model_file

MODEL_JSON = "model.json"
SHARD_NAME = "group1-shard1of1.bin"
GENERATED_BY = "py_in_browser 0.1.0"
CONVERTED_BY = "py_in_browser.interop.tfjs"
METADATA_KEY = "py_in_browser"
# TF.js names activations in camelCase and stores them in snake_case: these exist on both sides.
TFJS_ACTIVATIONS = ("linear", "relu", "sigmoid", "tanh", "softmax", "log_softmax", "gelu")
LEAKY_RELU_ALPHA = 0.2  # our leaky_relu's slope; Keras' LeakyReLU layer default is 0.3
QUANTIZATIONS = ("float16",)
# How far float16 weights may move the test models' predictions (measured: 2e-4).
FLOAT16_PREDICTION_BOUND = 2e-3
# How an import reads each stored dtype (a manifest's dtype, or its quantization's when set).
STORED_DTYPES = {"float32": "<f4", "int32": "<i4", "float16": "<f2", "uint16": "<u2", "uint8": "u1"}

Files = Mapping[str, str | bytes]


class FormatError(model_file.ModelFileError):
    """A TF.js model that cannot be read or written here; the message names the layer, file or
    setting at fault.

    Example:
        >>> from py_in_browser.interop import tfjs
        >>> tfjs.to_model_file({"model.json": '{"format": "graph-model"}'})
        Traceback (most recent call last):
        ...
        py_in_browser.interop.tfjs.FormatError: model.json format is 'graph-model'; only a TF.js 'layers-model' can be imported (pib.load_graph_model reads graph models)
    """


# ---- export ----


def _export_layer(entry: dict[str, Any]) -> dict[str, Any]:
    config = entry["config"]
    activation = config.get("activation")
    if entry["class_name"] == "Activation" and activation == "leaky_relu":
        fixed = {
            k: config[k] for k in ("name", "trainable", "dtype", "batch_input_shape") if k in config
        }
        return {"class_name": "LeakyReLU", "config": {**fixed, "alpha": LEAKY_RELU_ALPHA}}
    if activation is not None and activation not in TFJS_ACTIVATIONS:
        raise FormatError(
            f"layer {config['name']!r} ({entry['class_name']}): activation {activation!r} has no "
            f"TF.js equivalent inside a layer; use a separate Activation layer"
        )
    return {"class_name": entry["class_name"], "config": dict(config)}


def from_model_file(data: bytes, *, quantize: str | None = None) -> dict[str, str | bytes]:
    """The TF.js Layers files ({"model.json": text, "group1-shard1of1.bin": bytes}) of a model
    file; quantize="float16" stores the weights as half floats.

    Example:
        >>> from py_in_browser.interop import tfjs
        >>> model = pib.Sequential([pib.layers.Dense(2, input_shape=(3,))])
        >>> files = tfjs.from_model_file(await model.save())
        >>> sorted(files), len(files["group1-shard1of1.bin"])
        (['group1-shard1of1.bin', 'model.json'], 32)
    """
    if quantize not in (None, *QUANTIZATIONS):
        raise FormatError(f"quantize must be None or one of {QUANTIZATIONS}, got {quantize!r}")
    contents = model_file.read(data)
    header = contents.header
    dtype = "<f2" if quantize == "float16" else "<f4"
    if quantize and any(
        np.abs(a).max(initial=0) > np.finfo(np.float16).max for a in contents.weights
    ):
        raise FormatError("a weight is beyond float16's range (65504); export without quantize")
    weights, chunks = [], []
    for entry, array in zip(header.weights, contents.weights, strict=True):
        spec: dict[str, Any] = {"name": entry["name"], "shape": entry["shape"], "dtype": "float32"}
        if quantize:
            spec["quantization"] = {"dtype": quantize, "original_dtype": "float32"}
        weights.append(spec)
        chunks.append(np.ascontiguousarray(array, dtype=dtype).tobytes())
    topology = {
        "class_name": "Sequential",
        "config": {"name": header.name, "layers": [_export_layer(e) for e in header.layers]},
        "keras_version": "tfjs-layers 4.22.0",
        "backend": "tensor_flow.js",
    }
    model_json = {
        "format": "layers-model",
        "generatedBy": GENERATED_BY,
        "convertedBy": CONVERTED_BY,
        "modelTopology": topology,
        "weightsManifest": [{"paths": [SHARD_NAME], "weights": weights}],
        "userDefinedMetadata": {
            METADATA_KEY: {
                "seed": header.seed,
                "labels": header.labels,
                "preprocessing": header.preprocessing,
                "description": header.description,
                # A head trained on a backbone's features: the backbone its input comes from.
                **({"backbone": header.backbone} if header.backbone is not None else {}),
            }
        },
    }
    return {MODEL_JSON: json.dumps(model_json, allow_nan=False), SHARD_NAME: b"".join(chunks)}


# ---- import: layers ----


def _pair(value: Any, what: str) -> list[int]:
    if isinstance(value, int):
        return [value, value]
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return list(value)
    raise FormatError(f"{what} must be an int or a pair of ints, got {value!r}")


def _activation(config: dict[str, Any], where: str) -> str:
    name = config.get("activation") or "linear"
    if isinstance(name, dict):  # Keras 3 may store {"class_name": ..., "config": ...}
        name = name.get("config", {}).get("name", name.get("class_name"))
    if name not in TFJS_ACTIVATIONS:
        raise FormatError(
            f"{where}: activation {name!r} is not supported; known: {TFJS_ACTIVATIONS}"
        )
    return str(name)


# Keras' serialized initializers -> the engine's names (only a fresh model's weights use them).
_INITIALIZERS = {
    "Zeros": "zeros",
    "Ones": "ones",
    "GlorotUniform": "glorot_uniform",
    "HeNormal": "he_normal",
}


def _initializer(value: Any, default: str) -> str:
    if isinstance(value, str):
        snake = {"glorotUniform": "glorot_uniform", "heNormal": "he_normal"}.get(value, value)
        return snake if snake in _INITIALIZERS.values() else default
    if isinstance(value, dict):
        name = value.get("class_name")
        config = value.get("config") or {}
        if name == "VarianceScaling":  # how TF.js serializes GlorotUniform and HeNormal
            form = (config.get("scale"), config.get("mode"), config.get("distribution"))
            forms: dict[tuple[Any, ...], str] = {
                (1, "fan_avg", "uniform"): "GlorotUniform",
                (2, "fan_in", "normal"): "HeNormal",
                (2, "fan_in", "truncated_normal"): "HeNormal",
            }
            name = forms.get(form)
        return _INITIALIZERS.get(str(name), default)
    return default


def _channels_last(config: dict[str, Any], where: str) -> None:
    if config.get("data_format", "channels_last") not in ("channels_last", None):
        raise FormatError(
            f"{where}: data_format {config['data_format']!r} is not supported (channels_last only)"
        )


def _padding(config: dict[str, Any], where: str) -> str:
    padding = config.get("padding", "valid")
    if padding not in ("valid", "same"):
        raise FormatError(f"{where}: padding {padding!r} is not supported ('valid' or 'same')")
    return str(padding)


def _dense(config: dict[str, Any], where: str, shape: tuple[int, ...]) -> dict[str, Any]:
    return {
        "units": config["units"],
        "activation": _activation(config, where),
        "use_bias": bool(config.get("use_bias", True)),
        "kernel_initializer": _initializer(config.get("kernel_initializer"), "glorot_uniform"),
        "bias_initializer": _initializer(config.get("bias_initializer"), "zeros"),
    }


def _conv(config: dict[str, Any], where: str, shape: tuple[int, ...]) -> dict[str, Any]:
    _channels_last(config, where)
    if _pair(config.get("dilation_rate", 1), f"{where}: dilation_rate") != [1, 1]:
        raise FormatError(f"{where}: dilation_rate {config['dilation_rate']!r} is not supported")
    if config.get("groups", 1) != 1:
        raise FormatError(f"{where}: groups {config['groups']!r} is not supported")
    return {
        "filters": config["filters"],
        "kernel_size": _pair(config["kernel_size"], f"{where}: kernel_size"),
        "strides": _pair(config.get("strides", 1), f"{where}: strides"),
        "padding": _padding(config, where),
        "activation": _activation(config, where),
        "use_bias": bool(config.get("use_bias", True)),
        "kernel_initializer": _initializer(config.get("kernel_initializer"), "glorot_uniform"),
        "bias_initializer": _initializer(config.get("bias_initializer"), "zeros"),
        "data_format": "channels_last",
        "dilation_rate": [1, 1],
    }


def _pool(config: dict[str, Any], where: str, shape: tuple[int, ...]) -> dict[str, Any]:
    _channels_last(config, where)
    pool_size = _pair(config.get("pool_size", 2), f"{where}: pool_size")
    strides = config.get("strides")
    return {
        "pool_size": pool_size,
        "strides": pool_size if strides is None else _pair(strides, f"{where}: strides"),
        "padding": _padding(config, where),
        "data_format": "channels_last",
    }


def _global_pool(config: dict[str, Any], where: str, shape: tuple[int, ...]) -> dict[str, Any]:
    _channels_last(config, where)
    if config.get("keepdims"):
        raise FormatError(f"{where}: keepdims=true is not supported")
    return {"data_format": "channels_last"}


def _flatten(config: dict[str, Any], where: str, shape: tuple[int, ...]) -> dict[str, Any]:
    _channels_last(config, where)
    return {"data_format": "channels_last"}


def _dropout(config: dict[str, Any], where: str, shape: tuple[int, ...]) -> dict[str, Any]:
    if config.get("noise_shape") is not None:
        raise FormatError(f"{where}: noise_shape {config['noise_shape']!r} is not supported")
    seed = config.get("seed")
    return {"rate": config["rate"], "seed": seed if isinstance(seed, int) else None}


def _batch_norm(config: dict[str, Any], where: str, shape: tuple[int, ...]) -> dict[str, Any]:
    axis = config.get("axis", -1)
    axis = axis[0] if isinstance(axis, list) and len(axis) == 1 else axis
    if axis not in (-1, len(shape)):  # the last axis, counted with the batch axis or from the end
        raise FormatError(f"{where}: axis {config['axis']!r} is not supported (the last axis only)")
    return {
        "axis": -1,
        "momentum": float(config.get("momentum", 0.99)),
        "epsilon": float(config.get("epsilon", 1e-3)),
        "center": bool(config.get("center", True)),
        "scale": bool(config.get("scale", True)),
    }


def _activation_layer(config: dict[str, Any], where: str, shape: tuple[int, ...]) -> dict[str, Any]:
    return {"activation": _activation(config, where)}


def _leaky_relu(config: dict[str, Any], where: str, shape: tuple[int, ...]) -> dict[str, Any]:
    alpha = config.get("alpha", config.get("negative_slope", 0.3))
    if not math.isclose(alpha, LEAKY_RELU_ALPHA, rel_tol=1e-6):
        raise FormatError(f"{where}: alpha {alpha!r} is not supported (only {LEAKY_RELU_ALPHA})")
    return {"activation": "leaky_relu"}


Translator = Callable[[dict[str, Any], str, tuple[int, ...]], dict[str, Any]]
# TF.js / Keras class name -> (our class name, its arguments from the Keras config).
IMPORTERS: dict[str, tuple[str, Translator]] = {
    "Dense": ("Dense", _dense),
    "Conv2D": ("Conv2D", _conv),
    "MaxPooling2D": ("MaxPooling2D", _pool),
    "MaxPool2D": ("MaxPooling2D", _pool),
    "AveragePooling2D": ("AveragePooling2D", _pool),
    "AvgPool2D": ("AveragePooling2D", _pool),
    "GlobalAveragePooling2D": ("GlobalAveragePooling2D", _global_pool),
    "Flatten": ("Flatten", _flatten),
    "Dropout": ("Dropout", _dropout),
    "BatchNormalization": ("BatchNormalization", _batch_norm),
    "Activation": ("Activation", _activation_layer),
    "LeakyReLU": ("Activation", _leaky_relu),
}


def _input_shape(config: dict[str, Any], where: str) -> tuple[int, ...]:
    shape = config.get("batch_input_shape", config.get("batch_shape"))
    if not isinstance(shape, list) or len(shape) < 2:
        raise FormatError(f"{where}: the first layer needs batch_input_shape, got {shape!r}")
    if any(not isinstance(side, int) or side < 1 for side in shape[1:]):
        raise FormatError(f"{where}: batch_input_shape {shape!r} must be [null, positive ints]")
    return tuple(shape[1:])


def _layers(topology: Any) -> tuple[str, tuple[int, ...], list[dict[str, Any]]]:
    """The model name, input shape and the layers in the engine's config form."""
    if isinstance(topology, dict) and "model_config" in topology:  # the Keras converter's form
        topology = topology["model_config"]
    if not isinstance(topology, dict) or topology.get("class_name") != "Sequential":
        found = topology.get("class_name") if isinstance(topology, dict) else topology
        raise FormatError(f"modelTopology must be a Sequential model, got {found!r}")
    config = topology.get("config")
    entries = config.get("layers") if isinstance(config, dict) else config
    if not isinstance(entries, list) or not entries:
        raise FormatError("modelTopology.config holds no layers")
    name = config.get("name") if isinstance(config, dict) else None
    input_shape: tuple[int, ...] | None = None
    layers: list[dict[str, Any]] = []
    shape: tuple[int, ...] = ()
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("config"), dict):
            raise FormatError(f"layer {index}: expected {{'class_name', 'config'}}, got {entry!r}")
        class_name, config = entry.get("class_name"), entry["config"]
        where = f"layer {index} ({class_name} {config.get('name')!r})"
        if class_name == "InputLayer" and index == 0:
            input_shape = _input_shape(config, where)
            shape = input_shape
            continue
        if input_shape is None:
            input_shape = _input_shape(config, where)
            shape = input_shape
        if class_name not in IMPORTERS:
            raise FormatError(
                f"{where}: layer type {class_name!r} is not supported; supported: {sorted(IMPORTERS)}"
            )
        ours, translate = IMPORTERS[class_name]
        try:
            arguments = translate(config, where, shape)
        except KeyError as exc:
            raise FormatError(f"{where}: config lacks {exc.args[0]!r}") from exc
        layer_name = config.get("name") or f"{ours.lower()}_{index}"
        config = {"name": layer_name, **layer_configs.COMMON, **arguments}
        try:
            built, _, _ = layer_configs.layer_from_config(
                {"class_name": ours, "config": config}, index
            )
        except layer_configs.LayerConfigError as exc:
            raise FormatError(f"{where}: {exc}") from exc
        try:
            shape = tuple(int(side) for side in built.compute_output_shape(shape))
        except (ValueError, IndexError, ZeroDivisionError) as exc:
            raise FormatError(f"{where}: {exc}") from exc
        layers.append(layer_configs.layer_config(built))  # the canonical form, as save writes it
    if not layers or input_shape is None:
        raise FormatError("modelTopology holds no layer besides its InputLayer")
    return str(name or "model"), input_shape, layers


# ---- import: weights ----


def _decode(spec: dict[str, Any], blob: bytes, offset: int) -> tuple[np.ndarray, int]:
    """One manifest entry's array (as float32) from the concatenated shards; the next offset."""
    name = spec.get("name")
    shape = spec.get("shape")
    if (
        not isinstance(name, str)
        or not isinstance(shape, list)
        or not all(isinstance(s, int) and s >= 0 for s in shape)
    ):
        raise FormatError(f"weights manifest entry {spec!r} needs a name and a shape")
    quantization = spec.get("quantization")
    stored = quantization.get("dtype") if isinstance(quantization, dict) else spec.get("dtype")
    if spec.get("dtype") not in ("float32", "int32") or stored not in STORED_DTYPES:
        raise FormatError(
            f"weight {name}: dtype {spec.get('dtype')!r} / {stored!r} is not supported"
        )
    count = math.prod(shape)
    size = count * np.dtype(STORED_DTYPES[stored]).itemsize
    if offset + size > len(blob):
        raise FormatError(
            f"weight {name} {shape}: the shards end after {len(blob) - offset} of its {size} bytes"
        )
    values = np.frombuffer(blob, STORED_DTYPES[stored], count, offset).astype(np.float64)
    if stored in ("uint8", "uint16") and isinstance(quantization, dict):  # value * scale + min
        try:
            values = values * float(quantization["scale"]) + float(quantization["min"])
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"weight {name}: {stored} quantization needs scale and min") from exc
    return values.astype(np.float32).reshape(shape), offset + size


def _weights(manifest: Any, shards: Callable[[str], bytes]) -> dict[str, np.ndarray]:
    if not isinstance(manifest, list):
        raise FormatError("weightsManifest must be a list of groups")
    arrays: dict[str, np.ndarray] = {}
    for group in manifest:
        if (
            not isinstance(group, dict)
            or not isinstance(group.get("paths"), list)
            or not isinstance(group.get("weights"), list)
        ):
            raise FormatError("each weightsManifest group needs paths and weights lists")
        blob = b"".join(shards(path) for path in group["paths"])
        offset = 0
        for spec in group["weights"]:
            if not isinstance(spec, dict):
                raise FormatError(f"weights manifest entry {spec!r} is not an object")
            array, offset = _decode(spec, blob, offset)
            arrays[spec["name"]] = array
        if offset != len(blob):
            raise FormatError(
                f"shards {group['paths']} hold {len(blob)} bytes; the manifest needs {offset}"
            )
    return arrays


def _parse_model_json(text: str | bytes, kind: str = "layers-model") -> dict[str, Any]:
    """model.json's object, checked to be a TF.js model of format `kind` ("layers-model" for
    load_tfjs, "graph-model" for load_graph_model) with a topology and a weights manifest."""
    if len(text) > model_file.MAX_HEADER_BYTES:
        raise FormatError(f"model.json is over {model_file.MAX_HEADER_BYTES:,} bytes")
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise FormatError(f"model.json is not valid JSON: {exc}") from exc
    if not isinstance(parsed, dict):
        raise FormatError("model.json must hold an object")
    if parsed.get("format", "layers-model") != kind:
        raise FormatError(
            f"model.json format is {parsed['format']!r}; only a TF.js {kind!r} can be imported"
            + (" (pib.load_graph_model reads graph models)" if kind == "layers-model" else "")
        )
    if "modelTopology" not in parsed or "weightsManifest" not in parsed:
        raise FormatError("model.json needs modelTopology and weightsManifest")
    return parsed


def to_model_file(files: Files) -> bytes:
    """The engine's model file of a TF.js Layers model: `files` maps "model.json" (text or
    bytes) and every shard path its manifest names to their contents.

    Example:
        >>> from py_in_browser.interop import tfjs
        >>> model = pib.Sequential([pib.layers.Dense(2, input_shape=(3,))])
        >>> blob = await model.save()
        >>> tfjs.to_model_file(tfjs.from_model_file(blob)) == blob
        True
    """
    if MODEL_JSON not in files:
        raise FormatError(f"the files hold no model.json (got {sorted(files)})")
    parsed = _parse_model_json(files[MODEL_JSON])
    name, input_shape, layers = _layers(parsed["modelTopology"])

    def shard(path: str) -> bytes:
        content = files.get(path) if isinstance(path, str) else None
        if not isinstance(content, bytes | bytearray):
            raise FormatError(f"weight shard {path!r} is missing")
        return bytes(content)

    weights = _weights(parsed["weightsManifest"], shard)
    extra = parsed.get("userDefinedMetadata", {}) or {}
    ours = extra.get(METADATA_KEY, {}) if isinstance(extra, dict) else {}
    ours = ours if isinstance(ours, dict) else {}
    seed = ours.get("seed", 0)
    return model_file.encode(
        name=name[: layer_configs.MAX_NAME_CHARS],
        seed=seed if type(seed) is int else 0,
        input_shape=input_shape,
        layer_entries=layers,
        weights=weights,
        labels=ours.get("labels"),
        preprocessing=ours.get("preprocessing"),
        description=ours.get("description") or "",
        backbone=ours.get("backbone"),
    )


# ---- files, folders, zips and URLs ----


def zip_files(files: Files) -> bytes:
    """The files in one zip (members stored, fixed dates): what "Export for TensorFlow.js"
    downloads. Unzipped into a folder, tf.loadLayersModel("<folder>/model.json") reads it.

    Example:
        >>> from py_in_browser.interop import tfjs
        >>> model = pib.Sequential([pib.layers.Dense(2, input_shape=(3,))])
        >>> blob = tfjs.zip_files(await model.export_tfjs())
        >>> import zipfile, io
        >>> sorted(zipfile.ZipFile(io.BytesIO(blob)).namelist())
        ['group1-shard1of1.bin', 'model.json']
    """
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name in sorted(files):
            content = files[name]
            data = content.encode() if isinstance(content, str) else content
            archive.writestr(zipfile.ZipInfo(name, date_time=model_file.ZIP_DATE), data)
    return buffer.getvalue()


async def export_zip(model: Any, *, quantize: str | None = None, **save_options: Any) -> bytes:
    """The app's "Export for TensorFlow.js" button in one call: the zip of
    ``await model.export_tfjs(...)``; `save_options` are Sequential.save's (labels, ...).

    Example:
        >>> from py_in_browser.interop import tfjs
        >>> model = pib.Sequential([pib.layers.Dense(2, input_shape=(3,))])
        >>> (await tfjs.export_zip(model, labels=["a", "b"]))[:2]
        b'PK'
    """
    return zip_files(from_model_file(await model.save(**save_options), quantize=quantize))


def write_folder(files: Files, folder: str | Path) -> Path:
    """Writes the files into `folder` (created if needed); returns the model.json path.

    Example:
        >>> import tempfile
        >>> from py_in_browser.interop import tfjs
        >>> model = pib.Sequential([pib.layers.Dense(2, input_shape=(3,))])
        >>> tfjs.write_folder(await model.export_tfjs(), tempfile.mkdtemp()).name
        'model.json'
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        if posixpath.basename(name) != name or name in ("", ".", ".."):
            raise FormatError(f"file name {name!r} is not a plain name")
        target = folder / name
        if isinstance(content, str):
            target.write_text(content)
        else:
            target.write_bytes(content)
    return folder / MODEL_JSON


def _shard_paths(model_json: str | bytes, kind: str) -> list[str]:
    manifest = _parse_model_json(model_json, kind)["weightsManifest"]
    if not isinstance(manifest, list):
        raise FormatError("weightsManifest must be a list of groups")
    paths = [p for group in manifest if isinstance(group, dict) for p in group.get("paths", [])]
    for path in paths:
        # Shards sit beside model.json: no absolute paths, other hosts or parent folders.
        if (
            not isinstance(path, str)
            or path.startswith("/")
            or ":" in path
            or ".." in path.split("/")
        ):
            raise FormatError(f"weight shard path {path!r} must be relative to model.json")
    return paths


def read_folder(path: str | Path, kind: str = "layers-model") -> dict[str, str | bytes]:
    """The files of a TF.js model from a folder holding model.json, or model.json's path (a
    file of another name is read as model.json); `kind` is its format, as `_parse_model_json`.

    Example:
        >>> import tempfile
        >>> from py_in_browser.interop import tfjs
        >>> model = pib.Sequential([pib.layers.Dense(2, input_shape=(3,))])
        >>> files = await model.export_tfjs()
        >>> tfjs.read_folder(tfjs.write_folder(files, tempfile.mkdtemp())) == files
        True
    """
    path = Path(path)
    model_json = path / MODEL_JSON if path.is_dir() else path
    if not model_json.is_file():
        raise FormatError(f"{model_json} does not exist")
    files: dict[str, str | bytes] = {MODEL_JSON: model_json.read_text()}
    for shard in _shard_paths(files[MODEL_JSON], kind):
        shard_path = model_json.parent / shard
        if not shard_path.is_file():
            raise FormatError(f"weight shard {shard!r} is missing (looked for {shard_path})")
        files[shard] = shard_path.read_bytes()
    return files


async def _fetch_bytes(url: str) -> bytes:
    from .._js import in_browser

    if in_browser():
        from pyodide.http import pyfetch

        response = await pyfetch(url)
        if not response.ok:
            raise FormatError(f"GET {url}: HTTP {response.status}")
        return bytes(await response.bytes())
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return bytes(response.read())
    except urllib.error.URLError as exc:
        raise FormatError(f"GET {url}: {exc}") from exc


async def read_source(
    source: Files | str | Path, kind: str = "layers-model"
) -> dict[str, str | bytes]:
    """The files of a TF.js model from a files dict, a URL of its model.json (fetched with
    pyfetch in the browser, urllib in CPython; shards resolve next to it) or, in CPython, a local
    folder or model.json path; `kind` is its format, as `_parse_model_json`.

    Example:
        >>> from py_in_browser.interop import tfjs
        >>> model = pib.Sequential([pib.layers.Dense(2, input_shape=(3,))])
        >>> files = await model.export_tfjs()
        >>> await tfjs.read_source(files) == files
        True
    """
    from .._js import in_browser

    if isinstance(source, Mapping):
        return dict(source)
    text = str(source)
    if not (in_browser() or text.startswith(("http://", "https://"))):
        return read_folder(source, kind)
    files: dict[str, str | bytes] = {MODEL_JSON: await _fetch_bytes(text)}
    for shard in _shard_paths(files[MODEL_JSON], kind):
        files[shard] = await _fetch_bytes(urljoin(text, shard))
    return files
