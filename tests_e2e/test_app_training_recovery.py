"""The gesture trainer's training survives a lost GPU (issue 27, item 4): the app trains a model
from uploaded gestures twice in one page, the second time with a real loss injected once training
is under way, on webgl2 and webgpu in Chromium and webgl2 in Firefox. The epoch the loss lands in
restarts from its host checkpoint (its batches were on the lost device), so the model the app
saves is the one trained without the loss, and no banner shows the engine's error text."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import pytest
from playwright.sync_api import Page

from py_in_browser.model_file import read
from tests_e2e.app_gestures import gesture_set
from tests_e2e.test_app import TRAIN_TIMEOUT_MS, set_field, upload_gestures
from tests_e2e.test_app_recovery import RAW_ERROR, open_app

CASES = [
    pytest.param(("chromium", "webgl2"), id="chromium-webgl2"),
    pytest.param(("chromium", "webgpu"), id="chromium-webgpu"),
    pytest.param(("firefox", "webgl2"), id="firefox-webgl2", marks=pytest.mark.firefox),
]
PER_CLASS = 10
SAVE = "import gesture_trainer\nawait gesture_trainer.save()"
LOSSES = "sum(e['type'] in ('context_lost', 'device_lost') for e in pib.runtime_events())"


def train(page: Page, lose_after_batches: int | None) -> list[np.ndarray]:
    """Clicks Train (a loss injected once `lose_after_batches` batches have been reported, when
    given) and returns the weights of the model the app then saves."""
    page.evaluate(
        """() => { window.__batches = 0;
          window.pib.events.addEventListener("train", (e) => {
            if (e.detail.event === "batch") window.__batches += 1; }); }"""
    )
    page.click("#train")
    if lose_after_batches is not None:
        page.wait_for_function(f"() => window.__batches >= {lose_after_batches}")
        page.evaluate("() => window.pib.runPython('await pib.debug.lose_device()')")
    page.wait_for_selector("#evaluation:not([hidden])", timeout=TRAIN_TIMEOUT_MS)
    page.wait_for_selector("#train:not([disabled])", timeout=TRAIN_TIMEOUT_MS)
    training: dict[str, Any] = page.evaluate("() => window.gestureTrainer.lastTraining")
    assert training["stopped"] is False, training
    saved = read(base64.b64decode(page.evaluate("(code) => window.pib.runPython(code)", SAVE)))
    return list(saved.weights)


@pytest.mark.parametrize("case", CASES)
def test_a_loss_during_training_trains_the_same_model(
    case: tuple[str, str], request: pytest.FixtureRequest, server_url: str
) -> None:
    browser_name, backend = case
    page = open_app(request.getfixturevalue(browser_name), server_url, backend)
    try:
        upload_gestures(page, gesture_set(PER_CLASS, seed=3))
        set_field(page, "#epochs", "3")
        set_field(page, "#batch-size", "8")
        page.select_option("#input-size", "16")
        uninterrupted = train(page, lose_after_batches=None)
        losses_before = page.evaluate("(code) => window.pib.runPython(code)", LOSSES)
        page.evaluate("() => { document.querySelectorAll('.banner').forEach((b) => b.remove()); }")
        recovered = train(page, lose_after_batches=4)
        losses = page.evaluate("(code) => window.pib.runPython(code)", LOSSES) - losses_before
        print(f"\n{case}: {losses} loss(es) during the second training")
        assert losses >= 1
        for got, want in zip(recovered, uninterrupted, strict=True):
            np.testing.assert_array_equal(got, want)
        shown: list[str] = page.locator(".banner").all_inner_texts()
        assert not any(raw in text for text in shown for raw in RAW_ERROR), shown
    finally:
        page.context.close()
