"""A thin driver for a page hosting the engine: runPython from tests, with readable failures."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page


class PythonError(AssertionError):
    """The page's runPython rejected; the message is the Python traceback text."""


@dataclass
class EnginePage:
    page: Page
    console: list[str] = field(default_factory=list)

    def run(self, code: str) -> Any:
        """Run Python in the engine's worker and return the JSON-converted last expression."""
        try:
            return self.page.evaluate("(code) => window.pib.runPython(code)", code)
        except PlaywrightError as exc:
            raise PythonError(exc.message) from None

    def js(self, expression: str, arg: Any = None) -> Any:
        return self.page.evaluate(expression, arg)

    def describe(self) -> str:
        return json.dumps({"console": self.console[-20:]}, indent=1)
