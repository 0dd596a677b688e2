"""The pretrained graph models set-up fetches, run by the engine (CPython, cpu backend) and by the
reference runtime, TensorFlow.js 4.22 (pure JS, cpu backend, in Node), on seeded inputs: every
output agrees within 1e-4 of the output's scale (its largest magnitude). Also how set-up caches
and the server serves them."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

import py_in_browser as pib
from py_in_browser.interop import tfjs
from py_in_browser.interop.graph_model import HAND_NODES
from py_in_browser.interop.graph_model_ops import OPS
from py_in_browser.testing.graph_models import Node, graph_model_files, seeded_images
from server.main import create_app
from server.pretrained_models import ensure_pretrained_models, model_url, pretrained_problems
from server.settings import PRETRAINED_MODELS, REPO_ROOT, Paths

TFJS = REPO_ROOT / "bench" / "node_modules" / "@tensorflow" / "tfjs" / "dist" / "tf.node.js"
HARNESS = Path(__file__).with_name("js") / "tfjs_graph_model.mjs"
BOUND = 1e-4  # relative to the output's scale


@pytest.fixture(scope="module")
def models() -> Path:
    paths = Paths.default()
    ensure_pretrained_models(paths, log=lambda _: None)  # a no-op once `make setup` ran
    return paths.pretrained_models


def reference(folder: Path, name: str, x: np.ndarray, outputs: list[str], tmp: Path) -> dict:
    node = shutil.which("node")
    assert node is not None, "node is part of the set-up (npm fetches the runtime)"
    assert TFJS.is_file(), "TF.js comes with `make bench/node_modules/.installed` (make test)"
    data = tmp / "input.bin"
    x.astype("<i4" if x.dtype.kind == "i" else "<f4").tofile(data)
    request = {
        "model": str(folder / f"{name}.json"),
        "shard_dir": str(folder),
        "input": str(data),
        "shape": list(x.shape),
        "dtype": "int32" if x.dtype.kind == "i" else "float32",
        "outputs": outputs,
    }
    (tmp / "request.json").write_text(json.dumps(request))
    done = subprocess.run(
        [node, str(HARNESS), str(TFJS), str(tmp / "request.json")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return {k: np.array(v["values"], np.float32).reshape(v["shape"]) for k, v in answer.items()}


def relative_error(ours: np.ndarray, theirs: np.ndarray) -> float:
    assert ours.shape == theirs.shape
    scale = max(float(np.abs(theirs).max()), 1e-30)
    return float(np.abs(ours.astype(np.float64) - theirs).max()) / scale


async def embed(gm: pib.GraphModel, x: np.ndarray) -> np.ndarray:
    out = await gm(x, output=HAND_NODES["embedding"])
    assert isinstance(out, pib.Tensor)
    return await out.numpy()


@pytest.mark.parametrize("seed", [0, 1])
def test_hand_model_matches_tfjs(models: Path, seed: int, tmp_path: Path) -> None:
    gm = asyncio.run(pib.load_graph_model(models / "handlandmark-lite.json"))
    x = seeded_images(seed)
    refs = list(HAND_NODES.values())
    ours = asyncio.run(gm(x, output=refs))
    assert isinstance(ours, list)
    theirs = reference(models, "handlandmark-lite", x, refs, tmp_path)
    errors = {}
    for (role, ref), tensor in zip(HAND_NODES.items(), ours, strict=True):
        errors[role] = relative_error(asyncio.run(tensor.numpy()), theirs[ref])
    print(f"handlandmark-lite seed {seed}: relative errors {errors}")
    assert max(errors.values()) <= BOUND, errors


def test_hand_model_runs_any_batch(models: Path) -> None:
    gm = asyncio.run(pib.load_graph_model(models / "handlandmark-lite.json"))
    assert gm.inputs == [{"name": "input_1:0", "shape": [None, 224, 224, 3], "dtype": "float32"}]
    # Shapes by the op table's rules alone, as layers.Pretrained builds: no device work.
    assert gm.output_shape((224, 224, 3), HAND_NODES["embedding"]) == (672,)
    assert gm.output_shape((224, 224, 3)) == (1,)  # the first signature output, the hand score
    x = seeded_images(5, batch=2)
    together = asyncio.run(embed(gm, x))
    alone = asyncio.run(embed(gm, x[1:]))
    assert together.shape == (2, 672)
    np.testing.assert_allclose(together[1:], alone, rtol=1e-5, atol=1e-6)


def test_served_same_origin_as_npm_shipped_them(models: Path, tmp_path: Path) -> None:
    client = TestClient(create_app(Paths.default()))
    for name in PRETRAINED_MODELS:
        response = client.get(model_url(name))
        assert response.status_code == 200
        assert response.content == (models / f"{name}.json").read_bytes()
        shard = client.get(model_url(name).replace("model.json", f"{name}.bin"))
        assert shard.content == (models / f"{name}.bin").read_bytes()
    for missing in ("handlandmark-lite/MANIFEST.json", "handtrack/model.json", "x/../model.json"):
        assert client.get(f"/models/{missing}").status_code == 404
    copy = Paths(cache=tmp_path / "cache")
    shutil.copytree(models, copy.pretrained_models)
    (copy.pretrained_models / "handlandmark-lite.bin").write_bytes(b"not the weights")
    assert pretrained_problems(copy) == ["corrupted @vladmandic/human@3.3.6/handlandmark-lite.bin"]


MOVENET_NODES = {
    "keypoints": "Identity:0",
    "heatmaps": "StatefulPartitionedCall/Sigmoid:0",
    "centers": "StatefulPartitionedCall/Sigmoid_1:0",
}


def test_movenet_matches_tfjs(models: Path, tmp_path: Path) -> None:
    seed = 0  # one image here (its numpy convolutions are the slow part); the browsers add one
    gm = asyncio.run(pib.load_graph_model(models / "movenet-lightning.json"))
    assert gm.inputs == [{"name": "input:0", "shape": [1, 192, 192, 3], "dtype": "int32"}]
    x = np.round(seeded_images(seed)[:, :192, :192] * 255).astype(np.int32)
    refs = list(MOVENET_NODES.values())
    ours = asyncio.run(gm(x, output=refs))
    assert isinstance(ours, list)
    theirs = reference(models, "movenet-lightning", x, refs, tmp_path)
    errors = {}
    for (role, ref), tensor in zip(MOVENET_NODES.items(), ours, strict=True):
        errors[role] = relative_error(asyncio.run(tensor.numpy()), theirs[ref])
    print(f"movenet-lightning seed {seed}: relative errors {errors}")
    assert max(errors.values()) <= BOUND, errors


def _op_graph() -> tuple[tfjs.Files, list[str]]:
    """A graph using every op of the table not in the two pretrained models (and those settings
    they do not use: EXPLICIT padding, Prelu / LeakyRelu / Elu tails, align_corners, ...)."""
    rng = np.random.default_rng(7)

    def w(*shape: int) -> np.ndarray:
        return rng.normal(0, 0.5, size=shape).astype(np.float32)

    def i32(*values: Any) -> np.ndarray:
        return np.array(values, np.int32)

    weights = {
        "w1": w(3, 3, 3, 4),
        "b1": w(4),
        "a1": w(4),
        "w2": w(1, 1, 3, 4),
        "b2": w(4),
        "wd": w(3, 3, 3, 2),
        "bd": w(6),
        "mw": w(4, 5),
        "mb": w(5),
        "size1": i32(7, 5),
        "size2": i32(5, 6),
        "perm": i32(0, 2, 1, 3),
        "pads": i32([0, 0], [1, 0], [0, 2], [0, 0]),
        "padv": np.array(-0.5, np.float32),
        "begin": i32(0, 1, 0, 1),
        "sizes": i32(-1, 3, 4, 2),
        "axes": i32(1, 2),
        "flat": i32(1, -1),
        "two": np.array(2.0, np.float32),
        "one": np.array(1.0, np.float32),
        "axis1": i32(1),
        "dim": i32(2),
        "cat": np.array(1, np.int32),
    }
    conv = {"strides": [1, 1, 1, 1], "dilations": [1, 1, 1, 1], "data_format": "NHWC"}
    nodes: list[Node] = [
        (
            "c1",
            "_FusedConv2D",
            ["x", "w1", "b1", "a1"],
            {
                **conv,
                "strides": [1, 2, 2, 1],
                "padding": "EXPLICIT",
                "explicit_paddings": [0, 0, 1, 2, 2, 1, 0, 0],
                "fused_ops": ["BiasAdd", "Prelu"],
                "num_args": 2,
            },
        ),
        (
            "c2",
            "_FusedConv2D",
            ["x", "w2", "b2"],
            {
                **conv,
                "padding": "SAME",
                "fused_ops": ["BiasAdd", "LeakyRelu"],
                "num_args": 1,
                "leakyrelu_alpha": 0.3,
            },
        ),
        (
            "d1",
            "FusedDepthwiseConv2dNative",
            ["x", "wd", "bd"],
            {**conv, "padding": "VALID", "fused_ops": ["BiasAdd", "Elu"], "num_args": 1},
        ),
        (
            "ap",
            "AvgPool",
            ["x"],
            {
                "ksize": [1, 3, 3, 1],
                "strides": [1, 2, 2, 1],
                "padding": "SAME",
                "data_format": "NHWC",
            },
        ),
        (
            "r1",
            "ResizeBilinear",
            ["ap", "size1"],
            {"half_pixel_centers": True, "align_corners": False},
        ),
        (
            "r2",
            "ResizeBilinear",
            ["x", "size2"],
            {"half_pixel_centers": False, "align_corners": True},
        ),
        ("t", "Transpose", ["c2", "perm"], {}),
        ("p", "PadV2", ["t", "pads", "padv"], {}),
        ("s", "Slice", ["p", "begin", "sizes"], {}),
        ("mean", "Mean", ["c1", "axes"], {"keep_dims": False}),
        ("sum", "Sum", ["d1", "axes"], {"keep_dims": False}),
        ("max", "Max", ["r1", "axes"], {"keep_dims": True}),
        ("min", "Min", ["s", "axes"], {"keep_dims": False}),
        (
            "mm",
            "_FusedMatMul",
            ["mean", "mw", "mb"],
            {
                "fused_ops": ["BiasAdd", "Sigmoid"],
                "num_args": 1,
                "transpose_a": False,
                "transpose_b": False,
            },
        ),
        ("mt", "MatMul", ["mm", "mw"], {"transpose_a": False, "transpose_b": True}),
        ("sq", "Squeeze", ["max"], {"squeeze_dims": [1, 2]}),
        ("sm", "Softmax", ["sq"], {}),
        ("th", "Tanh", ["sm"], {}),
        ("sum_sq", "Square", ["sum"], {}),
        ("sum_sq1", "AddV2", ["sum_sq", "one"], {}),
        ("rs", "Rsqrt", ["sum_sq1"], {}),
        ("abs", "Abs", ["min"], {}),
        ("abs1", "Add", ["abs", "one"], {}),
        ("lg", "Log", ["abs1"], {}),
        ("neg", "Neg", ["mt"], {}),
        ("ex", "Exp", ["neg"], {}),
        ("pw", "Pow", ["mean", "two"], {}),
        ("dv", "RealDiv", ["pw", "ex"], {}),
        ("sd", "SquaredDifference", ["dv", "mt"], {}),
        ("mx", "Maximum", ["sd", "ex"], {}),
        ("mn", "Minimum", ["mx", "two"], {}),
        ("sg", "Sigmoid", ["mn"], {}),
        ("r6", "Relu6", ["r2"], {}),
        ("rl", "Relu", ["r6"], {}),
        ("fr", "Reshape", ["rl", "flat"], {}),
        ("ed", "ExpandDims", ["sm", "dim"], {}),
        ("pk", "Pack", ["sm", "th"], {"axis": 1, "N": 2}),
        ("un", "Unpack", ["pk"], {"axis": 1, "num": 2}),
        ("out", "ConcatV2", ["un:1", "sg", "rs", "lg", "fr", "cat"], {"N": 5}),
    ]
    outputs = {"out": (1, 3 + 4 + 6 + 2 + 90), "ed": (1, 3, 1), "un": (1, 3)}
    files = graph_model_files(nodes, weights, {"x": ((1, 8, 8, 3), "DT_FLOAT")}, outputs)
    return files, ["out:0", "ed:0", "un:0", "c1:0", "c2:0", "d1:0", "r1:0", "s:0"]


def test_every_op_of_the_table_matches_tfjs(tmp_path: Path) -> None:
    files, refs = _op_graph()
    folder = tmp_path / "ops"
    tfjs.write_folder(files, folder)
    used = {node["op"] for node in json.loads(str(files["model.json"]))["modelTopology"]["node"]}
    in_models = {
        "AddN",
        "Conv2D",
        "DepthwiseConv2dNative",
        "MaxPool",
        "Identity",
        "Cast",
        "Sub",
        "Mul",
        "FloorDiv",
        "ArgMax",
        "GatherNd",
        "Sqrt",
    }
    aliases = {
        "BiasAdd",
        "Div",
        "Snapshot",
        "StopGradient",
        "Erf",
        "Pad",
        "Elu",
        "LeakyRelu",
        "Prelu",
    }  # ops sharing a tested path (Tanh, Elu, ... as fused tails)
    assert set(OPS) - used - in_models - aliases == set()
    gm = asyncio.run(pib.load_graph_model(files))
    x = seeded_images(3, size=8)
    ours = asyncio.run(gm(x, output=refs))
    assert isinstance(ours, list)
    theirs = reference(folder, "model", x, refs, tmp_path)
    errors = {
        r: relative_error(asyncio.run(t.numpy()), theirs[r])
        for r, t in zip(refs, ours, strict=True)
    }
    print(f"op graph: relative errors {errors}")
    assert max(errors.values()) <= BOUND, errors
