"""pib.data in Chromium on webgpu, webgl2 and cpu, and in Firefox ESR on webgpu and webgl2: an ImageBitmap the page draws and transfers to
the engine's worker lands on the device (copyExternalImageToTexture / texImage2D / getImageData)
equal to its pixel bytes / 255, and its GPU preprocessing matches numpy's within 1e-4; top-k
ranks on the device; a CNN behind RandomAugmentation trains (recorded and replayed on the GPU
backends) with the losses of CPython's cpu backend."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

import py_in_browser as pib
from py_in_browser.preprocessing import ImagePreprocessing
from py_in_browser.testing import image_checks
from tests_e2e.conftest import open_engine_page
from tests_e2e.engine_page import EnginePage
from tests_unit.test_image_data import reference_preprocessing

TOLERANCE = 1e-4
LOSS_TOLERANCE = 1e-3
FRAME_WIDTH, FRAME_HEIGHT = 37, 23  # odd sizes: partial workgroups and texture rows

# Keeps the engine's Worker reachable from the test, to post it frames as the app does (not the
# cpu backend's helper workers, which the page starts too).
CAPTURE_WORKER = """
const NativeWorker = window.Worker;
window.Worker = class extends NativeWorker {
  constructor(...args) {
    super(...args);
    if (String(args[0]).includes("engine-worker.js")) window.engineWorker = this;
  }
};
"""

# Draws a deterministic opaque frame (gradients, shapes, colours) on an OffscreenCanvas, reads its
# bytes, and transfers two ImageBitmaps of it to the worker under `names`.
SEND_FRAMES = """
async ({ width, height, names }) => {
  const canvas = new OffscreenCanvas(width, height);
  const context = canvas.getContext("2d");
  for (let x = 0; x < width; x++) {
    context.fillStyle = `rgb(${(x * 7) % 256}, ${255 - x * 5}, ${(x * 31) % 256})`;
    context.fillRect(x, 0, 1, height);
  }
  context.fillStyle = "rgb(250, 20, 90)";
  context.fillRect(5, 4, 9, 11);
  context.fillStyle = "rgb(10, 200, 240)";
  context.fillRect(width - 12, height - 9, 8, 6);
  const pixels = Array.from(context.getImageData(0, 0, width, height).data);
  const detached = [];
  for (const name of names) {
    const bitmap = await createImageBitmap(canvas);
    window.engineWorker.postMessage({ type: "bitmap", name, bitmap }, [bitmap]);
    detached.push(bitmap.width === 0); // a transferred bitmap is detached here
  }
  return { pixels, detached };
}
"""


@pytest.fixture(
    scope="module",
    params=[
        ("chromium", "webgpu"),
        ("chromium", "webgl2"),
        ("chromium", "cpu"),
        pytest.param(("firefox", "webgpu"), marks=pytest.mark.firefox),
        pytest.param(("firefox", "webgl2"), marks=pytest.mark.firefox),
    ],
    ids=lambda pair: "-".join(pair),
)
def page(request: pytest.FixtureRequest, server_url: str) -> Iterator[EnginePage]:
    browser_kind, backend = request.param
    browser = request.getfixturevalue(browser_kind)
    engine = open_engine_page(browser, f"{server_url}/?backend={backend}", CAPTURE_WORKER)
    assert engine.run("pib.get_backend()") == backend
    engine.run("from py_in_browser.testing import image_checks")
    yield engine
    engine.page.close()


def test_frames_reach_the_device_and_preprocess_like_numpy(page: EnginePage) -> None:
    sent = page.js(
        SEND_FRAMES, {"width": FRAME_WIDTH, "height": FRAME_HEIGHT, "names": ["raw", "prep"]}
    )
    assert sent["detached"] == [True, True]
    rgba = np.array(sent["pixels"], np.uint8).reshape(1, FRAME_HEIGHT, FRAME_WIDTH, 4)
    frame = rgba[..., :3] / np.float32(255.0)
    tensors_before = page.run("pib.memory()['num_tensors']")
    got = page.run("await image_checks.frames_on_device('raw', 'prep')")
    assert page.run("pib.memory()['num_tensors']") == tensors_before  # nothing leaked
    np.testing.assert_allclose(np.array(got["frame"]), frame, rtol=0, atol=1e-6)
    for prep, preprocessed in zip(image_checks.PREPROCESSINGS, got["preprocessed"], strict=True):
        want = reference_preprocessing(frame, ImagePreprocessing.from_dict(prep))
        np.testing.assert_allclose(np.array(preprocessed), want, rtol=0, atol=TOLERANCE)
    want = reference_preprocessing(
        frame, ImagePreprocessing.from_dict(image_checks.PREPROCESSINGS[0])
    )
    np.testing.assert_allclose(np.array(got["direct"]), want, rtol=0, atol=TOLERANCE)


def test_top_k_is_ranked_on_the_device(page: EnginePage) -> None:
    ranked = page.run("await image_checks.ranked_on_device()")
    scores = image_checks.scores_to_rank()
    for row, got in zip(scores, ranked, strict=True):
        best = np.argsort(-row)[:3]
        assert [r["index"] for r in got] == best.tolist()
        np.testing.assert_allclose([r["score"] for r in got], row[best], rtol=0, atol=1e-7)


def on_cpython(coroutine: Any) -> Any:
    # Playwright's sync API owns this thread's event loop, so CPython runs on its own thread.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def test_live_classification_reads_back_the_top_results(page: EnginePage) -> None:
    names = ["live", "again"]
    sent = page.js(SEND_FRAMES, {"width": FRAME_WIDTH, "height": FRAME_HEIGHT, "names": names})
    rgba = np.array(sent["pixels"], np.uint8).reshape(1, FRAME_HEIGHT, FRAME_WIDTH, 4)
    prep = ImagePreprocessing.from_dict(image_checks.PREPROCESSINGS[0])
    inputs = reference_preprocessing(rgba[..., :3] / np.float32(255.0), prep).astype(np.float32)
    model = image_checks.frame_classifier()
    want = on_cpython(pib.data.top_k(model, inputs, k=2, labels=["a", "b", "c", "d"]))[0]
    first, warm = (page.run(f"await image_checks.classify_frame({n!r})") for n in names)
    for got in (first, warm):  # the first call compiles its kernels; the second is a warm frame
        assert [r["label"] for r in got["top"]] == [r["label"] for r in want]
        np.testing.assert_allclose(
            [r["score"] for r in got["top"]], [r["score"] for r in want], rtol=0, atol=TOLERANCE
        )
        assert 0 < got["ms"] < 60_000
    backend = page.run("pib.get_backend()")
    print(f"{backend} frame to top-2: first {first['ms']:.1f} ms, warm {warm['ms']:.1f} ms")


def cpu_augmented_cnn() -> tuple[list[float], int]:
    # Playwright's sync API owns this thread's event loop, so CPython runs on its own thread.
    with ThreadPoolExecutor(1) as pool:
        losses, _, _, draws = pool.submit(asyncio.run, image_checks.augmented_cnn_losses()).result()
    return losses, draws


def test_augmented_cnn_trains_like_cpu(page: EnginePage) -> None:
    expected, expected_draws = cpu_augmented_cnn()
    backend = page.run("pib.get_backend()")
    losses, replayed, calls, draws = page.run("await image_checks.augmented_cnn_losses()")
    np.testing.assert_allclose(losses, expected, rtol=0, atol=LOSS_TOLERANCE)
    assert draws == expected_draws == 12
    if backend != "cpu":  # the GPU backends record the step once and replay it from JS
        assert replayed == 6, replayed
        assert calls / 6 <= 2, (backend, calls)
    print(f"{backend} augmented cnn: {calls} js calls in 6 steps, losses {losses[-3:]}")
