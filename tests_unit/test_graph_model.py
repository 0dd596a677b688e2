"""The graph-model importer on small graphs whose numbers are known: quantized shards, folded
constants, batch rules, node outputs by name, refusals at load, layers.Pretrained."""

from __future__ import annotations

import asyncio
import gc
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import py_in_browser as pib
from py_in_browser.interop.graph_model_convert import SOURCES
from py_in_browser.interop.graph_model_ops import OPS, bilinear_matrix
from py_in_browser.interop.tfjs import FormatError
from py_in_browser.testing.graph_models import Node, graph_model_files, tiny_graph_model


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def _load(files: Any) -> pib.GraphModel:
    return run(pib.load_graph_model(files))


@pytest.mark.parametrize("quantize", [None, "float16", "uint8", "uint16"])
def test_quantized_weights_are_dequantized_at_load(quantize: str | None) -> None:
    gm = _load(tiny_graph_model(quantize))
    # Every weight of the tiny model is exact in each stored form (two values per tensor at most).
    assert gm.host_weights["W:0"].dtype == np.float32
    np.testing.assert_array_equal(gm.host_weights["b:0"], [0.25, -1.0])
    y = run(gm(np.ones((1, 3))))
    np.testing.assert_array_equal(run(y.numpy()), [[0.5]])


def test_uint8_scale_and_min_are_applied() -> None:
    weights = {"w": np.linspace(-1.0, 3.0, 256, dtype=np.float32).reshape(1, 256)}
    nodes: list[Node] = [("y", "Mul", ["x", "w"], {})]
    files = graph_model_files(
        nodes, weights, {"x": ((1, 256), "DT_FLOAT")}, {"y": (1, 256)}, "uint8"
    )
    manifest = json.loads(files["model.json"])["weightsManifest"][0]["weights"][0]
    assert (
        manifest["quantization"]["dtype"] == "uint8" and len(files["group1-shard1of1.bin"]) == 256
    )
    gm = _load(files)
    np.testing.assert_allclose(gm.host_weights["w:0"], weights["w"], atol=1e-6)


def test_outputs_by_name_and_any_batch() -> None:
    gm = _load(tiny_graph_model())
    assert gm.inputs == [{"name": "x:0", "shape": [None, 3], "dtype": "float32"}]
    assert gm.outputs == [{"name": "y:0", "shape": [None, 1], "dtype": "float32"}]
    x = np.array([[1.0, 1.0, 1.0], [4.0, 0.0, 0.0], [-1.0, -1.0, -1.0]], np.float32)
    h, y = run(gm(x, output=["h", "y:0"]))
    expected_h = np.maximum(x @ np.full((3, 2), 0.25) + [0.25, -1.0], 0)
    np.testing.assert_allclose(run(h.numpy()), expected_h)
    np.testing.assert_allclose(run(y.numpy()), expected_h @ [[0.5], [2.0]])
    assert run(gm(x, output="h")).shape == (3, 2)
    with pytest.raises(KeyError, match="no node value 'nope'"):
        run(gm(x, output="nope"))
    with pytest.raises(ValueError, match=r"expects shape \[1, 3\] \(any batch\), got \[2, 4\]"):
        run(gm(np.ones((2, 4))))


def test_weights_upload_once_and_stay_out_of_tidy_scopes() -> None:
    gm = _load(tiny_graph_model())
    first = gm.weights()
    run(gm(np.ones((1, 3))))
    assert gm.weights() is first and not any(t.is_disposed for t in first.values())
    assert all(isinstance(t, pib.Variable) and not t.trainable for t in first.values())
    gm.release()
    assert all(t.is_disposed for t in first.values()) and gm.weights() is not first


def test_unsupported_ops_are_refused_at_load_by_name() -> None:
    nodes: list[Node] = [
        ("a", "Cumsum", ["x", "axis"], {}),
        ("b", "NonMaxSuppressionV5", ["a"], {}),
        ("c", "Cumsum", ["b", "axis"], {}),
        ("y", "Relu", ["c"], {}),
    ]
    weights = {"axis": np.array(1, np.int32)}
    files = graph_model_files(nodes, weights, {"x": ((1, 3), "DT_FLOAT")}, {"y": (1, 3)})
    with pytest.raises(FormatError, match=r"Cumsum \(2 nodes\), NonMaxSuppressionV5 \(1 nodes\)"):
        _load(files)


def test_settings_without_a_kernel_are_refused_at_load() -> None:
    nodes: list[Node] = [
        (
            "y",
            "Conv2D",
            ["x", "w"],
            {
                "strides": [1, 1, 1, 1],
                "padding": "SAME",
                "dilations": [1, 2, 2, 1],
                "data_format": "NHWC",
            },
        )
    ]
    weights = {"w": np.ones((3, 3, 1, 1), np.float32)}
    files = graph_model_files(
        nodes, weights, {"x": ((1, 5, 5, 1), "DT_FLOAT")}, {"y": (1, 5, 5, 1)}
    )
    with pytest.raises(FormatError, match=r"node 'y' \(Conv2D\): dilations \[1, 2, 2, 1\]"):
        _load(files)
    with pytest.raises(FormatError, match=r"only a TF\.js 'graph-model'"):
        _load(
            {
                "model.json": json.dumps(
                    {"format": "layers-model", "modelTopology": {}, "weightsManifest": []}
                )
            }
        )


def test_constants_fold_and_a_batch_reshape_keeps_the_batch() -> None:
    # y = reshape(x * cast(k), shape) with k and shape constants: Cast folds on the host; the
    # Reshape's [1, -1] is the converter's batch of 1, so any batch runs.
    nodes: list[Node] = [
        ("kf", "Cast", ["k"], {"DstT": "DT_FLOAT", "SrcT": "DT_INT32"}),
        ("m", "Mul", ["x", "kf"], {}),
        ("y", "Reshape", ["m", "shape"], {}),
    ]
    weights = {"k": np.array([2, 3], np.int32), "shape": np.array([1, -1], np.int32)}
    files = graph_model_files(nodes, weights, {"x": ((1, 2, 2), "DT_FLOAT")}, {"y": (1, 4)})
    gm = _load(files)
    assert [s.op for s in gm.program.steps] == ["Mul", "Reshape"]  # the Cast was folded
    x = np.arange(12, dtype=np.float32).reshape(3, 2, 2)
    np.testing.assert_array_equal(run(run(gm(x)).numpy()), (x * [2, 3]).reshape(3, 4))


def test_an_op_across_the_batch_fixes_it_at_one() -> None:
    nodes: list[Node] = [("u", "Unpack", ["x"], {"axis": 0, "num": 1}), ("y", "Relu", ["u"], {})]
    files = graph_model_files(nodes, {}, {"x": ((1, 3), "DT_FLOAT")}, {"y": (3,)})
    gm = _load(files)
    assert gm.inputs[0]["shape"] == [1, 3]
    np.testing.assert_array_equal(run(run(gm([[-1.0, 0.0, 2.0]])).numpy()), [0.0, 0.0, 2.0])
    with pytest.raises(ValueError, match=r"runs batch 1 only .*Unpack 'u' splits the batch axis"):
        run(gm(np.ones((2, 3))))


def test_gather_nd_argmax_floor_div_and_pack() -> None:
    # movenet's decoding: the argmax of a heat map, its row and column by FloorDiv, gathered.
    nodes: list[Node] = [
        ("flat", "Reshape", ["x", "s"], {}),
        ("am", "ArgMax", ["flat", "d"], {"output_type": "DT_INT32"}),
        ("row", "FloorDiv", ["am", "w"], {}),
        ("rw", "Mul", ["row", "w"], {}),
        ("col", "Sub", ["am", "rw"], {}),
        ("idx", "Pack", ["zero", "row", "col"], {"axis": 1, "N": 3}),
        ("y", "GatherNd", ["x", "idx"], {}),
    ]
    weights = {
        "s": np.array([1, -1], np.int32),
        "d": np.array(1, np.int32),
        "w": np.array([5], np.int32),
        "zero": np.array([0], np.int32),
    }
    files = graph_model_files(nodes, weights, {"x": ((1, 4, 5), "DT_FLOAT")}, {"y": (1,)})
    gm = _load(files)
    x = np.random.default_rng(3).normal(size=(1, 4, 5)).astype(np.float32)
    row, col = np.unravel_index(np.argmax(x[0]), (4, 5))
    np.testing.assert_array_equal(run(run(gm(x)).numpy()), [x[0, row, col]])
    np.testing.assert_array_equal(run(run(gm(x, output="col")).numpy()), [col])


def test_floor_div_rounds_toward_negative_infinity() -> None:
    nodes: list[Node] = [("y", "FloorDiv", ["x", "d"], {})]
    files = graph_model_files(
        nodes, {"d": np.array([3, -3, 3, -3], np.int32)}, {"x": ((4,), "DT_INT32")}, {"y": (4,)}
    )
    gm = _load(files)
    x = np.array([7, 7, -7, -7], np.int32)
    np.testing.assert_array_equal(run(run(gm(x)).numpy()), np.floor_divide(x, [3, -3, 3, -3]))


def test_bilinear_weights_match_tensorflow_half_pixel_rule() -> None:
    # Upsampling 2 -> 4 with half-pixel centers: sources -0.25, 0.25, 0.75, 1.25, clamped.
    np.testing.assert_allclose(
        bilinear_matrix(2, 4, False, True),
        [[1.0, 0.0], [0.75, 0.25], [0.25, 0.75], [0.0, 1.0]],
    )
    np.testing.assert_allclose(bilinear_matrix(3, 2, True, False), [[1, 0, 0], [0, 0, 1]])


def test_pretrained_layer_is_frozen_in_a_sequential() -> None:
    gm = _load(tiny_graph_model())
    backbone = pib.layers.Pretrained(gm, output="h")
    model = pib.Sequential([backbone, pib.layers.Dense(2, activation="softmax")])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.build((3,))
    assert backbone.output_shape == (2,)
    assert model.trainable_weights == model.layers[1].trainable_weights
    before = {k: v.copy() for k, v in gm.host_weights.items()}
    x = np.random.default_rng(0).normal(size=(16, 3)).astype(np.float32)
    y = (x.sum(axis=1) > 0).astype(np.int32)
    run(model.fit(x, y, epochs=2, batch_size=8, verbose=0))
    for ref, t in gm.weights().items():
        np.testing.assert_array_equal(run(t.numpy()), before[ref])
    features = run(run(gm(x, output="h")).numpy())
    dense = model.layers[1]
    kernel, bias = (run(w.numpy()) for w in dense.weights)
    logits = features @ kernel + bias
    expected = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(run(run(model.predict(x)).numpy()), expected, rtol=1e-5, atol=1e-6)


def test_a_trainable_pretrained_layer_trains_its_own_copies() -> None:
    gm = _load(tiny_graph_model())
    backbone = pib.layers.Pretrained(gm, output="y", trainable=True)
    model = pib.Sequential([backbone])
    model.compile(optimizer=pib.optimizers.SGD(0.1), loss="mse")
    model.build((3,))
    assert len(model.trainable_weights) == 3
    run(model.fit(np.ones((4, 3)), np.zeros((4, 1)), epochs=1, batch_size=4, verbose=0))
    assert not np.array_equal(run(model.trainable_weights[0].numpy()), gm.host_weights["W:0"])
    np.testing.assert_array_equal(run(gm.weights()["W:0"].numpy()), np.full((3, 2), 0.25))


def test_the_documented_op_table_is_the_converters() -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "interop.rst").read_text()
    table = page[page.index("Supported ops") : page.index("Not supported (refused at load)")]
    rows = re.findall(r"^   \* - (.+(?:\n       .+)*)", table, re.MULTILINE)[1:]  # after the header
    documented = {op.strip() for row in rows for op in row.replace("\n", " ").split(",")}
    assert documented == {*OPS, *SOURCES}


def test_calls_leave_no_tensor_behind() -> None:
    gm = _load(tiny_graph_model())
    run(gm(np.ones((2, 3)))).dispose()
    gc.collect()  # earlier tests' models
    held = pib.memory()["num_tensors"]  # now with this model's weights, uploaded once
    for _ in range(20):
        for out in run(gm(np.ones((2, 3)), output=["h", "y"])):
            out.dispose()
    gc.collect()
    assert pib.memory()["num_tensors"] == held


def test_a_trainable_depthwise_backbone_fine_tunes() -> None:
    # x -> depthwise 3x3 (SAME) -> relu6 -> global mean: the gradient reaches the filters.
    nodes: list[Node] = [
        (
            "d",
            "DepthwiseConv2dNative",
            ["x", "w"],
            {
                "strides": [1, 1, 1, 1],
                "padding": "SAME",
                "dilations": [1, 1, 1, 1],
                "data_format": "NHWC",
            },
        ),
        ("r", "Relu6", ["d"], {}),
        ("y", "Mean", ["r", "axes"], {"keep_dims": False}),
    ]
    weights = {"w": np.full((3, 3, 2, 1), 0.1, np.float32), "axes": np.array([1, 2], np.int32)}
    gm = _load(graph_model_files(nodes, weights, {"x": ((1, 5, 5, 2), "DT_FLOAT")}, {"y": (1, 2)}))
    model = pib.Sequential([pib.layers.Pretrained(gm, trainable=True)])
    model.compile(optimizer=pib.optimizers.SGD(0.5), loss="mse")
    model.build((5, 5, 2))
    (filters,) = model.weights  # the Mean's axes are read at load: no weight
    x = np.random.default_rng(1).uniform(0, 1, (4, 5, 5, 2)).astype(np.float32)
    before = run(model.evaluate(x, np.ones((4, 2)), verbose=0))["loss"]
    run(model.fit(x, np.ones((4, 2)), epochs=3, batch_size=4, verbose=0))
    assert run(model.evaluate(x, np.ones((4, 2)), verbose=0))["loss"] < before
    assert not np.allclose(run(filters.numpy()), 0.1)
