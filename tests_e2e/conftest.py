"""Fixtures for real-browser tests: one dev server per session, browsers, and ready engine pages."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, Playwright, sync_playwright

from server.background import background_dev_server
from tests_e2e.browsers import launch_chromium, launch_firefox, xvfb_display
from tests_e2e.engine_page import EnginePage
from tests_e2e.webkit import WebKitBrowser, launch_webkit

BOOT_TIMEOUT_MS = 120_000
READY_OR_TIMEOUT = f"() => Promise.race([window.pib.ready.then(() => null), new Promise((_, reject) => setTimeout(() => reject(new Error('pib.ready timed out')), {BOOT_TIMEOUT_MS}))])"


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    with background_dev_server() as url:
        yield url


@pytest.fixture(scope="session")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="session")
def chromium(playwright: Playwright) -> Iterator[Browser]:
    browser = launch_chromium(playwright)
    yield browser
    browser.close()


@pytest.fixture(scope="session")
def firefox(playwright: Playwright) -> Iterator[Browser]:
    with xvfb_display() as display:
        browser = launch_firefox(playwright, display)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def webkit() -> Iterator[WebKitBrowser]:
    """WebKitGTK's MiniBrowser through WebKitWebDriver (tests_e2e/webkit.py)."""
    with launch_webkit() as browser:
        yield browser


@pytest.fixture(scope="module")
def browser_kind() -> str:
    """Modules that run in several browsers override this with a parametrized fixture."""
    return "chromium"


@pytest.fixture(scope="module")
def page_query() -> str:
    """The query string of the engine page; modules override it (e.g. "?backend=cpu")."""
    return ""


def open_engine_page(
    browser: Browser | WebKitBrowser, url: str, init_script: str | None = None
) -> EnginePage:
    """`init_script` runs in the page before its own scripts (Playwright's add_init_script; not
    in WebKit, whose WebDriver has no such call)."""
    if isinstance(browser, WebKitBrowser):
        if init_script is not None:
            raise ValueError("WebKit pages take no init script")
        engine = EnginePage(browser.new_page())  # type: ignore[arg-type]
        engine.page.goto(url)
        engine.page.wait_for_function("() => window.pib !== undefined")
        engine.page.evaluate(READY_OR_TIMEOUT)
        return engine
    page: Page = browser.new_page()
    if init_script is not None:
        page.add_init_script(init_script)
    engine = EnginePage(page)
    page.on("console", lambda message: engine.console.append(message.text))
    page.on("pageerror", lambda error: engine.console.append(f"pageerror: {error}"))
    page.goto(url)
    page.wait_for_function("() => window.pib !== undefined")
    page.evaluate(READY_OR_TIMEOUT)
    return engine


@pytest.fixture(scope="module")
def engine_page(
    request: pytest.FixtureRequest, browser_kind: str, page_query: str, server_url: str
) -> Iterator[EnginePage]:
    """A page whose window.pib.ready resolved, shared by the tests of one module."""
    browser: Any = request.getfixturevalue(browser_kind)
    engine = open_engine_page(browser, f"{server_url}/console{page_query}")
    yield engine
    engine.page.close()
