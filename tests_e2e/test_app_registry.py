"""The gesture trainer against a server that requires training permits and keeps a registry:
a refused permit shows its reason and trains nothing, a permit the engine cannot honour stops
fit before any step, a granted one trains; the model published from one browser context loads
into a fresh one through the gallery and predicts the same; the owner alone can delete it, and
a rate-limited publish says when to retry.

One small training run (3 classes x 4 images, 16 x 16, 4 epochs) serves every test here.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from playwright.sync_api import Browser, Route

from py_in_browser import permits
from server.background import background_dev_server
from tests_e2e.app_gestures import gesture_set
from tests_e2e.test_app import (
    INPUT_SIZE,
    TRAIN_TIMEOUT_MS,
    AppSession,
    assert_same_top,
    new_app_session,
    predicted_label,
    set_field,
    upload_gestures,
)

PER_CLASS = 4  # 3 held out (one per class), 9 trained on
EPOCHS = 4
# 9 samples x 4 epochs = 36 fits the daily budget of epochs x samples; 9 x 200 does not.
WORK_PER_DAY = 100
MODEL_NAME = f"Shapes {uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def permit_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = {
        "PIB_DATA_DIR": str(tmp_path_factory.mktemp("registry")),
        "PIB_REQUIRE_PERMITS": "1",
        "PIB_WORK_PER_DAY": str(WORK_PER_DAY),
        # One publish, then 429 (a token comes back every 10 minutes, longer than this module
        # takes on a slow machine): the second publish shows when to retry.
        "PIB_RATE_LIMITS": "upload=1/0.1",
    }
    with background_dev_server(env=env) as url:
        yield url


@pytest.fixture(scope="module")
def publisher(chromium: Browser, permit_server: str) -> Iterator[AppSession]:
    session = new_app_session(chromium, permit_server)
    session.open()
    upload_gestures(session.page, gesture_set(PER_CLASS, seed=1))
    session.page.select_option("#input-size", str(INPUT_SIZE))
    yield session
    session.context.close()


@pytest.fixture(scope="module")
def probe() -> np.ndarray:
    return gesture_set(1, seed=99)["bar"][0]


def permit_answers(session: AppSession) -> list[tuple[int, str]]:
    return [
        (request.response().status, request.response().text())  # type: ignore[union-attr]
        for request in session.requests
        if request.url.endswith("/api/training/permits") and request.response() is not None
    ]


def test_a_refused_permit_shows_its_reason_and_trains_nothing(publisher: AppSession) -> None:
    page = publisher.page
    set_field(page, "#epochs", "200")
    page.click("#train")
    page.wait_for_function(
        "() => document.getElementById('train-progress-text').textContent.startsWith('Not trained:')"
    )
    text = page.inner_text("#train-progress-text")
    assert "The server refused it" in text and "work_per_day=100" in text, text
    assert "epochs x samples is 1,800" in text, text
    assert page.evaluate("() => window.gestureTrainer.lastTraining") is None
    assert page.eval_on_selector("#train-progress", "bar => bar.value") == 0
    assert [status for status, _ in permit_answers(publisher)] == [422]


def test_the_engine_refuses_a_permit_smaller_than_the_training(publisher: AppSession) -> None:
    """The page hands the permit to the engine: one cut down to a single epoch (as a tampering
    proxy would) stops fit before any step."""
    page = publisher.page

    def cut_to_one_epoch(route: Route) -> None:
        response = route.fetch()
        body = response.json()
        granted = dataclasses.replace(permits.read(body["permit"]), max_epochs=1)
        body["permit"] = permits.sign(granted, b"not the server's key")
        route.fulfill(response=response, body=json.dumps(body))

    page.route("**/api/training/permits", cut_to_one_epoch)
    try:
        set_field(page, "#epochs", str(EPOCHS))
        page.click("#train")
        page.wait_for_function(
            "() => document.getElementById('train-progress-text').textContent.startsWith('Training failed')"
        )
    finally:
        page.unroute("**/api/training/permits")
    assert "epochs=4 goes past the permit's bound 1" in page.inner_text("#train-progress-text")
    assert page.evaluate("() => window.gestureTrainer.lastTraining") is None


def test_a_granted_permit_trains(publisher: AppSession) -> None:
    page = publisher.page
    page.click("#train")
    page.wait_for_selector("#evaluation:not([hidden])", timeout=TRAIN_TIMEOUT_MS)
    training: dict[str, Any] = page.evaluate("() => window.gestureTrainer.lastTraining")
    assert training["train_count"] == 9 and not training["stopped"]
    status, body = permit_answers(publisher)[-1]
    assert status == 201
    granted = permits.read(json.loads(body)["permit"])
    assert (granted.max_epochs, granted.max_samples) == (EPOCHS, 9)
    assert granted.max_batch_size == training["batch_size"]


def test_publish_in_one_context_and_load_in_another(
    publisher: AppSession, chromium: Browser, permit_server: str, probe: np.ndarray
) -> None:
    page = publisher.page
    page.fill("#publish-name", MODEL_NAME)
    page.fill("#publish-description", "disc, bar and column")
    page.click("#publish")
    page.wait_for_selector("#publish-message:text('Published')")
    tokens = json.loads(
        page.evaluate("() => localStorage.getItem('pib-gesture-trainer/owner-tokens')")
    )
    assert len(tokens) == 1
    publisher.shot("6-published.png")
    published = predicted_label(page, probe)

    reader = new_app_session(chromium, permit_server)
    try:
        reader.open()
        reader.page.fill("#gallery-filter", MODEL_NAME.split()[1])
        reader.page.click("#gallery-show")
        item = reader.page.locator(".gallery-item", has_text=MODEL_NAME)
        item.wait_for()
        assert "3 classes: disc, bar, column" in item.inner_text()
        assert item.locator(".delete-model").count() == 0  # not this browser's model
        item.locator(".load-model").click()
        reader.page.wait_for_selector("#gallery-message:text('Loaded')")
        assert_same_top(predicted_label(reader.page, probe), published)
        assert reader.console_errors == []
    finally:
        reader.context.close()


def test_a_rate_limited_publish_says_when_to_retry(publisher: AppSession) -> None:
    page = publisher.page
    page.click("#publish")
    page.wait_for_selector("#publish-message.error")
    text = page.inner_text("#publish-message")
    assert text.startswith("Could not publish: Too many requests from this browser"), text
    assert "Try again in" in text


def test_the_owner_deletes_their_model_from_the_gallery(publisher: AppSession) -> None:
    page = publisher.page
    page.fill("#gallery-filter", MODEL_NAME.split()[1])
    page.click("#gallery-show")
    item = page.locator(".gallery-item", has_text=MODEL_NAME)
    item.locator(".delete-model").click()
    page.wait_for_selector("#gallery-message:text('Deleted')")
    assert page.locator(".gallery-item").count() == 0
    assert page.evaluate("() => localStorage.getItem('pib-gesture-trainer/owner-tokens')") == "{}"
    # The browser logs the refusals these tests provoke (the 422 permit, the 429 publish).
    provoked = [f"status of {code}" for code in (422, 429)]
    unexpected = [e for e in publisher.console_errors if not any(p in e for p in provoked)]
    assert unexpected == []


def test_error_answers_read_as_sentences(publisher: AppSession) -> None:
    """413 and a 422 of field errors, as the registry words them, through the page's reader."""
    messages = publisher.page.evaluate(
        """async () => {
            const { apiError } = await import('/js/trainer/api-errors.js');
            const answer = (status, detail) => apiError(new Response(JSON.stringify({ detail }),
                { status, headers: { 'Content-Type': 'application/json' } }));
            return [
                (await answer(413, 'request body over 17,114,112 bytes')).message,
                (await answer(422, [{ loc: ['body', 'name'], msg: 'String should have at least 1 character' }])).message,
            ];
        }"""
    )
    assert messages == [
        "The model file is too large for this server: request body over 17,114,112 bytes.",
        "The server refused it: name: String should have at least 1 character.",
    ]
