"""Hidden tabs (issue 11, item 4): fit pauses when its page is hidden, after checkpointing to
IndexedDB, resumes when it is shown, and after a reload resumes from IndexedDB; both end with the
weights of an uninterrupted run.

Playwright keeps its pages visible, so in Chromium this module starts the browser itself with a
DevTools port and joins it with connect_over_cdp(no_defaults=True): there, bringing another page
to the front really hides the engine's page (document.visibilityState "hidden", a real
visibilitychange). In Firefox (WebDriver BiDi, headful under Xvfb) every Playwright page is a
window of its own, and windows stay visible side by side (Xvfb has no window manager to minimise
or cover them); the other page is therefore a tab the engine's page opens with window.open, in
its own window: bringing that tab to the front (browsingContext.activate) hides the engine's tab.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from playwright.sync_api import Browser, Page, Playwright

from tests_e2e.browsers import CHROMIUM, CHROMIUM_ARGS
from tests_e2e.conftest import BOOT_TIMEOUT_MS
from tests_e2e.engine_page import EnginePage

EPOCHS = 30  # 360 steps: long enough to hide the page while it trains
EXACT = 1e-6
RUNS = "from py_in_browser.testing import recovery_runs\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_until(check: Callable[[], Any], what: str, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def cdp_browser(playwright: Playwright) -> Iterator[Browser]:
    port = _free_port()
    with tempfile.TemporaryDirectory() as profile:
        process = subprocess.Popen(
            [
                CHROMIUM,
                *CHROMIUM_ARGS,
                "--headless",
                f"--remote-debugging-port={port}",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: ended as a whole below
        )
        try:
            endpoint = f"http://127.0.0.1:{port}"

            def listening() -> bool:
                try:
                    with urllib.request.urlopen(f"{endpoint}/json/version", timeout=1) as reply:
                        return bool(json.load(reply))
                except OSError:
                    return False

            _wait_until(listening, "Chromium's DevTools port", 30)
            browser = playwright.chromium.connect_over_cdp(endpoint, no_defaults=True)
            yield browser
            browser.close()
        finally:
            # The whole group: Chromium's storage and GPU processes outlive the browser process
            # for a moment and were still writing the profile (IndexedDB) when it was removed.
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(10)
            with contextlib.suppress(ProcessLookupError):  # none left
                os.killpg(process.pid, signal.SIGKILL)


def _engine(page: Page) -> EnginePage:
    engine = EnginePage(page)
    page.on("console", lambda message: engine.console.append(message.text))
    page.wait_for_function("() => window.pib !== undefined")
    page.evaluate("() => window.pib.ready.then(() => null)")
    return engine


@pytest.fixture(
    scope="module",
    params=["chromium", pytest.param("firefox", marks=pytest.mark.firefox)],
)
def pages(request: pytest.FixtureRequest, server_url: str) -> Iterator[tuple[EnginePage, Page]]:
    """The engine's page (WebGL2) and another page of the same window that can hide it."""
    if request.param == "chromium":
        context = request.getfixturevalue("cdp_browser").contexts[0]
    else:
        context = request.getfixturevalue("firefox").new_context()
    page = context.new_page()
    page.set_default_timeout(BOOT_TIMEOUT_MS)
    page.goto(f"{server_url}/?backend=webgl2")
    engine = _engine(page)
    if request.param == "chromium":
        other = context.new_page()
    else:
        with context.expect_page() as opened:
            page.evaluate("(url) => { window.open(url, '_blank'); }", f"{server_url}/favicon.svg")
        other = opened.value
    page.bring_to_front()
    _wait_until(lambda: _visibility(engine) == "visible", "the engine page to be shown")
    yield engine, other
    other.close()
    page.close()
    if request.param == "firefox":
        context.close()


def _visibility(engine: EnginePage) -> str:
    return str(engine.js("() => document.visibilityState"))


def _events(engine: EnginePage) -> list[str]:
    return [e["type"] for e in engine.run("pib.runtime_events()")]


@pytest.fixture(scope="module")
def uninterrupted(pages: tuple[EnginePage, Page]) -> dict[str, Any]:
    engine, _ = pages
    engine.run(RUNS + f"recovery_runs.start_fit('reference', {EPOCHS})")
    return engine.run(RUNS + "await recovery_runs.finish_fit('reference')")


def _hide_while_training(engine: EnginePage, other: Page, name: str) -> None:
    pauses = _events(engine).count("paused")
    engine.run(RUNS + f"recovery_runs.start_fit({name!r}, {EPOCHS})")
    _wait_until(lambda: engine.run(RUNS + f"recovery_runs.progress[{name!r}]") >= 5, "5 steps")
    other.bring_to_front()
    _wait_until(lambda: _visibility(engine) == "hidden", "the engine page to be hidden")
    _wait_until(lambda: _events(engine).count("paused") > pauses, "fit to pause")


def assert_same_weights(got: dict[str, Any], expected: dict[str, Any]) -> None:
    for g, e in zip(got["weights"], expected["weights"], strict=True):
        np.testing.assert_allclose(np.array(g), np.array(e), rtol=0, atol=EXACT)


def test_a_hidden_page_pauses_training_and_resumes_when_shown(
    pages: tuple[EnginePage, Page], uninterrupted: dict[str, Any]
) -> None:
    engine, other = pages
    _hide_while_training(engine, other, "hidden")
    paused_at = engine.run(RUNS + "recovery_runs.progress['hidden']")
    time.sleep(1.0)
    assert engine.run(RUNS + "recovery_runs.progress['hidden']") == paused_at  # not one step more
    assert paused_at < EPOCHS * 12
    engine.page.bring_to_front()
    got = engine.run(RUNS + "await recovery_runs.finish_fit('hidden')")
    kinds = [e["type"] for e in got["events"]]
    assert kinds == ["paused", "resumed"], got["events"]
    paused = got["events"][0]
    assert paused["stored"] is True and paused["step"] == paused_at
    assert_same_weights(got, uninterrupted)
    # The finished fit removed its IndexedDB checkpoint: nothing to resume from any more.
    assert engine.run(
        "from py_in_browser import persist\n(await persist.load('fit/sequential')) is None"
    )


def test_after_a_reload_training_resumes_from_the_indexeddb_checkpoint(
    pages: tuple[EnginePage, Page], uninterrupted: dict[str, Any]
) -> None:
    engine, other = pages
    _hide_while_training(engine, other, "reload")
    paused_at = engine.run(RUNS + "recovery_runs.progress['reload']")
    engine.page.reload()
    engine.page.bring_to_front()
    engine = _engine(engine.page)
    engine.run(RUNS + f"recovery_runs.start_fit('resumed', {EPOCHS}, resume='auto')")
    got = engine.run(RUNS + "await recovery_runs.finish_fit('resumed')")
    resumed_steps = engine.run(RUNS + "recovery_runs.progress['resumed']")
    print(f"paused after {paused_at} steps; after the reload {resumed_steps} more")
    assert paused_at + resumed_steps == EPOCHS * 12  # no step run twice, none skipped
    assert_same_weights(got, uninterrupted)
