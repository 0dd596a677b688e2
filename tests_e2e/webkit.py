"""WebKit for the e2e tests: WebKitGTK's MiniBrowser driven by WebKitWebDriver through Selenium,
on an X display of its own, behind the few Page calls the tests make of Playwright's pages.

Playwright's own WebKit is a patched build it downloads, which this network cannot reach; Debian's
webkit2gtk-driver (`make browsers`) gives the WebKitGTK release users run. Each session is an
ephemeral profile: its HTTP cache, IndexedDB and Cache API last until the session ends, so a
second visit is a second navigation in the same session.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from playwright.sync_api import Error as PlaywrightError
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.webkitgtk.options import Options
from selenium.webdriver.webkitgtk.service import Service

from server.snapshot_maker import MINIBROWSER
from server.xvfb import xvfb_display

WEBDRIVER = "/usr/bin/WebKitWebDriver"
# Safari has given workers WebGL2 since 17; WebKitGTK ships that switched off
# (`MiniBrowser --features=help`): the leg runs WebKit as Safari users have it.
SAFARI_FEATURES = ["AllowWebGLInWorkers"]
SCRIPT_TIMEOUT_S = 300
# Runs a page function (Playwright's evaluate form) or expression and answers {value} or {error}.
# The source is spliced into the script WebDriver runs, not eval'ed: the app's CSP forbids eval.
# The value comes back as JSON text, which keeps objects' key order (WebDriver's own does not).
EVALUATE = """const [arg, done] = arguments;
(async () => {
  const target = (SOURCE);
  return typeof target === "function" ? await target(arg) : await target;
})().then((value) => done({ json: JSON.stringify(value ?? null) }), (error) => done({ error: String(error?.message ?? error) }));"""


class WebKitError(PlaywrightError):
    """A page script threw or rejected: raised as Playwright's pages raise it, so EnginePage
    reads WebKit's failures as it reads theirs."""


class WebKitPage:
    """One window of a WebKit session, with the calls of Playwright's Page the tests make."""

    def __init__(self, browser: WebKitBrowser, handle: str) -> None:
        self.browser, self.handle = browser, handle

    def driver(self) -> webdriver.WebKitGTK:
        """The session's driver, switched to this window (for clicks, typing, file inputs)."""
        driver = self.browser.driver
        if driver.current_window_handle != self.handle:
            driver.switch_to.window(self.handle)
        return driver

    def goto(self, url: str) -> None:
        self.driver().get(url)

    def evaluate(self, expression: str, arg: Any = None) -> Any:
        try:
            script = EVALUATE.replace("SOURCE", expression)
            answer = self.driver().execute_async_script(script, arg)
        except WebDriverException as exc:
            raise WebKitError(exc.msg or str(exc)) from None
        if "error" in answer:
            raise WebKitError(answer["error"])
        return json.loads(answer["json"])

    def wait_for_function(self, expression: str, timeout_s: float = SCRIPT_TIMEOUT_S) -> None:
        """Waits until the page function `expression` answers something truthy."""
        poll = f"""async () => {{
            const until = performance.now() + {timeout_s * 1000};
            while (!(await ({expression})())) {{
                if (performance.now() > until) throw new Error("timed out waiting for {expression!s}");
                await new Promise((resolve) => setTimeout(resolve, 50));
            }}
            return true;
        }}"""
        self.evaluate(poll.replace("{expression!s}", expression.replace('"', "'")))

    def close(self) -> None:
        driver = self.driver()
        if len(driver.window_handles) > 1:
            driver.close()
            driver.switch_to.window(driver.window_handles[0])
        else:
            driver.get("about:blank")  # the session's last window stays open
        self.browser.pages.remove(self)


class WebKitBrowser:
    """A WebKitGTK session; new_page() opens a window of it (the first reuses the session's)."""

    def __init__(self, driver: webdriver.WebKitGTK) -> None:
        self.driver = driver
        self.pages: list[WebKitPage] = []

    def new_page(self) -> WebKitPage:
        if self.pages:
            self.driver.switch_to.new_window("window")
        page = WebKitPage(self, self.driver.current_window_handle)
        self.pages.append(page)
        return page


@contextmanager
def launch_webkit(
    features: list[str] | None = None, settings: list[str] | None = None
) -> Iterator[WebKitBrowser]:
    """A WebKitGTK session on a display of its own, with WebKit `features` switched on (default:
    SAFARI_FEATURES) and MiniBrowser's WebKitSettings `settings` ("--enable-webgl=true"...);
    closed afterwards."""
    with xvfb_display() as display:
        options = Options()
        options.binary_location = str(MINIBROWSER)
        options.add_argument("--automation")
        chosen = SAFARI_FEATURES if features is None else features
        if chosen:
            options.add_argument(f"--features={','.join(chosen)}")
        for setting in settings or []:
            options.add_argument(setting)
        service = Service(WEBDRIVER, env={**os.environ, "DISPLAY": display})
        driver = webdriver.WebKitGTK(options=options, service=service)
        try:
            driver.set_script_timeout(SCRIPT_TIMEOUT_S)
            yield WebKitBrowser(driver)
        finally:
            driver.quit()
