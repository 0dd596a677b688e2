"""The gesture trainer's transfer mode (its default) at / in Chromium, on the cpu backend: hand-like
images (tests_e2e/hand_gestures.py, not the app tests' discs and bars) uploaded, each embedded once
by the pretrained hand model when it is added, a head trained on the cached embeddings, and the
held-out accuracy the app reports on held-out images shifted, scaled and lit beyond the training
ones (the newest of each class, which the app holds out), against from scratch on the same
samples. Then live prediction with the hand's landmarks, the model file naming its backbone,
loading it back (and refusals when the backbone is not there as named), and memory over 1000 live
frames. One case on webgpu runs the live path from a loaded model file.

Screenshots go to test-results/app-transfer/ (git-ignored).
"""

from __future__ import annotations

import io
import json
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from playwright.sync_api import Browser, Page

from py_in_browser.interop import backbones
from py_in_browser.model_file import read_header
from tests_e2e.app_gestures import png
from tests_e2e.hand_gestures import BEYOND, GESTURES, hand_set
from tests_e2e.test_app import AppSession, new_app_session, predicted_label, upload_gestures
from tests_e2e.test_app_scale import record

SHOTS = Path(__file__).resolve().parents[1] / "test-results" / "app-transfer"
PER_CLASS = 30  # training samples per gesture
BEYOND_PER_CLASS = 5  # the newest 15% of 35: what the app holds out
TRAIN_TIMEOUT_MS = 600_000  # 105 samples embedded on cpu under load, then the head
LIVE_FRAMES = 1000
WARM_UP_FRAMES = 20


def as_bytes(image: np.ndarray) -> np.ndarray:
    return np.round(image * 255).astype(np.uint8)


@pytest.fixture(scope="module")
def images() -> dict[str, list[np.ndarray]]:
    """Per gesture: PER_CLASS training images, then BEYOND_PER_CLASS beyond them."""
    x, y = hand_set(PER_CLASS, seed=1)
    xt, yt = hand_set(BEYOND_PER_CLASS, seed=2, **BEYOND)
    return {
        kind: [as_bytes(i) for i in x[y == c]] + [as_bytes(i) for i in xt[yt == c]]
        for c, kind in enumerate(GESTURES)
    }


@pytest.fixture(scope="module")
def app(chromium: Browser, server_url: str) -> Iterator[AppSession]:
    session = new_app_session(chromium, server_url)
    session.query = "?backend=cpu"  # the default mode: transfer
    session.open()
    yield session
    session.context.close()


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / name), full_page=True)


def run_python(page: Page, code: str) -> Any:
    return page.evaluate("(code) => window.pib.runPython(code)", code)


def memory(page: Page) -> dict[str, int]:
    """The engine's live tensors once Python's collector has run: a tensor left in a reference
    cycle counts until it does, so two readings otherwise differ by when it last ran."""
    figures: dict[str, int] = run_python(
        page,
        "import gc\ngc.collect()\nm = pib.memory()\n{k: m[k] for k in ('num_tensors', 'num_bytes')}",
    )
    return figures


FRAMES = "import gesture_trainer\ngesture_trainer.session.bitmaps['frames']"


def live_frames(page: Page, count: int, timeout_ms: int) -> None:
    """Waits until the engine has classified `count` more live frames."""
    target = run_python(page, FRAMES) + count
    page.wait_for_function(
        f"(code) => window.pib.runPython(code).then((n) => n >= {target})",
        arg=FRAMES,
        timeout=timeout_ms,
        polling=500,
    )


def start_camera(page: Page) -> None:
    """The canvas camera starts by itself where the page may use it; else the button."""
    if page.is_visible("#camera-start"):
        page.click("#camera-start")
    page.wait_for_selector("#guide-box:not([hidden])")


def train(page: Page) -> dict[str, Any]:
    page.evaluate("() => { window.gestureTrainer.lastTraining = null; }")
    page.click("#train")
    page.wait_for_function(
        "() => window.gestureTrainer.lastTraining !== null", timeout=TRAIN_TIMEOUT_MS
    )
    training: dict[str, Any] = page.evaluate("() => window.gestureTrainer.lastTraining")
    return training


def test_transfer_mode_embeds_once_and_beats_from_scratch(
    app: AppSession, images: dict[str, list[np.ndarray]]
) -> None:
    page = app.page
    assert page.input_value("#model-kind") == "transfer"
    before = memory(page)
    upload_gestures(page, images)
    page.wait_for_selector("#embed-status:not([hidden])")
    shot(page, "1-embedding.png")
    started = time.perf_counter()
    page.wait_for_function(
        "() => window.gestureTrainer.embeddings.pending === 0", timeout=TRAIN_TIMEOUT_MS
    )
    embed_s = time.perf_counter() - started
    samples = 3 * (PER_CLASS + BEYOND_PER_CLASS)
    engine = run_python(
        page,
        "import gesture_transfer as t\n"
        "{'embedded': t.state.embedded, 'weights': len(t.state.backbone.host_weights)}",
    )
    # Each sample embedded once, when it was added; the backbone's weights uploaded once.
    assert engine["embedded"] == samples, engine
    assert memory(page)["num_tensors"] - before["num_tensors"] == engine["weights"]
    assert page.is_hidden("#embed-status")

    transfer = train(page)
    assert transfer["backbone"]["sha256"] == backbones.HAND_LANDMARK_LITE.sha256
    assert transfer["held_out_count"] == 3 * BEYOND_PER_CLASS
    assert transfer["train_count"] == 3 * PER_CLASS
    assert transfer["trained_rows"] == 3 * PER_CLASS * 5  # each with its 4 augmented views
    shot(page, "2-trained.png")
    # Training read the cache: nothing was embedded again.
    assert run_python(page, "import gesture_transfer as t\nt.state.embedded") == samples

    page.select_option("#model-kind", "scratch")
    page.select_option("#input-size", "32")
    scratch = train(page)
    print(
        f"\ncpu: {samples} samples embedded in {embed_s:.1f} s ({1000 * embed_s / samples:.0f} ms "
        f"a sample with 4 views); head trained in {transfer['seconds']:.1f} s; held-out accuracy "
        f"(images beyond the training ones): transfer {transfer['accuracy']:.3f}, from scratch "
        f"{scratch['accuracy']:.3f} ({scratch['seconds']:.1f} s)"
    )
    assert transfer["accuracy"] >= 0.75, transfer
    assert transfer["accuracy"] - scratch["accuracy"] >= 0.25, (transfer, scratch)
    assert page.is_visible("#held-out-advice")  # from scratch is low: it says what helps
    assert "Hand features (pretrained)" in page.inner_text("#held-out-advice")
    page.select_option("#model-kind", "transfer")
    transfer_again = train(page)  # the cache again: seconds, the same head
    assert transfer_again["accuracy"] == transfer["accuracy"]
    assert page.is_hidden("#held-out-advice") == (transfer["accuracy"] >= 0.8)


def test_live_prediction_draws_the_hand_and_memory_stays_flat(
    app: AppSession, images: dict[str, list[np.ndarray]]
) -> None:
    page = app.page
    start_camera(page)
    hand = images["open palm"][0]
    result = predicted_label(page, hand)
    assert len(result["hand"]["landmarks"]) == 21 and 0 <= result["hand"]["score"] <= 1
    # A training image, mirrored by the live path as the preview shows it (the head was trained
    # on mirrored views too).
    assert result["label"] == "open palm", result
    shot(page, "3-live.png")
    timings = page.evaluate("() => window.gestureTrainer.timings")
    print(
        f"\ncpu: an open palm shown to the camera reads {result['top']}; first live label "
        f"{(timings['firstPrediction'] - timings['model']) / 1000:.2f} s after the model was trained"
    )
    live_frames(page, WARM_UP_FRAMES, timeout_ms=120_000)
    warm = memory(page)
    live_frames(page, LIVE_FRAMES, timeout_ms=900_000)
    after = memory(page)
    print(f"\nmemory after {WARM_UP_FRAMES} live frames {warm}, {LIVE_FRAMES} frames later {after}")
    assert after == warm


def test_recording_does_not_wait_for_the_embedding_queue(app: AppSession) -> None:
    """30 frames a second into a new class while the hand model embeds them behind: the page
    keeps the rate; deleting the class drops its queued frames."""
    page = app.page
    page.click("#add-class")
    page.wait_for_function("() => document.querySelectorAll('.class-card').length === 4")
    got = record(page, 3, 30)
    pending = page.evaluate("() => window.gestureTrainer.embeddings.pending")
    print(
        f"\ntransfer mode: recorded {got['frames']} frames at {got['fps']:.1f} fps; {pending} queued"
    )
    assert got["fps"] >= 0.6 * 30, got
    assert pending > 0  # the queue runs behind the recording
    page.locator(".class-card").nth(3).locator(".delete-class").click()
    page.wait_for_function(
        "() => window.gestureTrainer.embeddings.pending === 0", timeout=TRAIN_TIMEOUT_MS
    )
    assert page.is_hidden("#embed-status")


def rewritten(model_file: bytes, **backbone: Any) -> bytes:
    """The model file with its header's backbone fields replaced."""
    with zipfile.ZipFile(io.BytesIO(model_file)) as archive:
        header = json.loads(archive.read("model.json"))
        weights = archive.read("weights.bin")
    header["backbone"] = {**header["backbone"], **backbone}
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("model.json", json.dumps(header))
        archive.writestr("weights.bin", weights)
    return out.getvalue()


def test_the_model_file_names_its_backbone_and_loads_back(app: AppSession, tmp_path: Path) -> None:
    page = app.page
    with page.expect_download() as download:
        page.click("#download")
    model_file = tmp_path / "hand.pibmodel"
    download.value.save_as(model_file)
    header = read_header(model_file.read_bytes())
    assert header.backbone == backbones.HAND_LANDMARK_LITE.reference()
    assert header.input_shape == (672,) and header.labels == list(GESTURES)
    assert header.preprocessing is not None and header.preprocessing["size"] == [224, 224]
    with page.expect_download() as tfjs:
        page.click("#export-tfjs")
    with zipfile.ZipFile(tfjs.value.path()) as archive:
        meta = json.loads(archive.read("model.json"))["userDefinedMetadata"]["py_in_browser"]
    assert meta["backbone"] == header.backbone

    data = model_file.read_bytes()
    for name, file, wanted in [
        ("other-sha", rewritten(data, sha256="0" * 64), "sha256 000000000000"),
        ("missing", rewritten(data, name="handlandmark-full"), "handlandmark-full"),
    ]:
        path = tmp_path / f"{name}.pibmodel"
        path.write_bytes(file)
        page.set_input_files("#model-file", str(path))
        banner = page.locator(".banner", has_text=f"Could not load {name}.pibmodel")
        banner.wait_for()
        assert wanted in banner.inner_text(), banner.inner_text()

    page.set_input_files("#model-file", str(model_file))
    page.wait_for_selector("#keep-message:text('hand.pibmodel')")
    assert "hand model handlandmark-lite" in page.inner_text("#keep-message")
    shot(page, "4-loaded.png")


@pytest.mark.parametrize("backend", ["cpu", "webgpu"])
def test_cold_load_to_first_prediction(
    chromium: Browser,
    server_url: str,
    app: AppSession,
    images: dict[str, list[np.ndarray]],
    tmp_path: Path,
    backend: str,
) -> None:
    """A new page (webgpu: the GPU live path): the saved model loaded from its file, the
    backbone fetched, the first live label timed from navigation; memory flat over live frames;
    then a sample per class embedded, timed."""
    with app.page.expect_download() as download:
        app.page.click("#download")
    model_file = tmp_path / "hand.pibmodel"
    download.value.save_as(model_file)
    session = new_app_session(chromium, server_url)
    session.query = f"?backend={backend}"
    try:
        session.open()
        page = session.page
        start_camera(page)
        page.set_input_files("#model-file", str(model_file))
        page.wait_for_function(
            "() => window.gestureTrainer.timings.firstPrediction !== null", timeout=120_000
        )
        timings = page.evaluate("() => window.gestureTrainer.timings")
        assert page.evaluate("() => window.pib.backend") == backend
        live_frames(page, 5, timeout_ms=120_000)
        warm = memory(page)
        live_frames(page, 30, timeout_ms=180_000)
        assert memory(page) == warm
        result = page.evaluate("() => window.gestureTrainer.prediction.result")
        assert len(result["hand"]["landmarks"]) == 21
        shot(page, f"5-{backend}-live.png")
        upload_gestures(page, {kind: shots[:1] for kind, shots in images.items()})
        page.wait_for_function(
            "() => window.gestureTrainer.embeddings.done.size === 3", timeout=TRAIN_TIMEOUT_MS
        )
        embed_ms = page.evaluate("() => window.gestureTrainer.embeddings.ms")
        print(
            f"\n{backend} cold load: engine ready {timings['ready'] / 1000:.1f} s, model loaded "
            f"{timings['model'] / 1000:.1f} s, first live label "
            f"{timings['firstPrediction'] / 1000:.1f} s after navigation; "
            f"{result['ms']:.0f} ms a live frame; embedding "
            f"{', '.join(f'{ms:.0f}' for ms in embed_ms)} ms a sample (with 4 views)"
        )
    finally:
        session.context.close()


def test_embedding_survives_a_lost_gpu(
    chromium: Browser, server_url: str, images: dict[str, list[np.ndarray]]
) -> None:
    """On webgl2, the GPU is lost while the queue embeds: every sample is embedded all the same
    (the backbone's call is guarded: recovered, weights uploaded again, the sample embedded
    again), and what was kept is what embedding the sample again gives, not a lost context's
    zeros."""
    session = new_app_session(chromium, server_url)
    session.query = "?backend=webgl2"
    try:
        session.open()
        page = session.page
        upload_gestures(page, {kind: shots[:1] for kind, shots in images.items()})
        page.wait_for_function("() => window.gestureTrainer.embeddings.done.size >= 1")
        page.evaluate("() => window.pib.runPython('await pib.debug.lose_device()')")
        page.wait_for_function(
            "() => window.gestureTrainer.embeddings.pending === 0", timeout=TRAIN_TIMEOUT_MS
        )
        queue = page.evaluate(
            "() => { const q = window.gestureTrainer.embeddings; "
            "return {done: q.done.size, failures: q.failures}; }"
        )
        events = [e["type"] for e in run_python(page, "pib.runtime_events()")]
        assert queue == {"done": 3, "failures": []}, queue
        assert "context_lost" in events, events
        # The same images again into a fourth class, with the GPU back: each sample's own
        # embedding (row 0; its augmented views depend on its seed) is the one kept before.
        page.click("#add-class")
        page.wait_for_function("() => document.querySelectorAll('.class-card').length === 4")
        again = [shots[0] for shots in images.values()]
        files = [
            {"name": f"again-{i}.png", "mimeType": "image/png", "buffer": png(image)}
            for i, image in enumerate(again)
        ]
        page.locator(".class-card").nth(3).locator("input.upload").set_input_files(files)  # type: ignore[arg-type]
        page.wait_for_function(
            "() => window.gestureTrainer.embeddings.done.size === 6", timeout=TRAIN_TIMEOUT_MS
        )
        rows = page.evaluate(
            """async () => {
                const app = window.gestureTrainer;
                const refs = app.classes.flatMap((c) => app.store.seqs.get(c.id).map((s) => [c.id, s]));
                const all = await app.embeddings.read(refs);
                const size = all.length / refs.length;
                return refs.map((_, i) => Array.from(all.slice(i * size, i * size + 672)));
            }"""
        )
        first, second = np.asarray(rows[:3]), np.asarray(rows[3:])
        assert np.abs(first).max() > 0
        np.testing.assert_allclose(first, second, rtol=0, atol=1e-4 * np.abs(second).max())
    finally:
        session.context.close()
