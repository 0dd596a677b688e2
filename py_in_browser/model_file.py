"""The engine's model file: one zip holding a Sequential's architecture, weights and metadata.

Format "py_in_browser.model", version 1. The app publishes it, the server's registry stores it
(after `read_header`), and the TF.js / ONNX exporters read the same description. A zip (members
stored uncompressed) with exactly two members:

model.json  a JSON object:
    format        "py_in_browser.model"
    version       1
    name          the model's name
    description   free text (<= 2000 characters)
    input_shape   one example's shape, without the batch axis, e.g. [64, 64, 3]
    output_shape  the last layer's output shape, without the batch axis
    labels        class names in output order, or null
    preprocessing a JSON object saying how raw inputs become the model's inputs, or null. An
                  object with "schema": "py_in_browser.image_preprocessing" is the image
                  preprocessing pib.data applies (preprocessing.py states the schema, version 1:
                  size [height, width], mirror, crop "centre" | "none", per-channel mean and
                  std over pixel bytes / 255); it is validated, and its size must be the
                  input's height and width. Any other object is stored as given.
    architecture  {"class_name": "Sequential", "config": {"name", "seed", "layers": [...]}}
                  with one {"class_name", "config"} per layer in Keras' config form (the form of
                  TF.js's modelTopology); the first layer's config carries "batch_input_shape"
    param_count   total number of weight elements
    weights       the manifest: [{"name", "shape", "dtype": "float32", "offset", "byte_length"}]
                  in get_weights order (per layer: kernel, bias; BatchNormalization: gamma,
                  beta, moving_mean, moving_variance)
weights.bin the weights, little-endian float32, back to back at the manifest's offsets.

Layer configs (the keys each layer's constructor takes, plus Keras' fixed keys):
    Dense                  units, activation, use_bias, kernel_initializer, bias_initializer
    Conv2D                 filters, kernel_size, strides, padding, activation, use_bias,
                           kernel_initializer, bias_initializer, data_format, dilation_rate
    MaxPooling2D, AveragePooling2D   pool_size, strides, padding, data_format
    GlobalAveragePooling2D data_format
    Flatten                data_format
    Activation             activation
    Dropout                rate, seed
    BatchNormalization     axis, momentum, epsilon, center, scale
    RandomAugmentation     translation, zoom, rotation, brightness, contrast, value_range, seed
                           (active in training only; the file keeps it so training can resume)
Every config also has name, trainable (true) and dtype ("float32").

`read_header` validates all of it, the caps of limits.py included, without creating tensors
(the server uses it on uploads); `read` also returns the layers (unbuilt) and weight arrays that
model.loads assembles into a Sequential. Anything malformed raises ModelFileError naming the
problem.
"""

from __future__ import annotations

import io
import json
import math
import struct
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import preprocessing
from .limits import (
    DEFAULT_LIMITS,
    LimitExceededError,
    Limits,
    ModelSummary,
    validate_input_shape,
    validate_model,
)
from .nn import activations, initializers
from .nn import layers as L

FORMAT = "py_in_browser.model"
VERSION = 1
HEADER_MEMBER, WEIGHTS_MEMBER = "model.json", "weights.bin"
MAX_HEADER_BYTES = 1024 * 1024
MAX_NAME_CHARS, MAX_DESCRIPTION_CHARS = 100, 2000
MAX_LABELS, MAX_LABEL_CHARS = 1000, 100
MAX_PREPROCESSING_BYTES = 16 * 1024
ZIP_MAGIC = b"PK\x03\x04"
# What zipfile raises on damaged archives (found by fuzzing: versions, methods, short reads).
ZIP_ERRORS = (
    zipfile.BadZipFile,
    OSError,
    ValueError,
    EOFError,
    NotImplementedError,
    struct.error,
    zlib.error,
)

Shape = tuple[int, ...]


class ModelFileError(ValueError):
    """A model file that is not well formed or is over a cap; the message names the problem."""


# ---- layers <-> Keras-style configs ----


def _activation_name(fn: Any) -> str:
    name = activations.name_of(fn)
    if name not in activations.ACTIVATIONS:
        raise ModelFileError(f"custom activation {name!r} cannot be saved; use a named one")
    return name


def _initializer_name(value: Any) -> str:
    if isinstance(value, str):
        return value
    for name, fn in initializers.INITIALIZERS.items():
        if fn is value:
            return name
    raise ModelFileError(f"custom initializer {value!r} cannot be saved; use a named one")


def _dense_config(layer: Any) -> dict[str, Any]:
    return {
        "units": layer.units,
        "activation": _activation_name(layer.activation),
        "use_bias": layer.use_bias,
        "kernel_initializer": _initializer_name(layer.kernel_initializer),
        "bias_initializer": _initializer_name(layer.bias_initializer),
    }


def _conv_config(layer: Any) -> dict[str, Any]:
    return {
        "filters": layer.filters,
        "kernel_size": list(layer.kernel_size),
        "strides": list(layer.strides),
        "padding": layer.padding,
        "activation": _activation_name(layer.activation),
        "use_bias": layer.use_bias,
        "kernel_initializer": _initializer_name(layer.kernel_initializer),
        "bias_initializer": _initializer_name(layer.bias_initializer),
    }


def _pool_config(layer: Any) -> dict[str, Any]:
    return {
        "pool_size": list(layer.pool_size),
        "strides": list(layer.strides),
        "padding": layer.padding,
    }


def _kernel_and_bias(kernel: Shape, bias: int, config: dict[str, Any]) -> list[tuple[str, Shape]]:
    return [("kernel", kernel)] + ([("bias", (bias,))] if config["use_bias"] else [])


def _dense_weights(config: dict[str, Any], shape: Shape) -> list[tuple[str, Shape]]:
    return _kernel_and_bias((shape[-1], config["units"]), config["units"], config)


def _conv_weights(config: dict[str, Any], shape: Shape) -> list[tuple[str, Shape]]:
    if len(shape) != 3:
        raise ModelFileError(f"Conv2D expects (height, width, channels) inputs, got {shape}")
    kernel = (*config["kernel_size"], shape[-1], config["filters"])
    return _kernel_and_bias(kernel, config["filters"], config)


def _batch_norm_weights(config: dict[str, Any], shape: Shape) -> list[tuple[str, Shape]]:
    channels = (shape[-1],)
    names = (["gamma"] if config["scale"] else []) + (["beta"] if config["center"] else [])
    return [(name, channels) for name in [*names, "moving_mean", "moving_variance"]]


def _no_weights(config: dict[str, Any], shape: Shape) -> list[tuple[str, Shape]]:
    return []


@dataclass(frozen=True)
class LayerSpec:
    """How one layer class is written: its Keras class name, the constructor's arguments read
    back from a layer, Keras' fixed keys (written, and required to match when read) and the
    weights (name, shape) it creates for an input shape."""

    cls: type[L.Layer]
    class_name: str
    arguments: Callable[[Any], dict[str, Any]]
    fixed: dict[str, Any]
    weights: Callable[[dict[str, Any], Shape], list[tuple[str, Shape]]]


CHANNELS_LAST = {"data_format": "channels_last"}
LAYER_SPECS = [
    LayerSpec(L.Dense, "Dense", _dense_config, {}, _dense_weights),
    LayerSpec(
        L.Conv2D, "Conv2D", _conv_config, {**CHANNELS_LAST, "dilation_rate": [1, 1]}, _conv_weights
    ),
    LayerSpec(L.MaxPool2D, "MaxPooling2D", _pool_config, CHANNELS_LAST, _no_weights),
    LayerSpec(L.AveragePooling2D, "AveragePooling2D", _pool_config, CHANNELS_LAST, _no_weights),
    LayerSpec(
        L.GlobalAveragePooling2D, "GlobalAveragePooling2D", lambda _: {}, CHANNELS_LAST, _no_weights
    ),
    LayerSpec(L.Flatten, "Flatten", lambda _: {}, CHANNELS_LAST, _no_weights),
    LayerSpec(
        L.Activation,
        "Activation",
        lambda layer: {"activation": _activation_name(layer.activation)},
        {},
        _no_weights,
    ),
    LayerSpec(
        L.Dropout,
        "Dropout",
        lambda layer: {"rate": layer.rate, "seed": layer.explicit_seed},
        {},
        _no_weights,
    ),
    LayerSpec(
        L.BatchNormalization,
        "BatchNormalization",
        lambda layer: {
            "momentum": layer.momentum,
            "epsilon": layer.epsilon,
            "center": layer.center,
            "scale": layer.scale,
        },
        {"axis": -1},
        _batch_norm_weights,
    ),
    LayerSpec(
        L.RandomAugmentation,
        "RandomAugmentation",
        lambda layer: {
            "translation": layer.translation,
            "zoom": layer.zoom,
            "rotation": layer.rotation,
            "brightness": layer.brightness,
            "contrast": layer.contrast,
            "value_range": list(layer.value_range),
            "seed": layer.explicit_seed,
        },
        {},
        _no_weights,
    ),
]
SPEC_BY_CLASS = {spec.cls: spec for spec in LAYER_SPECS}
SPEC_BY_NAME = {spec.class_name: spec for spec in LAYER_SPECS}
COMMON = {"trainable": True, "dtype": "float32"}


def layer_config(layer: L.Layer) -> dict[str, Any]:
    """{"class_name", "config"} of one layer, in Keras' form."""
    spec = SPEC_BY_CLASS.get(type(layer))
    if spec is None:
        raise ModelFileError(f"layer type {type(layer).__name__} cannot be saved")
    config = {"name": layer.name, **COMMON, **spec.fixed, **spec.arguments(layer)}
    return {"class_name": spec.class_name, "config": config}


def layer_from_config(entry: Any, index: int) -> tuple[L.Layer, LayerSpec, dict[str, Any]]:
    """A fresh (unbuilt) layer from its {"class_name", "config"}; its spec and constructor args."""
    where = f"layer {index}"
    if not isinstance(entry, dict) or set(entry) != {"class_name", "config"}:
        raise ModelFileError(f"{where}: expected an object with class_name and config")
    spec = SPEC_BY_NAME.get(entry["class_name"])
    if spec is None:
        raise ModelFileError(
            f"{where}: unknown layer type {entry['class_name']!r}; known: {sorted(SPEC_BY_NAME)}"
        )
    config = dict(entry["config"]) if isinstance(entry["config"], dict) else None
    if config is None:
        raise ModelFileError(f"{where} ({spec.class_name}): config must be an object")
    config.pop("batch_input_shape", None)
    for key, value in {**COMMON, **spec.fixed}.items():
        if config.pop(key, None) != value:
            raise ModelFileError(f"{where} ({spec.class_name}): {key} must be {value!r}")
    name = config.pop("name", None)
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_CHARS:
        raise ModelFileError(f"{where} ({spec.class_name}): name must be a short string")
    try:
        layer = spec.cls(name=name, **config)
    except (TypeError, ValueError) as exc:
        raise ModelFileError(f"{where} ({spec.class_name} {name!r}): {exc}") from exc
    # The constructor normalised the arguments (pairs, floats); the weights derive from those.
    return layer, spec, spec.arguments(layer)


# ---- writing ----


async def dumps(
    model: Any,
    *,
    labels: list[str] | None = None,
    preprocessing: dict[str, Any] | None = None,
    description: str = "",
) -> bytes:
    """The model file of a Sequential (built or buildable from its first layer's input_shape)."""
    model._require_built()
    weights = await model.get_weights()
    return write(
        model,
        weights,
        labels=labels,
        preprocessing=preprocessing,
        description=description,
    )


def write(
    model: Any,
    weights: list[np.ndarray],
    *,
    labels: list[str] | None = None,
    preprocessing: dict[str, Any] | None = None,
    description: str = "",
) -> bytes:
    """The file from a built model's layers and host weight arrays (get_weights order)."""
    layer_entries = [layer_config(layer) for layer in model.layers]
    layer_entries[0]["config"]["batch_input_shape"] = [None, *model.input_shape]
    manifest, chunks, offset = [], [], 0
    for var, array in zip(model.weights, weights, strict=True):
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        manifest.append(
            {
                "name": var.name,
                "shape": list(array.shape),
                "dtype": "float32",
                "offset": offset,
                "byte_length": len(data),
            }
        )
        chunks.append(data)
        offset += len(data)
    header = {
        "format": FORMAT,
        "version": VERSION,
        "name": model.name,
        "description": description,
        "input_shape": list(model.input_shape),
        "output_shape": list(model.output_shape),
        "labels": labels,
        "preprocessing": preprocessing,
        "architecture": {
            "class_name": "Sequential",
            "config": {"name": model.name, "seed": model.seed, "layers": layer_entries},
        },
        "param_count": sum(int(np.prod(a.shape, dtype=np.int64)) for a in weights),
        "weights": manifest,
    }
    header_bytes = json.dumps(header, allow_nan=False).encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr(HEADER_MEMBER, header_bytes)
        archive.writestr(WEIGHTS_MEMBER, b"".join(chunks))
    data = buffer.getvalue()
    read_header(data)  # what we write must be what we accept: caps, labels, sizes
    return data


# ---- reading ----


@dataclass(frozen=True)
class ModelHeader:
    """model.json, validated. `metadata()` is what the registry and the app show."""

    name: str
    description: str
    input_shape: Shape
    output_shape: Shape
    labels: list[str] | None
    preprocessing: dict[str, Any] | None
    seed: int
    layers: list[dict[str, Any]]
    param_count: int
    weights: list[dict[str, Any]]

    @property
    def summary(self) -> ModelSummary:
        return ModelSummary(self.input_shape, self.param_count, len(self.layers))

    def metadata(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "name": self.name,
            "description": self.description,
            "input_shape": list(self.input_shape),
            "output_shape": list(self.output_shape),
            "labels": self.labels,
            "preprocessing": self.preprocessing,
            "param_count": self.param_count,
            "layer_count": len(self.layers),
        }


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _open(data: bytes) -> zipfile.ZipFile:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ModelFileError(f"a model file is bytes, got {type(data).__name__}")
    if bytes(data[:4]) != ZIP_MAGIC:
        raise ModelFileError("not a py_in_browser model file: it does not start with a zip header")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except ZIP_ERRORS as exc:
        raise ModelFileError(f"damaged or truncated model file: {exc}") from exc
    names = sorted(info.filename for info in archive.infolist())
    if names != sorted([HEADER_MEMBER, WEIGHTS_MEMBER]):
        raise ModelFileError(f"a model file holds exactly model.json and weights.bin, got {names}")
    for info in archive.infolist():
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise ModelFileError(
                f"{info.filename}: zip compression {info.compress_type} is not supported"
            )
    return archive


def _read_member(archive: zipfile.ZipFile, name: str, max_bytes: int) -> bytes:
    size = archive.getinfo(name).file_size
    if size > max_bytes:
        raise ModelFileError(f"{name} declares {size:,} bytes, over {max_bytes:,}")
    try:
        return archive.read(name)
    except ZIP_ERRORS as exc:
        raise ModelFileError(f"damaged or truncated model file ({name}): {exc}") from exc


def _shape(value: Any, what: str) -> Shape:
    if not isinstance(value, list) or not value or len(value) > 8:
        raise ModelFileError(f"{what} must be a list of 1 to 8 positive ints, got {value!r}")
    if any(type(side) is not int or side < 1 for side in value):
        raise ModelFileError(f"{what} must be a list of positive ints, got {value!r}")
    return tuple(value)


def _text(value: Any, what: str, max_chars: int, allow_empty: bool = True) -> str:
    if not isinstance(value, str) or len(value) > max_chars or (not value and not allow_empty):
        raise ModelFileError(f"{what} must be a string of at most {max_chars} characters")
    return value


def check_labels(labels: Any, output_shape: Shape) -> list[str] | None:
    """Labels name the classes along the last output axis (two for one sigmoid unit)."""
    if labels is None:
        return None
    if not isinstance(labels, list) or not 0 < len(labels) <= MAX_LABELS:
        raise ModelFileError(f"labels must be a list of 1 to {MAX_LABELS} strings")
    for label in labels:
        _text(label, "each label", MAX_LABEL_CHARS, allow_empty=False)
    classes = output_shape[-1]
    if len(labels) != classes and not (classes == 1 and len(labels) == 2):
        raise ModelFileError(f"{len(labels)} labels for an output of {classes} classes")
    return list(labels)


def _check_preprocessing(value: Any, input_shape: Shape) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ModelFileError("preprocessing must be a JSON object or null")
    if len(json.dumps(value)) > MAX_PREPROCESSING_BYTES:
        raise ModelFileError(f"preprocessing is over {MAX_PREPROCESSING_BYTES} bytes of JSON")
    if value.get("schema") != preprocessing.SCHEMA:
        return value
    try:
        checked = preprocessing.check(value)
    except ValueError as exc:
        raise ModelFileError(f"preprocessing: {exc}") from exc
    if len(input_shape) != 3 or list(input_shape[:2]) != checked["size"]:
        raise ModelFileError(
            f"preprocessing: size {checked['size']} does not match the input shape "
            f"{list(input_shape)} (height, width, channels)"
        )
    return checked


def _architecture(header: dict[str, Any], limits: Limits) -> tuple[str, int, list[Any]]:
    arch = header.get("architecture")
    if not isinstance(arch, dict) or arch.get("class_name") != "Sequential":
        raise ModelFileError("architecture must be {'class_name': 'Sequential', 'config': ...}")
    config = arch.get("config")
    if not isinstance(config, dict) or not isinstance(config.get("layers"), list):
        raise ModelFileError("architecture.config must hold a list of layers")
    entries = config["layers"]
    if not entries:
        raise ModelFileError("the architecture has no layers")
    if len(entries) > limits.max_layers:
        raise ModelFileError(
            str(
                LimitExceededError("max_layers", len(entries), limits.max_layers, "the layer count")
            )
        )
    seed = config.get("seed")
    if type(seed) is not int:
        raise ModelFileError(f"architecture.config.seed must be an int, got {seed!r}")
    return _text(config.get("name"), "architecture name", MAX_NAME_CHARS, False), seed, entries


def _expected_weights(
    entries: list[Any], input_shape: Shape, limits: Limits
) -> tuple[list[L.Layer], list[tuple[str, Shape]], Shape]:
    """Layers (unbuilt), the weights (name, shape) they will create, and the output shape."""
    built, expected, shape = [], [], input_shape
    for index, entry in enumerate(entries):
        layer, spec, arguments = layer_from_config(entry, index)
        for name, weight_shape in spec.weights(arguments, shape):
            expected.append((f"{layer.name}/{name}", weight_shape))
        if sum(math.prod(s) for _, s in expected) > limits.max_params:
            raise ModelFileError(
                f"the architecture needs more than max_params={limits.max_params:,}"
            )
        try:
            shape = tuple(int(side) for side in layer.compute_output_shape(shape))
        except (ValueError, IndexError, ZeroDivisionError) as exc:
            raise ModelFileError(f"layer {index} ({layer.name!r}): {exc}") from exc
        if not shape or min(shape) < 1:
            raise ModelFileError(f"layer {index} ({layer.name!r}) leaves an empty output {shape}")
        built.append(layer)
    return built, expected, shape


def _check_manifest(
    manifest: Any, expected: list[tuple[str, Shape]], weights_size: int
) -> list[dict[str, Any]]:
    if not isinstance(manifest, list) or len(manifest) != len(expected):
        raise ModelFileError(
            f"the weights manifest must list {len(expected)} arrays for this architecture"
        )
    offset = 0
    for entry, (name, shape) in zip(manifest, expected, strict=True):
        if not isinstance(entry, dict) or set(entry) != {
            "name",
            "shape",
            "dtype",
            "offset",
            "byte_length",
        }:
            raise ModelFileError(
                f"weight {name}: manifest entry needs name, shape, dtype, offset, byte_length"
            )
        if entry["name"] != name or _shape(entry["shape"], f"weight {name} shape") != shape:
            raise ModelFileError(
                f"weight {entry['name']!r} {entry['shape']}: the architecture expects {name} {list(shape)}"
            )
        if entry["dtype"] != "float32":
            raise ModelFileError(f"weight {name}: dtype must be float32, got {entry['dtype']!r}")
        if entry["offset"] != offset or entry["byte_length"] != 4 * math.prod(shape):
            raise ModelFileError(f"weight {name}: offset/byte_length do not match its shape")
        offset += entry["byte_length"]
    if offset != weights_size:
        raise ModelFileError(
            f"weights.bin holds {weights_size:,} bytes; the manifest needs {offset:,}"
        )
    return manifest


@dataclass(frozen=True)
class ModelFileContents:
    header: ModelHeader
    layers: list[L.Layer]
    weights: list[np.ndarray]


def read(data: bytes, limits: Limits = DEFAULT_LIMITS) -> ModelFileContents:
    """Validates the whole file and returns its header, unbuilt layers and weight arrays."""
    if len(data) > limits.max_model_file_bytes:
        raise ModelFileError(
            str(
                LimitExceededError(
                    "max_model_file_bytes", len(data), limits.max_model_file_bytes, "the file size"
                )
            )
        )
    with _open(data) as archive:
        raw = _read_member(archive, HEADER_MEMBER, MAX_HEADER_BYTES)
        try:
            header = json.loads(raw, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:
            raise ModelFileError(f"model.json is not valid JSON: {exc}") from exc
        if not isinstance(header, dict):
            raise ModelFileError("model.json must hold an object")
        if header.get("format") != FORMAT:
            raise ModelFileError(
                f"model.json format must be {FORMAT!r}, got {header.get('format')!r}"
            )
        if header.get("version") != VERSION:
            raise ModelFileError(
                f"model file version {header.get('version')!r} is not supported (this engine reads {VERSION})"
            )
        input_shape = _shape(header.get("input_shape"), "input_shape")
        try:
            validate_input_shape(input_shape, limits)
        except LimitExceededError as exc:
            raise ModelFileError(str(exc)) from exc
        _, seed, entries = _architecture(header, limits)
        layers, expected, output_shape = _expected_weights(entries, input_shape, limits)
        param_count = sum(math.prod(shape) for _, shape in expected)
        try:
            validate_model(ModelSummary(input_shape, param_count, len(layers)), limits)
        except LimitExceededError as exc:
            raise ModelFileError(str(exc)) from exc
        if header.get("param_count") != param_count:
            raise ModelFileError(
                f"param_count says {header.get('param_count')!r}; the weights hold {param_count}"
            )
        if header.get("output_shape") != list(output_shape):
            raise ModelFileError(
                f"output_shape says {header.get('output_shape')!r}; the layers give {list(output_shape)}"
            )
        weights_size = archive.getinfo(WEIGHTS_MEMBER).file_size
        manifest = _check_manifest(header.get("weights"), expected, weights_size)
        blob = _read_member(archive, WEIGHTS_MEMBER, 4 * param_count)
    arrays = []
    for entry, (name, shape) in zip(manifest, expected, strict=True):
        array = np.frombuffer(blob, "<f4", math.prod(shape), entry["offset"]).reshape(shape)
        if not np.isfinite(array).all():
            raise ModelFileError(f"weight {name} holds NaN or Inf values")
        arrays.append(array.astype(np.float32))
    model_header = ModelHeader(
        name=_text(header.get("name"), "name", MAX_NAME_CHARS, allow_empty=False),
        description=_text(header.get("description"), "description", MAX_DESCRIPTION_CHARS),
        input_shape=input_shape,
        output_shape=output_shape,
        labels=check_labels(header.get("labels"), output_shape),
        preprocessing=_check_preprocessing(header.get("preprocessing"), input_shape),
        seed=seed,
        layers=entries,
        param_count=param_count,
        weights=manifest,
    )
    return ModelFileContents(model_header, layers, arrays)


def read_header(data: bytes, limits: Limits = DEFAULT_LIMITS) -> ModelHeader:
    """Validates structure, caps and weight values (finite) without creating any tensor."""
    return read(data, limits).header
