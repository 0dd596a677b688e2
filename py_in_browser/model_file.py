"""The engine's model file: one zip holding a Sequential's architecture, weights and metadata.

Format "py_in_browser.model", version 1. The app publishes it, the server's registry stores it
(after `read_header`), and the TF.js / ONNX exporters read the same description. A zip (members
stored uncompressed, dated 1980-01-01 so one model always gives the same bytes) with exactly two
members:

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
                  input's height and width (the backbone's input's, when there is one).
                  Any other object is stored as given.
    backbone      (only in a head trained on a pretrained backbone's features) the backbone the
                  model's input comes from: {"name", "version", "sha256", "output" (the node
                  whose value is the input), "input_shape" (the backbone's)}; the file holds the
                  head alone, interop/backbones.py finds the backbone again by these
    architecture  {"class_name": "Sequential", "config": {"name", "seed", "layers": [...]}}
                  with one {"class_name", "config"} per layer in Keras' config form (the form of
                  TF.js's modelTopology); the first layer's config carries "batch_input_shape"
    param_count   total number of weight elements
    weights       the manifest: [{"name", "shape", "dtype": "float32", "offset", "byte_length"}]
                  in get_weights order (per layer: kernel, bias; BatchNormalization: gamma,
                  beta, moving_mean, moving_variance)
weights.bin the weights, little-endian float32, back to back at the manifest's offsets.

Layer configs: see layer_configs.py.

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
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import preprocessing
from .layer_configs import (
    MAX_NAME_CHARS,
    LayerConfigError,
    layer_config,
    layer_from_config,
)
from .limits import (
    DEFAULT_LIMITS,
    LimitExceededError,
    Limits,
    ModelSummary,
    validate_input_shape,
    validate_model,
)
from .nn import layers as L

FORMAT = "py_in_browser.model"
VERSION = 1
HEADER_MEMBER, WEIGHTS_MEMBER = "model.json", "weights.bin"
MAX_HEADER_BYTES = 1024 * 1024
MAX_DESCRIPTION_CHARS = 2000
MAX_LABELS, MAX_LABEL_CHARS = 1000, 100
MAX_PREPROCESSING_BYTES = 16 * 1024
ZIP_MAGIC = b"PK\x03\x04"
# Every member carries this date, so one model always gives the same bytes (and registry ETag).
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
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


# ---- writing ----


async def dumps(
    model: Any,
    *,
    labels: list[str] | None = None,
    preprocessing: dict[str, Any] | None = None,
    description: str = "",
    backbone: dict[str, Any] | None = None,
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
        backbone=backbone,
    )


def write(
    model: Any,
    weights: list[np.ndarray],
    *,
    labels: list[str] | None = None,
    preprocessing: dict[str, Any] | None = None,
    description: str = "",
    backbone: dict[str, Any] | None = None,
) -> bytes:
    """The file from a built model's layers and host weight arrays (get_weights order)."""
    try:
        layer_entries = [layer_config(layer) for layer in model.layers]
    except LayerConfigError as exc:
        raise ModelFileError(str(exc)) from exc
    return encode(
        name=model.name,
        seed=model.seed,
        input_shape=tuple(model.input_shape),
        layer_entries=layer_entries,
        weights={var.name: array for var, array in zip(model.weights, weights, strict=True)},
        labels=labels,
        preprocessing=preprocessing,
        description=description,
        backbone=backbone,
    )


def encode(
    *,
    name: str,
    seed: int,
    input_shape: Shape,
    layer_entries: list[dict[str, Any]],
    weights: dict[str, np.ndarray],
    labels: list[str] | None = None,
    preprocessing: dict[str, Any] | None = None,
    description: str = "",
    backbone: dict[str, Any] | None = None,
) -> bytes:
    """The file from its parts: layer configs in Keras' form and the weights by name (the
    converters build files this way, without creating a model). The architecture decides which
    weights it needs and their order; a missing, extra or misshapen weight is a ModelFileError.
    The archive is deterministic (fixed member dates): the same model gives the same bytes."""
    entries = [{"class_name": e["class_name"], "config": dict(e["config"])} for e in layer_entries]
    entries[0]["config"]["batch_input_shape"] = [None, *input_shape]
    _, expected, output_shape = _expected_weights(entries, tuple(input_shape), DEFAULT_LIMITS)
    unexpected = sorted(set(weights) - {weight_name for weight_name, _ in expected})
    if unexpected:
        raise ModelFileError(f"weights {unexpected} belong to no layer of the architecture")
    manifest, chunks, offset = [], [], 0
    for weight_name, shape in expected:
        if weight_name not in weights:
            raise ModelFileError(f"weight {weight_name} {list(shape)} is missing")
        array = np.asarray(weights[weight_name])
        if array.shape != shape:
            raise ModelFileError(
                f"weight {weight_name} has shape {list(array.shape)}; the architecture expects {list(shape)}"
            )
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        manifest.append(
            {
                "name": weight_name,
                "shape": list(shape),
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
        "name": name,
        "description": description,
        "input_shape": list(input_shape),
        "output_shape": list(output_shape),
        "labels": labels,
        "preprocessing": preprocessing,
        "architecture": {
            "class_name": "Sequential",
            "config": {"name": name, "seed": seed, "layers": entries},
        },
        "param_count": sum(math.prod(shape) for _, shape in expected),
        "weights": manifest,
    }
    if backbone is not None:  # absent otherwise: files without one keep their bytes
        header["backbone"] = backbone
    header_bytes = json.dumps(header, allow_nan=False).encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for member, content in ((HEADER_MEMBER, header_bytes), (WEIGHTS_MEMBER, b"".join(chunks))):
            archive.writestr(zipfile.ZipInfo(member, date_time=ZIP_DATE), content)
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
    backbone: dict[str, Any] | None = None

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
            **({"backbone": self.backbone} if self.backbone is not None else {}),
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
    if "\x00" in value:
        # No text format stores it (PostgreSQL refuses it in text columns).
        raise ModelFileError(f"{what} must not contain NUL characters")
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


BACKBONE_KEYS = ("name", "version", "sha256", "output", "input_shape")
MAX_BACKBONE_TEXT = 200


def check_backbone(value: Any) -> dict[str, Any] | None:
    """The header's "backbone" object (see the module docstring), or None."""
    if value is None:
        return None
    if not isinstance(value, dict) or sorted(value) != sorted(BACKBONE_KEYS):
        raise ModelFileError(f"backbone must be an object with exactly {list(BACKBONE_KEYS)}")
    for key in ("name", "version", "output"):
        _text(value[key], f"backbone {key}", MAX_BACKBONE_TEXT, allow_empty=False)
    sha256 = value["sha256"]
    if not isinstance(sha256, str) or len(sha256) != 64 or set(sha256) - set("0123456789abcdef"):
        raise ModelFileError("backbone sha256 must be 64 lowercase hex digits")
    shape = _shape(value["input_shape"], "backbone input_shape")
    return {**value, "input_shape": list(shape)}


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
        try:
            layer, spec, arguments = layer_from_config(entry, index)
            weights = spec.weights(arguments, shape)
        except LayerConfigError as exc:
            raise ModelFileError(str(exc)) from exc
        for name, weight_shape in weights:
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
    backbone = check_backbone(header.get("backbone"))
    model_header = ModelHeader(
        name=_text(header.get("name"), "name", MAX_NAME_CHARS, allow_empty=False),
        description=_text(header.get("description"), "description", MAX_DESCRIPTION_CHARS),
        input_shape=input_shape,
        output_shape=output_shape,
        labels=check_labels(header.get("labels"), output_shape),
        preprocessing=_check_preprocessing(
            header.get("preprocessing"),
            tuple(backbone["input_shape"]) if backbone is not None else input_shape,
        ),
        seed=seed,
        layers=entries,
        param_count=param_count,
        weights=manifest,
        backbone=backbone,
    )
    return ModelFileContents(model_header, layers, arrays)


def read_header(data: bytes, limits: Limits = DEFAULT_LIMITS) -> ModelHeader:
    """Validates structure, caps and weight values (finite) without creating any tensor."""
    return read(data, limits).header
