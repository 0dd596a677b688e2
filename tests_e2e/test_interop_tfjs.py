"""The TF.js Layers export and import against TensorFlow.js 4.22.0 itself, in one Chromium page:
TF.js (cpu backend) loads the engine's exported models with tf.loadLayersModel and predicts what
the engine predicts; a model TF.js builds and saves loads in the engine and predicts the same."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from playwright.sync_api import Browser, Route

from py_in_browser.interop import tfjs
from tests_e2e.conftest import open_engine_page
from tests_e2e.engine_page import EnginePage

TOLERANCE = 1e-4

EXPORT = """
import base64, json
from py_in_browser.testing import interop_models
model, x = interop_models.build({kind!r})
files = await model.export_tfjs(quantize={quantize!r})
ours = (await (await model.predict(x)).numpy()).ravel().tolist()
shard = base64.b64encode(files["group1-shard1of1.bin"]).decode()
[{{"model.json": files["model.json"], "group1-shard1of1.bin": shard}}, list(x.shape), x.ravel().tolist(), ours]
"""

IMPORT = """
import base64
files = {files!r}
files = {{name: base64.b64decode(v) if name != "model.json" else v for name, v in files.items()}}
model = await pib.load_tfjs(files)
x = np.array({x!r}, np.float32).reshape({shape!r})
[layer.__class__.__name__ for layer in model.layers], (await (await model.predict(x)).numpy()).ravel().tolist()
"""


@pytest.fixture(scope="module")
def interop_page(chromium: Browser, server_url: str) -> Iterator[EnginePage]:
    engine = open_engine_page(chromium, f"{server_url}/bench/interop.html?backend=webgl2")
    ready = engine.js("() => window.interop.ready()")
    assert ready == {"tfjs": "4.22.0", "backend": "webgl2"}, ready
    yield engine
    engine.page.close()


def _export(
    page: EnginePage, kind: str, quantize: str | None
) -> tuple[dict[str, Any], dict[str, Any], np.ndarray]:
    files, shape, x, ours = page.run(EXPORT.format(kind=kind, quantize=quantize))
    theirs = page.js(
        "([files, x]) => window.interop.predictExported(files, x)",
        [files, {"values": x, "shape": shape}],
    )
    return files, {"shape": shape, "values": x}, np.abs(np.array(ours) - np.array(theirs))


@pytest.mark.parametrize("kind", ["mlp", "gesture_cnn", "every_layer"])
def test_tfjs_loads_our_export_and_predicts_the_same(interop_page: EnginePage, kind: str) -> None:
    files, _, difference = _export(interop_page, kind, None)
    assert json.loads(files["model.json"])["format"] == "layers-model"
    print(f"{kind}: largest difference ours vs TF.js {difference.max():.3g}")
    assert difference.max() <= TOLERANCE


@pytest.mark.parametrize("kind", ["mlp", "gesture_cnn"])
def test_tfjs_loads_our_float16_export(interop_page: EnginePage, kind: str) -> None:
    full, _, _ = _export(interop_page, kind, None)
    half, _, difference = _export(interop_page, kind, "float16")
    manifest = json.loads(half["model.json"])["weightsManifest"][0]["weights"]
    assert {json.dumps(w["quantization"]) for w in manifest} == {
        json.dumps({"dtype": "float16", "original_dtype": "float32"})
    }
    assert 2 * len(base64.b64decode(half["group1-shard1of1.bin"])) == len(
        base64.b64decode(full["group1-shard1of1.bin"])
    )
    print(
        f"{kind} float16: largest difference ours (float32) vs TF.js (float16) {difference.max():.3g}"
    )
    assert 0 < difference.max() <= tfjs.FLOAT16_PREDICTION_BOUND


@pytest.mark.parametrize(
    ("kind", "shape", "layer_names"),
    [
        ("mlp", [4, 12], ["Dense", "Dropout", "Dense", "Dense"]),
        (
            "cnn",
            [3, 12, 12, 3],
            [
                "Conv2D",
                "BatchNormalization",
                "MaxPool2D",
                "Conv2D",
                "AveragePooling2D",
                "Dropout",
                "Flatten",
                "Dense",
            ],
        ),
    ],
)
def test_a_model_saved_by_tfjs_loads_here(
    interop_page: EnginePage, kind: str, shape: list[int], layer_names: list[str]
) -> None:
    x = np.random.default_rng(3).normal(size=shape).astype(np.float32).ravel().tolist()
    saved = interop_page.js(
        "([kind, x]) => window.interop.saveFromTfjs(kind, x)", [kind, {"values": x, "shape": shape}]
    )
    names, ours = interop_page.run(IMPORT.format(files=saved["files"], x=x, shape=shape))
    assert names == layer_names
    difference = np.abs(np.array(ours) - np.array(saved["values"]))
    print(f"TF.js {kind} imported: largest difference {difference.max():.3g}")
    assert difference.max() <= TOLERANCE


def test_load_tfjs_fetches_a_model_url_in_the_browser(interop_page: EnginePage) -> None:
    """pib.load_tfjs(URL) in Pyodide: model.json, then its shard next to it, with pyfetch.
    The test answers those two URLs from the exported files (the server has no such route)."""
    files, shape, x, ours = interop_page.run(EXPORT.format(kind="gesture_cnn", quantize=None))
    served = {
        "model.json": files["model.json"].encode(),
        "group1-shard1of1.bin": base64.b64decode(files["group1-shard1of1.bin"]),
    }
    requested: list[str] = []

    def answer(route: Route) -> None:
        name = route.request.url.rsplit("/", 1)[-1]
        requested.append(name)
        route.fulfill(status=200, body=served[name], content_type="application/octet-stream")

    interop_page.page.context.route("**/exported-model/*", answer)
    try:
        got = interop_page.run(
            "model = await pib.load_tfjs('/bench/exported-model/model.json')\n"
            f"x = np.array({x!r}, np.float32).reshape({shape!r})\n"
            "(await (await model.predict(x)).numpy()).ravel().tolist()"
        )
    finally:
        interop_page.page.context.unroute("**/exported-model/*")
    assert requested == ["model.json", "group1-shard1of1.bin"]
    np.testing.assert_allclose(got, ours, atol=1e-6)
