"""The pages run under the server's Content-Security-Policy: the engine boots, its GPU bridges
(imported from blob: URLs) start, and the browser reports no violation on the page or in the
console, in Chromium and Firefox."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Browser

from tests_e2e.conftest import BOOT_TIMEOUT_MS

# Registered before any page script runs; violations in the engine's worker reach the console.
RECORD_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__cspViolations.push(`${event.violatedDirective} ${event.blockedURI}`);
});
"""


@pytest.mark.parametrize(
    ("browser_kind", "backend"),
    [("chromium", "webgpu"), ("chromium", "webgl2"), ("firefox", "webgl2")],
)
def test_engine_page_runs_under_the_csp(
    request: pytest.FixtureRequest, server_url: str, browser_kind: str, backend: str
) -> None:
    browser: Browser = request.getfixturevalue(browser_kind)
    page = browser.new_page()
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    page.add_init_script(RECORD_VIOLATIONS)
    response = page.goto(f"{server_url}/console?backend={backend}")
    assert response is not None
    csp = response.headers["content-security-policy"]
    assert "'unsafe-inline'" not in csp and "'unsafe-eval'" not in csp
    page.wait_for_function("() => window.pib !== undefined")
    page.evaluate(
        f"() => Promise.race([window.pib.ready, new Promise((_, reject) => setTimeout(() => reject(new Error('pib.ready timed out')), {BOOT_TIMEOUT_MS}))])"
    )
    result: Any = page.evaluate(
        "() => window.pib.runPython('x = pib.tensor([[1.0, 2.0], [3.0, 4.0]])\\n"
        "[pib.get_backend(), (await (x @ x).numpy()).tolist()]')"
    )
    assert result == [backend, [[7.0, 10.0], [15.0, 22.0]]]
    page.click("#developer summary")  # the panel's script is a file now, not inline
    assert page.locator("#developer button").is_visible()
    violations = page.evaluate("() => window.__cspViolations")
    reported = [line for line in console if "Content Security Policy" in line or "CSP" in line]
    assert violations == [] and reported == [], (violations, reported)
    page.close()
