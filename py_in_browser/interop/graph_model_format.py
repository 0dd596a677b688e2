"""The TensorFlow.js graph-model format read into plain Python: nodes, attributes, constants.

A TF.js graph model is what tensorflowjs_converter writes from a SavedModel or a frozen graph::

    model.json  {"format": "graph-model", "generatedBy", "convertedBy",
                 "signature": {"inputs": {key: {"name": "x:0", "dtype": "DT_FLOAT",
                                                "tensorShape": {"dim": [{"size": "1"}, ...]}}},
                               "outputs": {...}},
                 "modelTopology": {"node": [{"name", "op", "input": ["a", "b:1", "^ctl"],
                                             "attr": {...}}], "library", "versions"},
                 "weightsManifest": [{"paths": [...], "weights": [{"name", "shape", "dtype",
                                                                   "quantization"?}]}]}
    shards      the Const nodes' values back to back, in manifest order (tfjs.py reads them).

Every Const node's value is the manifest entry of its name (the converter moves them all out of
the graph). Weights stored as float16, or as uint8/uint16 with {"scale", "min"} (value =
q * scale + min), are dequantized to float32 here, once, at load; int32 entries stay int32.
Attributes are protobuf JSON: strings base64, ints as decimal strings, lists under "list".
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import tfjs
from .tfjs import FormatError

GRAPH_MODEL = "graph-model"
# TF DataType enum names -> the engine's dtypes (what a graph input or Cast may name).
DTYPES = {"DT_FLOAT": "float32", "DT_INT32": "int32", "DT_BOOL": "bool"}
# float32 holds every int32 of at most this magnitude exactly (tfjs.py decodes via float32).
_EXACT_INT = 2**24


@dataclass(frozen=True)
class Node:
    """One GraphDef node: its inputs as "name" or "name:k" (control inputs "^x" dropped) and its
    attributes decoded (str, int, float, bool, dtype name, shape list, or lists of those)."""

    name: str
    op: str
    inputs: tuple[str, ...]
    attrs: dict[str, Any]


@dataclass(frozen=True)
class Endpoint:
    """A signature input or output: the tensor's name ("node:k"), shape (-1 unknown), dtype."""

    name: str
    shape: tuple[int, ...] | None
    dtype: str


@dataclass(frozen=True)
class GraphDef:
    """A graph model as read: nodes in file order, the Const values, the signature."""

    nodes: tuple[Node, ...]
    constants: dict[str, np.ndarray]
    inputs: tuple[Endpoint, ...]
    outputs: tuple[Endpoint, ...]


def _decode_scalar(kind: str, value: Any) -> Any:
    if kind == "s":
        return base64.b64decode(value).decode("utf-8", "replace")
    if kind == "i":
        return int(value)
    if kind == "f":
        return float(value)
    if kind == "b":
        return bool(value)
    if kind == "type":
        return DTYPES.get(value, value)
    if kind == "shape":
        return _shape(value)
    return value


def _shape(value: Any) -> tuple[int, ...] | None:
    if not isinstance(value, dict) or value.get("unknownRank"):
        return None
    return tuple(int(d.get("size", -1)) for d in value.get("dim", []))


def decode_attr(value: Any) -> Any:
    """One attribute's value: {"i": "3"} -> 3, {"list": {"i": ["1", "2"]}} -> [1, 2], ...

    Example:
        >>> from py_in_browser.interop.graph_model_format import decode_attr
        >>> decode_attr({"s": "U0FNRQ=="}), decode_attr({"list": {"i": ["1", "2", "2", "1"]}})
        ('SAME', [1, 2, 2, 1])
    """
    if not isinstance(value, dict):
        return value
    if "list" in value:
        items = value["list"] or {}
        for kind in ("i", "f", "s", "b", "type", "shape"):
            if kind in items:
                return [_decode_scalar(kind, v) for v in items[kind]]
        return []
    for kind, item in value.items():
        return _decode_scalar(kind, item)
    return None


def _endpoints(section: Any, where: str) -> tuple[Endpoint, ...]:
    if not isinstance(section, dict):
        raise FormatError(f"model.json signature.{where} must be an object")
    found = []
    for key, spec in section.items():
        if not isinstance(spec, dict):
            raise FormatError(f"signature.{where}[{key!r}] must be an object")
        name = str(spec.get("name", key))
        dtype = DTYPES.get(spec.get("dtype", "DT_FLOAT"), str(spec.get("dtype")))
        found.append(Endpoint(name, _shape(spec.get("tensorShape")), dtype))
    return tuple(found)


def _constants(manifest: Any, files: tfjs.Files) -> dict[str, np.ndarray]:
    def shard(path: str) -> bytes:
        content = files.get(path) if isinstance(path, str) else None
        if not isinstance(content, bytes | bytearray):
            raise FormatError(f"weight shard {path!r} is missing")
        return bytes(content)

    arrays = tfjs._weights(manifest, shard)
    for group in manifest:
        for spec in group["weights"]:
            if spec.get("dtype") == "int32":  # tfjs.py decodes via float32: exact up to 2^24
                values = arrays[spec["name"]]
                if np.abs(values).max(initial=0) >= _EXACT_INT:
                    raise FormatError(f"weight {spec['name']}: an int32 beyond 2^24 is unsupported")
                arrays[spec["name"]] = np.asarray(np.rint(values), np.int32)
    return arrays


def read_graph(files: tfjs.Files) -> GraphDef:
    """A graph model's files ({"model.json": text or bytes, shard path: bytes}) read and checked:
    every Const has its value, every input names a node.

    Example:
        >>> from py_in_browser.interop.graph_model_format import read_graph
        >>> read_graph({"model.json": '{"format": "layers-model"}'})
        Traceback (most recent call last):
        ...
        py_in_browser.interop.tfjs.FormatError: model.json format is 'layers-model'; only a TF.js 'graph-model' can be imported
    """
    if tfjs.MODEL_JSON not in files:
        raise FormatError(f"the files hold no model.json (got {sorted(files)})")
    parsed = tfjs._parse_model_json(files[tfjs.MODEL_JSON], GRAPH_MODEL)
    topology = parsed["modelTopology"]
    raw_nodes = topology.get("node") if isinstance(topology, dict) else None
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise FormatError("modelTopology.node must be a non-empty list of nodes")
    if isinstance(topology, dict) and topology.get("library", {}).get("function"):
        raise FormatError("graphs with functions (control flow: If, While) are not supported")
    constants = _constants(parsed["weightsManifest"], files)
    nodes = []
    for raw in raw_nodes:
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or "op" not in raw:
            raise FormatError(f"node {raw!r} needs a name and an op")
        inputs = tuple(i for i in raw.get("input", []) if not i.startswith("^"))
        attrs = {key: decode_attr(value) for key, value in (raw.get("attr") or {}).items()}
        nodes.append(Node(raw["name"], str(raw["op"]), inputs, attrs))
    names = {node.name for node in nodes}
    for node in nodes:
        if node.op == "Const" and node.name not in constants:
            raise FormatError(f"Const node {node.name!r} has no entry in weightsManifest")
        for ref in node.inputs:
            if ref.split(":")[0] not in names:
                raise FormatError(f"node {node.name!r}: input {ref!r} names no node")
    signature = parsed.get("signature") or {}
    placeholders = [n for n in nodes if n.op == "Placeholder"]
    inputs = _endpoints(signature.get("inputs", {}), "inputs") or tuple(
        Endpoint(f"{n.name}:0", n.attrs.get("shape"), n.attrs.get("dtype", "float32"))
        for n in placeholders
    )
    outputs = _endpoints(signature.get("outputs", {}), "outputs")
    if not outputs:
        raise FormatError("model.json has no signature.outputs: name the outputs to compute")
    return GraphDef(tuple(nodes), constants, inputs, outputs)
