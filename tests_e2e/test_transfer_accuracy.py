"""Transfer learning against training from scratch, in Chromium on the cpu backend, on hand-like
images (tests_e2e/hand_gestures.py, drawn in the engine's worker): 30 samples per gesture of
three, and a held-out set shifted, scaled and lit beyond them.

Transfer: each image embedded once by the pretrained hand model the server serves
(handlandmark-lite, its global-pool embedding) and a softmax head trained on the embeddings.
From scratch: the gesture trainer's own CNN recipe (web/py/gesture_trainer.py build_model, with
its augmentation) at 32 x 32. The test asserts transfer >= 75% held out and >= 25 points over
from scratch, and prints both.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests_e2e.engine_page import EnginePage

ROOT = Path(__file__).resolve().parents[1]
PER_CLASS = 30
HELD_OUT_PER_CLASS = 20


@pytest.fixture(scope="module")
def page_query() -> str:
    return "?backend=cpu"


def module_code(name: str, path: Path) -> str:
    """Python that makes the file at `path` the module `name` in the worker."""
    source = path.read_text()
    return (
        "import sys, types\n"
        f"{name} = types.ModuleType({name!r})\n"
        f"sys.modules[{name!r}] = {name}\n"
        f"exec(compile({source!r}, {path.name!r}, 'exec'), {name}.__dict__)\n"
    )


EXPERIMENT = f"""
import time
import numpy as np
from py_in_browser.data import ImagePreprocessing
from py_in_browser.interop.graph_model import HAND_NODES

x, y = hand_gestures.hand_set({PER_CLASS}, seed=1)
xt, yt = hand_gestures.hand_set({HELD_OUT_PER_CLASS}, seed=2, **hand_gestures.BEYOND)
backbone = await pib.load_graph_model("/models/handlandmark-lite/model.json")

async def embed(images):
    parts = []
    for start in range(0, len(images), 10):
        out = await backbone(images[start:start + 10], output=HAND_NODES["embedding"])
        parts.append(await out.numpy())
        out.dispose()
    return np.concatenate(parts)

started = time.perf_counter()
e, et = await embed(x), await embed(xt)
embed_ms = 1000 * (time.perf_counter() - started) / (len(x) + len(xt))
mean, std = e.mean(axis=0), e.std(axis=0) + 1e-6
head = pib.Sequential([pib.layers.Dense(3, activation="softmax", input_shape=(e.shape[1],))], seed=0)
head.compile(optimizer=pib.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
started = time.perf_counter()
await head.fit((e - mean) / std, y, epochs=100, batch_size=32, seed=0)
head_s = time.perf_counter() - started
transfer = (await head.evaluate((et - mean) / std, yt))["accuracy"]

def small(images):
    return pib.data.preprocess(images, ImagePreprocessing(size=(32, 32)))

scratch_model = gesture_trainer.build_model(3, 32, 0.003)
await scratch_model.fit(await small(x).numpy(), y, epochs=20, batch_size=16, seed=0)
scratch = (await scratch_model.evaluate(await small(xt).numpy(), yt))["accuracy"]
{{"transfer": transfer, "scratch": scratch, "embed_ms": embed_ms, "head_s": head_s}}
"""


def test_transfer_beats_training_from_scratch(engine_page: EnginePage) -> None:
    engine_page.run(module_code("hand_gestures", ROOT / "tests_e2e" / "hand_gestures.py"))
    engine_page.run(module_code("gesture_trainer", ROOT / "web" / "py" / "gesture_trainer.py"))
    result = engine_page.run(EXPERIMENT)
    print(
        f"\nheld-out accuracy at {PER_CLASS} samples per gesture: transfer {result['transfer']:.3f} "
        f"(embedding {result['embed_ms']:.0f} ms an image, head trained in {result['head_s']:.1f} s), "
        f"from scratch {result['scratch']:.3f}"
    )
    assert result["transfer"] >= 0.75, result
    assert result["transfer"] - result["scratch"] >= 0.25, result
