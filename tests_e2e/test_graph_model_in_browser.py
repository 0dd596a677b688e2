"""The pretrained graph models in real browsers: the engine (pib.load_graph_model of the URL the
server serves them at) on cpu, webgpu and webgl2 against TensorFlow.js 4.22 (tf.loadGraphModel of
the same URL, cpu backend: the float32 reference) in the same page of Chromium and of Firefox.

The hand model's embedding (the global pool its heads read), landmarks and scores must agree
within 1e-4 of each output's scale (its largest magnitude) on seeded images (a batch of two on
cpu, the first of them on the GPU backends, which this machine emulates slowly); MoveNet's
keypoints and heat maps likewise on one (its decoding fixes the batch at 1).
One page per browser, booted on cpu (bench/interop.html: TF.js on the page, the engine in its
worker); each backend is then selected with pib.init, as a script may.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from py_in_browser.interop.graph_model import HAND_NODES
from server.pretrained_models import model_url
from tests_e2e.conftest import open_engine_page
from tests_e2e.engine_page import EnginePage

BOUND = 1e-4
MOVENET_NODES = {
    "keypoints": "Identity:0",
    "heatmaps": "StatefulPartitionedCall/Sigmoid:0",
    "centers": "StatefulPartitionedCall/Sigmoid_1:0",
}


@dataclass(frozen=True)
class Model:
    name: str
    nodes: dict[str, str]
    inputs: str  # Python run in the engine: x, the model's input as numpy
    # Its first output replays on the cpu backend's SIMD module and on webgpu, as a per-frame
    # backbone must (checked for the hand model; MoveNet's int32 decoding stays eager on cpu).
    replays: bool


MODELS = {
    "hand": Model(
        "handlandmark-lite", HAND_NODES, "x = graph_models.seeded_images(0, batch=2)", True
    ),
    "movenet": Model(
        "movenet-lightning",
        MOVENET_NODES,
        "x = np.round(graph_models.seeded_images(1, size=192) * 255).astype(np.int32)",
        False,
    ),
}
TARGETS = [(b, k) for b in ("chromium", "firefox") for k in ("cpu", "webgpu", "webgl2")]

INPUT = """
import base64
from py_in_browser.testing import graph_models
{inputs}
graph_inputs = globals().setdefault("graph_inputs", {{}})
graph_inputs[{model!r}] = x
{{"base64": base64.b64encode(x.astype("<" + x.dtype.str[1:]).tobytes()).decode(),
 "shape": list(x.shape), "dtype": str(x.dtype)}}
"""

RUN = """
import time
if pib.get_backend() != {backend!r}:
    await pib.init(backend={backend!r})
gm = await pib.load_graph_model({url!r})
x = graph_inputs[{model!r}][:{batch}]
start = time.perf_counter()
outs = await gm(x, output={refs!r})  # the first call uploads the weights, compiles the kernels
values = [(await t.numpy()).ravel().tolist() for t in outs]
first_ms = (time.perf_counter() - start) * 1000
replays = None
if {replays!r} and pib.get_backend() in ("cpu", "webgpu"):  # per-frame calls replay
    for _ in range(3):
        start = time.perf_counter()
        again = (await (await gm(x, output={refs!r}[0])).numpy()).ravel()
    replay_ms = (time.perf_counter() - start) * 1000
    # The same tensor as a frozen layer of a Sequential, through predict's own replay.
    backbone = pib.Sequential([pib.layers.Pretrained(gm, output={refs!r}[0])])
    backbone.build(x.shape[1:])
    for _ in range(3):
        predicted = (await (await backbone.predict(x)).numpy()).ravel()
    replays = [gm.replayed(), float(np.abs(again - values[0]).max()), replay_ms,
               float(np.abs(predicted - values[0]).max())]
[pib.get_backend(), first_ms, values, replays]
"""


class Pages:
    """One interop page per browser, and TF.js's answers per model, made once."""

    def __init__(self, request: pytest.FixtureRequest, server_url: str) -> None:
        self.request, self.server_url = request, server_url
        self.pages: dict[str, EnginePage] = {}
        self.references: dict[tuple[str, str], dict[str, np.ndarray]] = {}

    def page(self, browser_name: str) -> EnginePage:
        if browser_name not in self.pages:
            browser: Any = self.request.getfixturevalue(browser_name)
            url = f"{self.server_url}/bench/interop.html?backend=cpu"
            engine = open_engine_page(browser, url)
            ready = engine.js("() => window.interop.ready()")
            assert ready == {"tfjs": "4.22.0", "backend": "cpu"}, ready
            self.pages[browser_name] = engine
        return self.pages[browser_name]

    def reference(self, browser_name: str, key: str) -> dict[str, np.ndarray]:
        if (browser_name, key) not in self.references:
            model = MODELS[key]
            page = self.page(browser_name)
            x = page.run(INPUT.format(inputs=model.inputs, model=key))
            answer = page.js(
                "([url, x, outputs]) => window.interop.runGraphModel(url, x, outputs)",
                [model_url(model.name), x, list(model.nodes.values())],
            )
            self.references[(browser_name, key)] = {
                name: np.array(v["values"], np.float32).reshape(v["shape"])
                for name, v in answer.items()
            }
        return self.references[(browser_name, key)]

    def close(self) -> None:
        for page in self.pages.values():
            page.page.close()


@pytest.fixture(scope="module")
def pages(request: pytest.FixtureRequest, server_url: str) -> Iterator[Pages]:
    held = Pages(request, server_url)
    yield held
    held.close()


@pytest.mark.parametrize("key", list(MODELS))
@pytest.mark.parametrize(("browser_name", "backend"), TARGETS, ids=[f"{b}-{k}" for b, k in TARGETS])
def test_graph_model_matches_tfjs(pages: Pages, browser_name: str, backend: str, key: str) -> None:
    model = MODELS[key]
    theirs = pages.reference(browser_name, key)
    refs = list(model.nodes.values())
    # The hand model's batch of two runs on cpu; the (emulated, slow) GPUs take its first image.
    batch = 2 if key == "hand" and backend == "cpu" else 1
    ran_on, ms, values, replays = pages.page(browser_name).run(
        RUN.format(
            backend=backend,
            url=model_url(model.name),
            model=key,
            refs=refs,
            replays=model.replays,
            batch=batch,
        )
    )
    assert ran_on == backend
    errors = {}
    for (role, ref), ours in zip(model.nodes.items(), values, strict=True):
        expected = theirs[ref][:batch]
        got = np.array(ours, np.float32).reshape(expected.shape)
        difference = float(np.abs(got - expected).max())
        errors[role] = (difference, difference / max(float(np.abs(expected).max()), 1e-30))
    listed = ", ".join(f"{role} {a:.2e} abs / {r:.2e} rel" for role, (a, r) in errors.items())
    print(f"{model.name} {browser_name} {backend} (first call {ms:.0f} ms): {listed}")
    assert max(r for _, r in errors.values()) <= BOUND, errors
    if replays is not None:
        replayed, difference, replay_ms, predicted = replays
        print(f"  replayed {replayed} of 3 single-output calls, last {replay_ms:.0f} ms")
        assert replayed >= 1 and difference == 0.0, replays
        assert predicted <= 1e-6 * float(np.abs(theirs[refs[0]]).max()), replays
