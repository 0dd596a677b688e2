"""The gesture trainer's camera paths: Chromium's fake camera playing a y4m clip the test writes
(record by holding the button, with pointer and keyboard; delete a sample), a browser without a
camera (a clear message, uploads still work), and collect/train/predict in Firefox ESR, whose fake
camera (media.navigator.streams.fake) starts the preview.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from playwright.sync_api import Browser, Page, Playwright

import py_in_browser as pib
from py_in_browser.data import ImagePreprocessing
from tests_e2e.app_gestures import CLASSES, gesture_set, png, write_y4m
from tests_e2e.browsers import launch_chromium
from tests_e2e.test_app import (
    CLASS_COUNT,
    EPOCHS,
    SCREENSHOTS,
    TRAIN_PER_CLASS,
    TRAIN_TIMEOUT_MS,
    bitmaps_taken,
    choose_settings,
    new_app_session,
    predicted_label,
    upload_gestures,
)

RECORD_FPS = 10  # web/js/trainer/main.js records at this rate while the button is held


@pytest.fixture(scope="module")
def fake_camera_chromium(
    playwright: Playwright, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Browser]:
    clip = tmp_path_factory.mktemp("camera") / "gestures.y4m"
    frames = [
        np.kron(image, np.ones((2, 2, 1), np.uint8)) for image in gesture_set(10, seed=5)["disc"]
    ]
    write_y4m(clip, frames)
    browser = launch_chromium(
        playwright,
        [
            "--use-fake-ui-for-media-stream",
            "--use-fake-device-for-media-stream",
            f"--use-file-for-fake-video-capture={clip}",
        ],
    )
    yield browser
    browser.close()


def open_app(browser: Browser, origin: str) -> Page:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{origin}/?mode=scratch")
    page.wait_for_function("() => window.pib !== undefined")
    page.evaluate("() => { window.confirmDeletes = true; }")
    return page


# How long a frame captured just before a release may take to be stored (thumbnail, IndexedDB).
SETTLE_MS = 500


def sample_count(page: Page, index: int = 0) -> int:
    count: int = page.evaluate(f"{CLASS_COUNT}({index})")
    return count


def test_record_from_the_fake_camera_by_holding_the_button(
    fake_camera_chromium: Browser, server_url: str
) -> None:
    page = open_app(fake_camera_chromium, server_url)
    page.wait_for_function(
        "() => document.getElementById('preview').videoWidth > 0", timeout=30_000
    )
    assert page.eval_on_selector("#preview", "v => [v.videoWidth, v.videoHeight]") == [128, 128]
    assert page.is_hidden("#camera-start") and page.is_hidden("#camera-message")
    record = page.locator(".class-card").nth(0).locator(".record")

    record.focus()
    page.keyboard.down("Space")
    page.wait_for_timeout(1000)
    page.keyboard.up("Space")
    # A frame captured just before the release may still be stored: let it land, then count.
    page.wait_for_timeout(SETTLE_MS)
    by_keyboard = sample_count(page)
    # A steady rate while held: about RECORD_FPS per second (timers on a loaded machine lag).
    assert RECORD_FPS * 0.5 <= by_keyboard <= RECORD_FPS + 2, by_keyboard
    page.wait_for_timeout(400)
    assert sample_count(page) == by_keyboard, "recording went on after the key was released"

    box = record.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.wait_for_timeout(600)
    page.mouse.up()
    page.wait_for_timeout(SETTLE_MS)
    by_pointer = sample_count(page) - by_keyboard
    assert 3 <= by_pointer <= 0.6 * RECORD_FPS + 2, by_pointer
    # A recorded frame is the clip's picture: a bright disc on a dark ground, not a blank frame.
    spread = page.evaluate(
        "async () => { const g = window.gestureTrainer;"
        " const d = (await g.store.slice(g.classes[0].id, 0, 1))[0].rgba;"
        " let lo = 255, hi = 0; for (let i = 0; i < d.length; i += 4) { lo = Math.min(lo, d[i]); hi = Math.max(hi, d[i]); }"
        " return hi - lo; }"
    )
    assert spread > 100, spread

    total = sample_count(page)
    page.locator(".class-card").nth(0).locator(".thumb").first.click()
    # The count drops once the sample is also gone from IndexedDB (a slow machine takes a
    # while): wait for that, then check that exactly one went.
    page.wait_for_function(f"() => {CLASS_COUNT}(0) < {total}")
    assert sample_count(page) == total - 1
    # The card's count follows on the next render.
    page.wait_for_function(
        f"() => document.querySelector('.class-card .count').textContent === '{total - 1} samples'"
    )
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "6-fake-camera-recorded.png"), full_page=True)
    page.close()


def test_no_camera_says_so_and_uploads_still_work(chromium: Browser, server_url: str) -> None:
    context = chromium.new_context(viewport={"width": 360, "height": 800})
    context.add_init_script(
        "MediaDevices.prototype.getUserMedia = async () => {"
        " throw new DOMException('Permission denied', 'NotAllowedError'); };"
    )
    page = context.new_page()
    page.goto(f"{server_url}/?mode=scratch")
    page.wait_for_selector("#camera-message:not([hidden])")
    assert "permission was denied" in page.inner_text("#camera-message")
    assert page.is_visible("#camera-start")
    image = gesture_set(1, seed=3)["bar"][0]
    page.locator(".class-card").nth(1).locator("input.upload").set_input_files(
        {"name": "bar.png", "mimeType": "image/png", "buffer": png(image)}
    )
    page.wait_for_function(f"() => {CLASS_COUNT}(1) === 1")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "7-no-camera-360px.png"), full_page=True)
    context.close()


def tiny_model_file() -> bytes:
    """A small untrained image classifier's model file, with the app's live preprocessing."""

    async def save() -> bytes:
        model = pib.Sequential(
            [
                pib.layers.Conv2D(4, 3, activation="relu", input_shape=(12, 12, 3)),
                pib.layers.Flatten(),
                pib.layers.Dense(3, activation="softmax"),
            ],
            seed=0,
        )
        model.build()
        prep = ImagePreprocessing(size=(12, 12), mirror=True).to_dict()
        return await model.save(labels=["a", "b", "c"], preprocessing=prep)

    with ThreadPoolExecutor(1) as pool:  # Playwright runs an event loop on this thread
        return pool.submit(asyncio.run, save()).result()


def test_firefox_collects_trains_and_predicts(firefox: Browser, server_url: str) -> None:
    plain = firefox.new_page()
    plain.goto(f"{server_url}/?backend=webgpu&mode=scratch")
    # Firefox's own fake camera (media.navigator.streams.fake) drives the real getUserMedia path.
    plain.wait_for_function(
        "() => document.getElementById('preview').videoWidth > 0", timeout=60_000
    )
    # Firefox's software WebGPU names nothing (a blank adapter info); the status panel still says
    # what it is, from the engine's verdict.
    plain.wait_for_function("() => document.querySelectorAll('#status-list dd').length > 1")
    gpu = plain.locator("#status-list dd").nth(1).inner_text()
    software = plain.evaluate(
        "() => window.pib.runPython(\"pib.capabilities().get('software_renderer')\")"
    )
    assert "unknown" not in gpu and bool(gpu.strip()), gpu
    assert (f"a software GPU ({software})" in gpu) == bool(software), (gpu, software)
    print(f"\nfirefox webgpu status panel, GPU: {gpu}")
    # A loaded model classifies the fake camera live on WebGPU: each frame a transferred bitmap
    # copied into a GPU texture, preprocessed there, only the top classes read back.
    model = {"name": "tiny.pibmodel", "mimeType": "application/zip", "buffer": tiny_model_file()}
    plain.set_input_files("#model-file", model)  # type: ignore[arg-type]
    plain.wait_for_function("() => window.gestureTrainer.prediction.result !== null")
    live = plain.evaluate("() => window.gestureTrainer.prediction.result")
    assert sorted(entry["label"] for entry in live["top"]) == ["a", "b", "c"], live
    assert bitmaps_taken(plain)["frames"] >= 1
    timings = plain.evaluate("() => window.gestureTrainer.timings")
    print(
        f"firefox webgpu: engine ready {timings['ready'] / 1000:.1f} s after the page opened, "
        f"first live prediction {timings['firstPrediction'] - timings['model']:.0f} ms after "
        f"the model loaded"
    )
    plain.close()

    session = new_app_session(firefox, server_url)
    session.open()
    page = session.page
    upload_gestures(page, gesture_set(TRAIN_PER_CLASS, seed=1))
    choose_settings(page)
    page.click("#train")
    page.wait_for_selector("#evaluation:not([hidden])", timeout=TRAIN_TIMEOUT_MS)
    training: dict[str, Any] = page.evaluate("() => window.gestureTrainer.lastTraining")
    backend = page.evaluate("() => window.pib.backend")
    print(
        f"\nfirefox {backend}: {EPOCHS} epochs in {training['seconds']:.1f} s, held-out "
        f"{training['accuracy']:.3f}, longest main-thread task {training['longestTaskMs']:.0f} ms "
        f"({training['longestTaskDuringStepsMs']:.0f} ms during the steps)"
    )
    assert training["accuracy"] >= 0.9, training
    probes = gesture_set(1, seed=99)
    for kind in CLASSES:
        assert predicted_label(page, probes[kind][0])["label"] == kind
    assert session.console_errors == []
    # Last: Playwright's Firefox screenshot injects a <style> the page's CSP reports as an error.
    session.shot("8-firefox-predict.png")
    session.context.close()
