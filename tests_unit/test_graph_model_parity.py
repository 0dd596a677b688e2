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
from py_in_browser.interop.graph_model import HAND_NODES
from py_in_browser.testing.graph_models import seeded_images
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


@pytest.mark.parametrize("seed", [0, 1])
def test_movenet_matches_tfjs(models: Path, seed: int, tmp_path: Path) -> None:
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
