"""The engine's model file as an ONNX model (CPython only: it needs the onnx package).

The graph takes and gives the engine's layout: input "input" of shape (batch, *input_shape),
NHWC for images, output "output". ONNX's Conv and pooling work on NCHW, so the exporter tracks
the layout of 4-D values and inserts a Transpose only where it changes: to NCHW before the first
Conv, pooling or BatchNormalization, back to NHWC before Flatten (whose row-major order is the
engine's), Dense, softmax over channels and the output. Convolution kernels are transposed once
at export, (kh, kw, in, out) -> (out, in, kh, kw); "same" padding becomes explicit pads with the
odd one after, as the engine (and TensorFlow) pad.

Layers: Dense (MatMul + Add), Conv2D (Conv), MaxPooling2D (MaxPool), AveragePooling2D
(AveragePool, padding cells not counted), GlobalAveragePooling2D (ReduceMean), Flatten,
BatchNormalization (inference form, moving statistics), Activation and fused activations
(Relu, Sigmoid, Tanh, Softmax, LogSoftmax, Gelu, LeakyRelu alpha 0.2), Dropout (the identity at
inference, no node).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .. import model_file
from ..functional import resolve_padding

# The current opset of onnx 1.23 (onnxruntime 1.32 runs it); older runtimes (onnxruntime-web,
# mobile builds) can ask for an older one down to 20, the first with Gelu. No operator used here
# changed meaning between 20 and 28.
OPSET, MIN_OPSET = 28, 20
NHWC_TO_NCHW, NCHW_TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]


class OnnxExportError(model_file.ModelFileError):
    """A model the ONNX exporter cannot express; the message names the layer."""


class _Graph:
    """Nodes and initializers under construction; values named by a counter."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def constant(self, hint: str, array: np.ndarray) -> str:
        name = self.name(hint)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(self, op: str, inputs: list[str], hint: str, **attributes: Any) -> str:
        output = self.name(hint)
        self.nodes.append(helper.make_node(op, inputs, [output], name=output, **attributes))
        return output


class _Value:
    """The current value: its name, shape without batch (in the engine's NHWC order) and the
    layout it is stored in ("nhwc" or "nchw"; only 4-D values can be "nchw")."""

    def __init__(self, name: str, shape: tuple[int, ...]) -> None:
        self.name, self.shape, self.layout = name, shape, "nhwc"

    def to(self, graph: _Graph, layout: str) -> str:
        if self.layout != layout:
            perm = NHWC_TO_NCHW if layout == "nchw" else NCHW_TO_NHWC
            self.name = graph.node("Transpose", [self.name], f"to_{layout}", perm=perm)
            self.layout = layout
        return self.name


def _activation(graph: _Graph, value: _Value, activation: str, where: str) -> None:
    if activation == "linear":
        return
    if activation in ("softmax", "log_softmax"):
        op = "Softmax" if activation == "softmax" else "LogSoftmax"
        axis = 1 if value.layout == "nchw" else -1
        value.name = graph.node(op, [value.name], activation, axis=axis)
        return
    simple: dict[str, tuple[str, dict[str, Any]]] = {
        "relu": ("Relu", {}),
        "sigmoid": ("Sigmoid", {}),
        "tanh": ("Tanh", {}),
        "gelu": ("Gelu", {"approximate": "none"}),
        "leaky_relu": ("LeakyRelu", {"alpha": 0.2}),
    }
    if activation not in simple:
        raise OnnxExportError(f"{where}: activation {activation!r} has no ONNX export")
    op, attributes = simple[activation]
    value.name = graph.node(op, [value.name], activation, **attributes)


def _window(config: dict[str, Any], shape: tuple[int, ...], window: list[int]) -> dict[str, Any]:
    (top, bottom), (left, right) = resolve_padding(
        config["padding"], shape[:2], window, config["strides"]
    )
    return {
        "kernel_shape": window,
        "strides": list(config["strides"]),
        "pads": [top, left, bottom, right],
    }


def _layer(
    graph: _Graph,
    value: _Value,
    entry: dict[str, Any],
    weights: dict[str, np.ndarray],
    out_shape: tuple[int, ...],
) -> None:
    kind, config = entry["class_name"], entry["config"]
    name = config["name"]
    where = f"layer {name!r} ({kind})"
    if kind == "Dense":
        if value.layout == "nchw":
            value.to(graph, "nhwc")
        value.name = graph.node(
            "MatMul",
            [value.name, graph.constant(f"{name}/kernel", weights[f"{name}/kernel"])],
            name,
        )
        if config["use_bias"]:
            value.name = graph.node(
                "Add", [value.name, graph.constant(f"{name}/bias", weights[f"{name}/bias"])], name
            )
        _activation(graph, value, config["activation"], where)
    elif kind == "Conv2D":
        kernel = weights[f"{name}/kernel"].transpose(3, 2, 0, 1)  # (out, in, kh, kw)
        inputs = [value.to(graph, "nchw"), graph.constant(f"{name}/kernel", kernel)]
        if config["use_bias"]:
            inputs.append(graph.constant(f"{name}/bias", weights[f"{name}/bias"]))
        value.name = graph.node(
            "Conv", inputs, name, **_window(config, value.shape, list(config["kernel_size"]))
        )
        _activation(graph, value, config["activation"], where)
    elif kind in ("MaxPooling2D", "AveragePooling2D"):
        op = "MaxPool" if kind == "MaxPooling2D" else "AveragePool"
        attributes = _window(config, value.shape, list(config["pool_size"]))
        value.name = graph.node(op, [value.to(graph, "nchw")], name, **attributes)
    elif kind == "GlobalAveragePooling2D":
        axes = [2, 3] if value.layout == "nchw" else [1, 2]
        value.name = graph.node(
            "ReduceMean",
            [value.name, graph.constant("axes", np.array(axes, np.int64))],
            name,
            keepdims=0,
        )
        value.layout = "nhwc"
    elif kind == "Flatten":
        if len(value.shape) == 3:
            value.to(graph, "nhwc")
        value.name = graph.node("Flatten", [value.name], name, axis=1)
    elif kind == "BatchNormalization":
        if len(value.shape) == 3:
            value.to(graph, "nchw")
        elif len(value.shape) != 1:
            raise OnnxExportError(
                f"{where}: inputs of rank {len(value.shape) + 1} have no ONNX export"
            )
        channels = value.shape[-1]
        scale = weights.get(f"{name}/gamma", np.ones(channels, np.float32))
        bias = weights.get(f"{name}/beta", np.zeros(channels, np.float32))
        inputs = [value.name] + [
            graph.constant(f"{name}/{k}", a)
            for k, a in (
                ("gamma", scale),
                ("beta", bias),
                ("moving_mean", weights[f"{name}/moving_mean"]),
                ("moving_variance", weights[f"{name}/moving_variance"]),
            )
        ]
        value.name = graph.node("BatchNormalization", inputs, name, epsilon=config["epsilon"])
    elif kind == "Activation":
        _activation(graph, value, config["activation"], where)
    elif kind != "Dropout":  # Dropout is the identity at inference
        raise OnnxExportError(f"{where}: no ONNX export for this layer type")
    value.shape = out_shape


def from_model_file(data: bytes, opset: int = OPSET) -> bytes:
    """The serialized ONNX model of a model file, opset `opset` (20 to 28, default 28) and the
    oldest IR version that carries it; onnx.checker accepts it.

    Example:
        >>> import onnx
        >>> from py_in_browser.interop import onnx_export
        >>> model = pib.Sequential([pib.layers.Dense(2, activation="softmax", input_shape=(3,))])
        >>> proto = onnx.load_from_string(onnx_export.from_model_file(await model.save()))
        >>> [node.op_type for node in proto.graph.node]
        ['MatMul', 'Add', 'Softmax']
    """
    if not MIN_OPSET <= opset <= OPSET:
        raise OnnxExportError(f"opset must be between {MIN_OPSET} and {OPSET}, got {opset}")
    contents = model_file.read(data)
    header = contents.header
    weights = {
        entry["name"]: array for entry, array in zip(header.weights, contents.weights, strict=True)
    }
    graph = _Graph()
    value = _Value("input", header.input_shape)
    shape = header.input_shape
    for entry, layer in zip(header.layers, contents.layers, strict=True):
        shape = tuple(int(side) for side in layer.compute_output_shape(shape))
        _layer(graph, value, entry, weights, shape)
    if len(value.shape) == 3:
        value.to(graph, "nhwc")
    graph.nodes.append(helper.make_node("Identity", [value.name], ["output"], name="output"))
    batch: list[Any] = ["batch"]
    proto = helper.make_model(
        helper.make_graph(
            graph.nodes,
            header.name,
            [
                helper.make_tensor_value_info(
                    "input", TensorProto.FLOAT, batch + list(header.input_shape)
                )
            ],
            [
                helper.make_tensor_value_info(
                    "output", TensorProto.FLOAT, batch + list(header.output_shape)
                )
            ],
            graph.initializers,
        ),
        opset_imports=[helper.make_opsetid("", opset)],
        producer_name="py_in_browser",
        producer_version="0.1.0",
        doc_string=header.description,
    )
    proto.ir_version = helper.find_min_ir_version_for(list(proto.opset_import))
    # What the app needs beside the graph, as JSON text in the model's metadata_props.
    # A head trained on a backbone's features names the backbone its input comes from.
    extras = {
        "labels": header.labels,
        "preprocessing": header.preprocessing,
        "backbone": header.backbone,
    }
    helper.set_model_props(proto, {k: json.dumps(v) for k, v in extras.items() if v is not None})
    onnx.checker.check_model(proto, full_check=True)
    return proto.SerializeToString()
