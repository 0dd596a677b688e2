"""Layers <-> Keras-style configs: how each layer type is written in the engine's model file.

The form is Keras' (and TF.js modelTopology's): {"class_name": ..., "config": {...}} per layer.

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

A new layer type needs a LayerSpec here; tests_unit/test_model_file.py fails until it has one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .nn import activations, initializers
from .nn import layers as L

MAX_NAME_CHARS = 100
Shape = tuple[int, ...]


class LayerConfigError(ValueError):
    """A layer that cannot be written, or a config that does not describe a valid layer."""


def _activation_name(fn: Any) -> str:
    name = activations.name_of(fn)
    if name not in activations.ACTIVATIONS:
        raise LayerConfigError(f"custom activation {name!r} cannot be saved; use a named one")
    return name


def _initializer_name(value: Any) -> str:
    if isinstance(value, str):
        return value
    for name, fn in initializers.INITIALIZERS.items():
        if fn is value:
            return name
    raise LayerConfigError(f"custom initializer {value!r} cannot be saved; use a named one")


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
        raise LayerConfigError(f"Conv2D expects (height, width, channels) inputs, got {shape}")
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
        hint = (
            ": save the layers after it, naming the backbone (save(backbone=...))"
            if type(layer) is L.Pretrained
            else ""
        )
        raise LayerConfigError(f"layer type {type(layer).__name__} cannot be saved{hint}")
    config = {"name": layer.name, **COMMON, **spec.fixed, **spec.arguments(layer)}
    return {"class_name": spec.class_name, "config": config}


def layer_from_config(entry: Any, index: int) -> tuple[L.Layer, LayerSpec, dict[str, Any]]:
    """A fresh (unbuilt) layer from its {"class_name", "config"}; its spec and constructor args."""
    where = f"layer {index}"
    if not isinstance(entry, dict) or set(entry) != {"class_name", "config"}:
        raise LayerConfigError(f"{where}: expected an object with class_name and config")
    spec = SPEC_BY_NAME.get(entry["class_name"])
    if spec is None:
        raise LayerConfigError(
            f"{where}: unknown layer type {entry['class_name']!r}; known: {sorted(SPEC_BY_NAME)}"
        )
    config = dict(entry["config"]) if isinstance(entry["config"], dict) else None
    if config is None:
        raise LayerConfigError(f"{where} ({spec.class_name}): config must be an object")
    config.pop("batch_input_shape", None)
    for key, value in {**COMMON, **spec.fixed}.items():
        if config.pop(key, None) != value:
            raise LayerConfigError(f"{where} ({spec.class_name}): {key} must be {value!r}")
    name = config.pop("name", None)
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_CHARS:
        raise LayerConfigError(f"{where} ({spec.class_name}): name must be a short string")
    try:
        layer = spec.cls(name=name, **config)
    except (TypeError, ValueError) as exc:
        raise LayerConfigError(f"{where} ({spec.class_name} {name!r}): {exc}") from exc
    # The constructor normalised the arguments (pairs, floats); the weights derive from those.
    return layer, spec, spec.arguments(layer)
