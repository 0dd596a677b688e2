"""Small TF.js graph models written here, byte for byte in the converter's format, for tests and
examples: the importer's behaviour on graphs whose every number is known (quantized shards,
batch rules, refused ops) without the pretrained models set-up fetches; and the seeded images the
parity tests feed the pretrained ones, in CPython and in the browser alike."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np

from ..interop.graph_model import GraphModel
from ..interop.graph_model_convert import convert
from ..interop.graph_model_format import read_graph

Files = dict[str, str | bytes]
Node = tuple[str, str, list[str], dict[str, Any]]  # name, op, inputs, attributes


def _attr(value: Any) -> dict[str, Any]:
    """A Python value as a GraphDef JSON attribute (what tensorflowjs_converter writes)."""
    if isinstance(value, bool):
        return {"b": value}
    if isinstance(value, int):
        return {"i": str(value)}
    if isinstance(value, float):
        return {"f": value}
    if isinstance(value, str) and value.startswith("DT_"):
        return {"type": value}
    if isinstance(value, str):
        return {"s": base64.b64encode(value.encode()).decode()}
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return {"list": {"s": [base64.b64encode(v.encode()).decode() for v in value]}}
    if isinstance(value, list):
        return {"list": {"i": [str(v) for v in value]}}
    raise TypeError(f"no attribute form for {value!r}")


def _dims(shape: tuple[int, ...]) -> dict[str, Any]:
    return {"dim": [{"size": str(s)} for s in shape]}


def _quantized(array: np.ndarray, dtype: str) -> tuple[bytes, dict[str, Any]]:
    """The stored bytes and manifest quantization of one float32 weight, as TF.js writes them."""
    if dtype == "float16":
        return array.astype("<f2").tobytes(), {"dtype": "float16", "original_dtype": "float32"}
    levels = {"uint8": 255, "uint16": 65535}[dtype]
    low, high = float(array.min()), float(array.max())
    scale = (high - low) / levels if high > low else 1.0
    q = np.round((array - low) / scale).astype({"uint8": "u1", "uint16": "<u2"}[dtype])
    spec = {"dtype": dtype, "scale": scale, "min": low, "original_dtype": "float32"}
    return q.tobytes(), spec


def graph_model_files(
    nodes: list[Node],
    weights: dict[str, np.ndarray],
    inputs: dict[str, tuple[tuple[int, ...], str]],
    outputs: dict[str, tuple[int, ...]],
    quantize: str | None = None,
) -> Files:
    """model.json and its one shard: `nodes` as (name, op, inputs, attributes), each weight a
    Const node of that name (float32 ones quantized to `quantize`: float16, uint8 or uint16),
    `inputs` the Placeholders {name: (shape, "DT_FLOAT")}, `outputs` the signature's nodes with
    their shapes."""
    graph: list[dict[str, Any]] = []
    for name, (shape, dtype) in inputs.items():
        graph.append(
            {
                "name": name,
                "op": "Placeholder",
                "attr": {"dtype": {"type": dtype}, "shape": {"shape": _dims(shape)}},
            }
        )
    specs, chunks = [], []
    for name, array in weights.items():
        dtype = "int32" if array.dtype.kind in "iu" else "float32"
        graph.append(
            {
                "name": name,
                "op": "Const",
                "attr": {
                    "dtype": {"type": f"DT_{dtype.upper().replace('FLOAT32', 'FLOAT')}"},
                    "value": {"tensor": {"dtype": "DT_FLOAT", "tensorShape": _dims(array.shape)}},
                },
            }
        )
        spec: dict[str, Any] = {"name": name, "shape": list(array.shape), "dtype": dtype}
        if dtype == "float32" and quantize:
            data, spec["quantization"] = _quantized(array.astype(np.float32), quantize)
        else:
            data = array.astype("<i4" if dtype == "int32" else "<f4").tobytes()
        specs.append(spec)
        chunks.append(data)
    for name, op, node_inputs, attrs in nodes:
        graph.append(
            {
                "name": name,
                "op": op,
                "input": node_inputs,
                "attr": {k: _attr(v) for k, v in attrs.items()},
            }
        )
    signature = {
        "inputs": {
            f"{n}:0": {"name": f"{n}:0", "dtype": d, "tensorShape": _dims(s)}
            for n, (s, d) in inputs.items()
        },
        "outputs": {
            f"{n}:0": {"name": f"{n}:0", "dtype": "DT_FLOAT", "tensorShape": _dims(s)}
            for n, s in outputs.items()
        },
    }
    model = {
        "format": "graph-model",
        "generatedBy": "py_in_browser.testing",
        "convertedBy": "py_in_browser.testing.graph_models",
        "signature": signature,
        "modelTopology": {"node": graph, "library": {}, "versions": {}},
        "weightsManifest": [{"paths": ["group1-shard1of1.bin"], "weights": specs}],
    }
    return {"model.json": json.dumps(model), "group1-shard1of1.bin": b"".join(chunks)}


def tiny_graph_model(quantize: str | None = None) -> Files:
    """x (1, 3) -> h = relu(x @ W + b) (a _FusedMatMul, W 0.25, b (0.25, -1)) -> y = h @ (0.5, 2):
    y is 0.5 for an input of ones, for any batch.

    Example:
        >>> from py_in_browser.testing import graph_models
        >>> sorted(graph_models.tiny_graph_model())
        ['group1-shard1of1.bin', 'model.json']
    """
    weights = {
        "W": np.full((3, 2), 0.25, np.float32),
        "b": np.array([0.25, -1.0], np.float32),
        "W2": np.array([[0.5], [2.0]], np.float32),
    }
    nodes: list[Node] = [
        (
            "h",
            "_FusedMatMul",
            ["x", "W", "b"],
            {
                "fused_ops": ["BiasAdd", "Relu"],
                "num_args": 1,
                "transpose_a": False,
                "transpose_b": False,
            },
        ),
        ("y", "MatMul", ["h", "W2"], {"transpose_a": False, "transpose_b": False}),
    ]
    return graph_model_files(nodes, weights, {"x": ((1, 3), "DT_FLOAT")}, {"y": (1, 1)}, quantize)


def seeded_images(seed: int, batch: int = 1, size: int = 224) -> np.ndarray:
    """(batch, size, size, 3) float32 images in [0, 1]: a coloured blob over noise, seeded, so
    a hand model's landmarks and scores move from one image to the next.

    Example:
        >>> from py_in_browser.testing import graph_models
        >>> graph_models.seeded_images(0, batch=2, size=8).shape
        (2, 8, 8, 3)
    """
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    images = []
    for _ in range(batch):
        cy, cx, r = rng.uniform(0.3, 0.7), rng.uniform(0.3, 0.7), rng.uniform(0.1, 0.3)
        blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))[..., None]
        color = rng.uniform(0.3, 1.0, size=3)
        images.append(np.clip(blob * color + rng.uniform(0, 0.3, (size, size, 3)), 0, 1))
    return np.asarray(images, np.float32)


def small_backbone(seed: int = 0, channels: int = 2) -> GraphModel:
    """A pib.GraphModel (loaded synchronously: its files are here) of x (1, 6, 6, channels) ->
    "feat" = relu6(depthwise 3x3 SAME + bias) -> "pooled" = the spatial mean (its output),
    weights drawn from `seed`: a backbone for layers.Pretrained cases.

    Example:
        >>> from py_in_browser.testing import graph_models
        >>> graph_models.small_backbone().outputs
        [{'name': 'pooled:0', 'shape': [None, 2], 'dtype': 'float32'}]
    """
    rng = np.random.default_rng(seed)
    weights = {
        "w": rng.normal(0, 0.5, (3, 3, channels, 1)).astype(np.float32),
        "b": rng.normal(0, 0.1, (channels,)).astype(np.float32),
        "axes": np.array([1, 2], np.int32),
    }
    conv = {"strides": [1, 1, 1, 1], "padding": "SAME", "dilations": [1, 1, 1, 1]}
    nodes: list[Node] = [
        ("dw", "DepthwiseConv2dNative", ["x", "w"], {**conv, "data_format": "NHWC"}),
        ("biased", "BiasAdd", ["dw", "b"], {"data_format": "NHWC"}),
        ("feat", "Relu6", ["biased"], {}),
        ("pooled", "Mean", ["feat", "axes"], {"keep_dims": False}),
    ]
    inputs: dict[str, tuple[tuple[int, ...], str]] = {"x": ((1, 6, 6, channels), "DT_FLOAT")}
    files = graph_model_files(nodes, weights, inputs, {"pooled": (1, channels)})
    return GraphModel(convert(read_graph(files)), "small_backbone")


def inverted_residual(seed: int = 0, channels: int = 8, size: int = 12) -> GraphModel:
    """A pib.GraphModel of one block of the hand model, written as its graph writes it (unfused
    ops; the bias of the block's last convolution added after the skip connection, bias first):
    x (1, size, size, channels) -> 1x1 conv to 2 * channels + bias -> relu6 -> depthwise 3x3
    SAME + bias -> relu6 -> 1x1 conv back to channels -> + x -> bias + that -> "out" (its
    output). Weights drawn from `seed`, biases included.

    Example:
        >>> from py_in_browser.testing import graph_models
        >>> graph_models.inverted_residual().outputs
        [{'name': 'out:0', 'shape': [None, 12, 12, 8], 'dtype': 'float32'}]
    """
    rng = np.random.default_rng(seed)
    wide = 2 * channels
    weights = {
        "expand": rng.normal(0, 0.5, (1, 1, channels, wide)).astype(np.float32),
        "expand_bias": rng.normal(0, 0.5, (wide,)).astype(np.float32),
        "dw": rng.normal(0, 0.5, (3, 3, wide, 1)).astype(np.float32),
        "dw_bias": rng.normal(0, 0.5, (wide,)).astype(np.float32),
        "project": rng.normal(0, 0.5, (1, 1, wide, channels)).astype(np.float32),
        "project_bias": rng.normal(0, 0.5, (channels,)).astype(np.float32),
    }
    conv = {"strides": [1, 1, 1, 1], "padding": "SAME", "dilations": [1, 1, 1, 1]}
    nodes: list[Node] = [
        ("e", "Conv2D", ["x", "expand"], conv),
        ("eb", "AddV2", ["e", "expand_bias"], {}),
        ("er", "Relu6", ["eb"], {}),
        ("d", "DepthwiseConv2dNative", ["er", "dw"], conv),
        ("db", "AddV2", ["d", "dw_bias"], {}),
        ("dr", "Relu6", ["db"], {}),
        ("p", "Conv2D", ["dr", "project"], conv),
        ("skip", "AddN", ["p", "x"], {}),
        ("out", "AddV2", ["project_bias", "skip"], {}),
    ]
    inputs: dict[str, tuple[tuple[int, ...], str]] = {"x": ((1, size, size, channels), "DT_FLOAT")}
    files = graph_model_files(nodes, weights, inputs, {"out": (1, size, size, channels)})
    return GraphModel(convert(read_graph(files)), "inverted_residual")
