"""The gesture trainer at / in Chromium: a deterministic three-class run (synthetic gestures
uploaded, trained in the engine's worker, predicted live from a canvas camera), save, reload and
restore, the privacy check over every request, an accessibility scan, and the layout from 360 px.

Screenshots of each stage go to test-results/app/ (git-ignored).
"""

from __future__ import annotations

import asyncio
import base64
import time
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pytest
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, Request

import py_in_browser as pib
from tests_e2e.app_gestures import CLASSES, gesture_set, png
from tests_e2e.conftest import BOOT_TIMEOUT_MS

SCREENSHOTS = Path(__file__).resolve().parents[1] / "test-results" / "app"
TRAIN_PER_CLASS = 26
INPUT_SIZE = 16
# Every training setting is set (auto batch size: test_stop_keeps_the_weights_trained_so_far).
EPOCHS = 10
LEARNING_RATE = "0.003"
BATCH_SIZE = 16
TRAIN_TIMEOUT_MS = 150_000

# A camera the test controls: getUserMedia answers with a canvas stream showing the image the
# test picks (window.__fakeCamera.show), centred in a 4:3 frame as a webcam would frame it.
CANVAS_CAMERA = """
(() => {
  const canvas = document.createElement("canvas");
  canvas.width = 320;
  canvas.height = 240;
  const context = canvas.getContext("2d");
  let image = null;
  window.__fakeCamera = {
    show(url) {
      return new Promise((resolve) => {
        const next = new Image();
        next.onload = () => { image = next; setTimeout(resolve, 300); };
        next.src = url;
      });
    },
  };
  setInterval(() => {
    context.fillStyle = "#222";
    context.fillRect(0, 0, 320, 240);
    if (image) context.drawImage(image, 40, 0, 240, 240);
  }, 30);
  if (typeof MediaDevices !== "undefined") {
    MediaDevices.prototype.getUserMedia = async () => canvas.captureStream(30);
  }
})();
"""

# Records what the page posts to the engine's Worker: each message's type, the name a bitmap went
# under, and whether the bitmap was in the transfer list (moved, not copied).
WORKER_MESSAGES = """
(() => {
  const post = Worker.prototype.postMessage;
  window.__workerMessages = [];
  Worker.prototype.postMessage = function (message, transfer) {
    window.__workerMessages.push({
      type: message?.type,
      name: message?.name,
      transferredBitmap: message?.bitmap instanceof ImageBitmap && (transfer ?? []).includes(message.bitmap),
    });
    return post.call(this, message, transfer);
  };
})();
"""


@dataclass
class AppSession:
    context: BrowserContext
    page: Page
    origin: str
    requests: list[Request] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    # The app's tests of collection, storage and UI train from scratch (fast on every backend);
    # tests_e2e/test_app_transfer.py tests the default mode, transfer learning.
    query: str = "?mode=scratch"  # e.g. "?backend=cpu&mode=scratch"

    def open(self) -> None:
        self.page.goto(f"{self.origin}/{self.query}")
        self.page.wait_for_function("() => window.pib !== undefined")
        self.page.evaluate(
            f"() => Promise.race([window.pib.ready, new Promise((_, reject) => setTimeout(() => "
            f"reject(new Error('pib.ready timed out')), {BOOT_TIMEOUT_MS}))])"
        )
        self.page.evaluate("() => { window.confirmDeletes = true; }")
        # The engine side of the app is loaded once the Train button can be enabled.
        self.page.wait_for_function(
            "() => document.getElementById('engine-state').textContent.startsWith('Ready')"
        )

    def shot(self, name: str) -> None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SCREENSHOTS / name), full_page=True, caret="initial")


def data_url(image: np.ndarray) -> str:
    return "data:image/png;base64," + base64.b64encode(png(image)).decode()


def new_app_session(browser: Browser, origin: str) -> AppSession:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(CANVAS_CAMERA)
    context.add_init_script(WORKER_MESSAGES)
    session = AppSession(context, context.new_page(), origin)
    context.on("request", lambda request: session.requests.append(request))

    def record_error(message: ConsoleMessage) -> None:
        if message.type == "error":
            session.console_errors.append(message.text)

    session.page.on("console", record_error)
    session.page.on("pageerror", lambda error: session.console_errors.append(str(error)))
    return session


# How many samples the index-th class holds (the app's own count; its strip shows a page of them).
CLASS_COUNT = "((i) => { const g = window.gestureTrainer; return g.store.count(g.classes[i].id); })"


def upload_gestures(
    page: Page,
    images: dict[str, list[np.ndarray]],
    before_upload: Callable[[int], None] | None = None,
) -> None:
    """Names the three classes after `images`' keys (adding the third) and uploads each class's
    images, in order (`before_upload(index)` runs right before the index-th class's upload)."""
    page.click("#add-class")
    page.wait_for_function("() => document.querySelectorAll('.class-card').length === 3")
    cards = page.locator(".class-card")
    for index, kind in enumerate(images):
        card = cards.nth(index)
        card.locator(".class-name").fill(kind)
        card.locator(".class-name").press("Tab")
        files = [
            {"name": f"{kind}-{i:02d}.png", "mimeType": "image/png", "buffer": png(image)}
            for i, image in enumerate(images[kind])
        ]
        if before_upload is not None:
            before_upload(index)
        card.locator("input.upload").set_input_files(files)  # type: ignore[arg-type]
        page.wait_for_function(f"() => {CLASS_COUNT}({index}) === {len(files)}")


def set_field(page: Page, selector: str, value: str) -> None:
    """Types a value into a number field (Firefox's fill appends to a number input's value)."""
    page.fill(selector, "")
    page.type(selector, value)
    assert page.input_value(selector) == value


def choose_settings(page: Page) -> None:
    set_field(page, "#epochs", str(EPOCHS))
    set_field(page, "#learning-rate", LEARNING_RATE)
    set_field(page, "#batch-size", str(BATCH_SIZE))
    page.select_option("#input-size", str(INPUT_SIZE))


def predicted_label(page: Page, image: np.ndarray) -> dict[str, Any]:
    """Shows `image` to the camera and waits for a prediction made after it was on screen: its
    `label`, and `top`, the classes read back from the engine (best first)."""
    page.evaluate("(url) => window.__fakeCamera.show(url)", data_url(image))
    page.evaluate("() => { window.gestureTrainer.prediction.result = null; }")
    page.wait_for_function("() => window.gestureTrainer.prediction.result !== null")
    page.wait_for_timeout(200)  # the next frame after the reset was certainly the new image
    page.evaluate("() => { window.gestureTrainer.prediction.result = null; }")
    page.wait_for_function("() => window.gestureTrainer.prediction.result !== null")
    result: dict[str, Any] = page.evaluate("() => window.gestureTrainer.prediction.result")
    scores = [entry["score"] for entry in result["top"]]
    assert scores == sorted(scores, reverse=True) and result["top"][0]["label"] == result["label"]
    return result


def worker_messages(page: Page) -> dict[str, int]:
    """How many messages of each type the page posted to the engine's Worker since the last call;
    transferred bitmaps count as "bitmap:batch" (training) or "bitmap:frame" (live)."""
    counts: dict[str, int] = page.evaluate(
        """() => {
            const counts = {};
            for (const m of window.__workerMessages.splice(0)) {
                const kind = m.type !== "bitmap" ? m.type
                    : m.transferredBitmap ? `bitmap:${m.name.split("/")[1]}` : "bitmap copied";
                counts[kind] = (counts[kind] ?? 0) + 1;
            }
            return counts;
        }"""
    )
    return counts


def bitmaps_taken(page: Page) -> dict[str, int]:
    """How many training samples and camera frames the engine took as bitmaps (its own count)."""
    taken: dict[str, int] = page.evaluate(
        "(code) => window.pib.runPython(code)",
        "import gesture_trainer\ngesture_trainer.status()['bitmaps']",
    )
    return taken


@pytest.fixture(scope="module")
def app(chromium: Browser, server_url: str) -> Iterator[AppSession]:
    session = new_app_session(chromium, server_url)
    session.open()
    yield session
    session.context.close()


@pytest.fixture(scope="module")
def probes() -> dict[str, np.ndarray]:
    """One unseen image per class for live prediction."""
    return {kind: images[0] for kind, images in gesture_set(1, seed=99).items()}


def test_collect_train_and_predict_three_gestures(
    app: AppSession, probes: dict[str, np.ndarray]
) -> None:
    page = app.page
    started = time.perf_counter()
    upload_gestures(page, gesture_set(TRAIN_PER_CLASS, seed=1))
    counts = page.locator(".class-card .count").all_inner_texts()
    assert counts == [f"{TRAIN_PER_CLASS} samples"] * 3
    app.shot("1-collect.png")

    choose_settings(page)
    worker_messages(page)
    page.click("#train")
    # While the worker trains, the preview keeps playing.
    page.wait_for_function("() => document.getElementById('train-progress').value > 0")
    playing_at = page.eval_on_selector("#preview", "video => video.currentTime")
    page.wait_for_timeout(500)
    assert page.eval_on_selector("#preview", "video => video.currentTime") > playing_at
    page.wait_for_selector("#evaluation:not([hidden])", timeout=TRAIN_TIMEOUT_MS)
    training: dict[str, Any] = page.evaluate("() => window.gestureTrainer.lastTraining")
    print(
        f"\n{page.evaluate('() => window.pib.backend')}: trained {EPOCHS} epochs at "
        f"{INPUT_SIZE}x{INPUT_SIZE} in {training['seconds']:.1f} s, held-out accuracy "
        f"{training['accuracy']:.3f}, longest main-thread task {training['longestTaskMs']:.0f} ms "
        f"({training['longestTaskDuringStepsMs']:.0f} ms during the steps)"
    )
    # Training streamed the samples: each epoch the worker asked the page for every training
    # batch and the held-out ones, and each came as a transferred ImageBitmap, never as bytes
    # (and one last held-out pass for the evaluation).
    held, trained = training["held_out_count"], training["train_count"]
    per_epoch = -(-trained // BATCH_SIZE) + -(-held // BATCH_SIZE)
    sent = worker_messages(page)
    assert sent["bitmap:batch"] == EPOCHS * per_epoch + -(-held // BATCH_SIZE), sent
    assert "put" not in sent and "bitmap copied" not in sent, sent
    assert bitmaps_taken(page)["samples"] == EPOCHS * (trained + held) + held
    assert training["held_out_count"] == 3 * round(TRAIN_PER_CLASS * 0.15)
    assert training["batch_size"] == BATCH_SIZE
    assert training["accuracy"] >= 0.9, training
    assert np.asarray(training["confusion"]).sum() == training["held_out_count"]
    # The chart library drew the curves; the progress bar reached the end.
    assert page.locator("#loss-chart canvas").count() == 1
    assert page.eval_on_selector("#train-progress", "bar => bar.value") == 1
    assert "longest main-thread task" in page.inner_text("#responsiveness")
    assert page.is_hidden("#held-out-advice")  # accuracy is high: no advice
    # The guide box covers the frame's centre square as the preview shows it (a 4:3 frame in a
    # 4:3 preview: the preview's height, centred).
    box = page.locator("#guide-box").bounding_box()
    preview = page.locator("#preview").bounding_box()
    assert box is not None and preview is not None
    assert abs(box["width"] - box["height"]) < 1 and abs(box["height"] - preview["height"]) < 1
    assert abs(box["x"] + box["width"] / 2 - (preview["x"] + preview["width"] / 2)) < 1
    app.shot("2-trained.png")

    frames_before = bitmaps_taken(page)["frames"]
    for kind, image in probes.items():
        result = predicted_label(page, image)
        assert result["label"] == kind, (kind, result)
        assert len(result["top"]) == 3, result
    assert page.inner_text("#top-label") == CLASSES[-1]
    # Every live frame went to the engine as a transferred ImageBitmap, none as bytes.
    sent = worker_messages(page)
    assert sent["bitmap:frame"] >= 6 and "put" not in sent and "bitmap copied" not in sent, sent
    assert bitmaps_taken(page)["frames"] - frames_before >= 6
    app.shot("3-predict.png")
    print(f"collect + train + predict: {time.perf_counter() - started:.1f} s")


def assert_tfjs_export_predicts_as(tfjs_zip: Path, model_file: Path) -> None:
    """The exported TF.js files (read back by the converter tf.loadLayersModel is checked
    against in test_interop_tfjs) hold the same model as the downloaded model file."""
    with zipfile.ZipFile(tfjs_zip) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    assert "model.json" in files and any(name.endswith(".bin") for name in files)

    async def both() -> tuple[np.ndarray, np.ndarray]:
        ours = await pib.load_model(model_file.read_bytes())
        theirs = await pib.load_tfjs(files)
        assert ours.input_shape is not None
        x = np.random.default_rng(0).random((4, *ours.input_shape), dtype=np.float32)
        return (await (await ours.predict(x)).numpy(), await (await theirs.predict(x)).numpy())

    with ThreadPoolExecutor(1) as pool:  # Playwright runs an event loop on this thread
        expected, got = pool.submit(asyncio.run, both()).result()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


def assert_same_top(got: dict[str, Any], want: dict[str, Any]) -> None:
    """The same classes read back with the same scores (near-equal runners-up may swap ranks)."""
    got_scores = {e["label"]: e["score"] for e in got["top"]}
    want_scores = {e["label"]: e["score"] for e in want["top"]}
    assert got["label"] == want["label"] and got_scores.keys() == want_scores.keys(), (got, want)
    for label, score in want_scores.items():
        assert abs(got_scores[label] - score) <= 1e-4, (label, got, want)


def test_save_reload_restore_predicts_the_same(
    app: AppSession, probes: dict[str, np.ndarray], tmp_path: Path
) -> None:
    page = app.page
    before = {kind: predicted_label(page, image) for kind, image in probes.items()}
    page.click("#save-browser")
    page.wait_for_selector("#keep-message:text('Saved in this browser')")
    with page.expect_download() as download_info:
        page.click("#download")
    model_file = tmp_path / "model.pibmodel"
    download_info.value.save_as(model_file)
    assert model_file.read_bytes()[:2] == b"PK"
    with page.expect_download() as tfjs_info:
        page.click("#export-tfjs")
    tfjs_zip = tmp_path / "tfjs.zip"
    tfjs_info.value.save_as(tfjs_zip)
    assert_tfjs_export_predicts_as(tfjs_zip, model_file)

    page.reload()
    app.open()
    counts = page.locator(".class-card .count").all_inner_texts()
    assert counts == [f"{TRAIN_PER_CLASS} samples"] * 3, "the samples were not restored"
    assert page.locator(".class-name").evaluate_all("inputs => inputs.map(i => i.value)") == list(
        CLASSES
    )
    page.click("#load-browser")
    page.wait_for_selector("#prediction:not([hidden])")
    page.wait_for_function("() => window.gestureTrainer.timings.firstPrediction !== null")
    timings = page.evaluate("() => window.gestureTrainer.timings")
    print(
        f"\nreload (cached assets) -> engine ready {timings['ready'] / 1000:.1f} s -> saved model "
        f"loaded {timings['model'] / 1000:.1f} s -> first prediction "
        f"{timings['firstPrediction'] / 1000:.1f} s"
    )
    for kind, image in probes.items():
        after = predicted_label(page, image)
        assert after["label"] == before[kind]["label"] == kind
        assert_same_top(after, before[kind])
    app.shot("4-restored.png")

    page.set_input_files("#model-file", str(model_file))
    page.wait_for_selector("#keep-message:text('model.pibmodel')")
    for kind, image in probes.items():
        assert_same_top(predicted_label(page, image), before[kind])


def test_accessibility_scan_finds_nothing_serious(app: AppSession) -> None:
    page = app.page
    page.add_script_tag(url="/lib/axe-core/axe.min.js")
    violations = page.evaluate(
        """async () => (await axe.run(document)).violations
            .filter((v) => v.impact === "serious" || v.impact === "critical")
            .map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(" ")).join(", ")})`)"""
    )
    assert violations == []


@pytest.mark.parametrize("width", [360, 768, 1280])
def test_layout_fits_from_phone_to_desktop(app: AppSession, width: int) -> None:
    page = app.page
    page.set_viewport_size({"width": width, "height": 900})
    page.wait_for_timeout(300)
    overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    app.shot(f"5-layout-{width}px.png")
    page.set_viewport_size({"width": 1280, "height": 900})
    assert overflow <= 0, f"{overflow} px of horizontal scrolling at {width} px"


def test_keyboard_reaches_every_control(app: AppSession) -> None:
    page = app.page
    page.focus("body")
    controls = ["add-class", "epochs", "learning-rate", "input-size", "train", "save-browser"]
    enabled = page.evaluate(
        "(ids) => ids.filter((id) => !document.getElementById(id).disabled)", controls
    )
    wanted = {*enabled, "record", "class-name", "model-file", "clear-data"}
    reached = set()
    for _ in range(300):
        page.keyboard.press("Tab")
        reached.add(
            page.evaluate("() => document.activeElement.id || document.activeElement.className")
        )
        if wanted <= reached:
            break
    assert wanted <= reached, sorted(wanted - reached)


def test_stop_keeps_the_weights_trained_so_far(app: AppSession) -> None:
    page = app.page
    set_field(page, "#epochs", "200")
    page.fill("#batch-size", "")  # auto: from the device's limits
    page.click("#train")
    page.wait_for_function("() => document.getElementById('train-progress').value > 0")
    page.click("#stop")
    page.wait_for_selector("#train:not([disabled])", timeout=TRAIN_TIMEOUT_MS)
    training: dict[str, Any] = page.evaluate("() => window.gestureTrainer.lastTraining")
    assert training["stopped"] is True
    fits: int = page.evaluate(
        "(code) => window.pib.runPython(code)",
        "import gesture_trainer\npib.max_batch_size(gesture_trainer.session.model)",
    )
    assert training["batch_size"] == min(32, fits, training["train_count"]), (training, fits)
    assert page.eval_on_selector("#train-progress", "bar => bar.value") < 0.5
    assert page.inner_text("#train-progress-text").startswith("Stopped")
    # The weights trained so far stay: the stopped model predicts and can be saved.
    page.wait_for_selector("#prediction:not([hidden])")
    assert not page.is_disabled("#save-browser")


def test_low_held_out_accuracy_says_what_helps(app: AppSession) -> None:
    page = app.page
    set_field(page, "#epochs", "1")
    set_field(page, "#learning-rate", "0.00001")  # one near-still epoch: about chance
    page.click("#train")
    page.wait_for_selector("#held-out-advice:not([hidden])", timeout=TRAIN_TIMEOUT_MS)
    advice = page.inner_text("#held-out-advice")
    assert "more samples per class" in advice and "inside the box on the preview" in advice
    app.shot("5-low-accuracy-advice.png")
    set_field(page, "#learning-rate", LEARNING_RATE)


def test_no_request_leaves_the_page_and_no_console_errors(app: AppSession) -> None:
    """Runs last: every request during capture, training, prediction and restore was a GET of
    the app's own static assets (the engine's descriptor included), nothing else."""
    assert app.requests, "no requests recorded"
    offending = []
    for request in app.requests:
        url = urlsplit(request.url)
        if url.scheme in ("data", "blob"):
            continue
        own = f"{url.scheme}://{url.netloc}" == app.origin
        # The engine's descriptor, and whether training needs a permit (no data goes with it).
        api = url.path.startswith("/api/") and url.path not in (
            "/api/engine",
            "/api/training/policy",
        )
        if request.method != "GET" or not own or api:
            offending.append(f"{request.method} {request.url}")
    assert offending == []
    assert app.console_errors == []
