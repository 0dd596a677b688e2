"""One benchmark page in the shared Chromium: our engine on one backend next to TF.js, with timeouts."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from playwright.async_api import Browser, BrowserContext, Page
from playwright.async_api import Error as PlaywrightError

BOOT_TIMEOUT_S = 240.0
# The longest wait for our engine's first-visit work after ready (settle_ours).
SETTLE_TIMEOUT_S = 60.0
# True while that work runs: pib.startup says "storing" until the worker reports it done.
STORING = (
    "() => [window.pib.startup?.snapshot_store, window.pib.startup?.bytecode_store]"
    ".includes('storing')"
)


class CallFailed(Exception):
    """A side threw (a Python traceback or a JavaScript error); the message says what."""


class CallTimeout(Exception):
    """A side did not answer in time; the page may be stuck and has to be reopened."""


def first_lines(message: str, limit: int = 300) -> str:
    """The gist of an error for a table cell: a Python traceback's last line, a JS error's first."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return message
    gist = lines[-1] if any(line.startswith("Traceback") for line in lines) else lines[0]
    gist = gist.removeprefix("Page.evaluate: ").removeprefix("Error: ")
    return gist if len(gist) <= limit else gist[: limit - 1] + "…"


class BenchPage:
    """/bench/?backend=<ours> in its own browser context, so every page starts with a cold cache."""

    def __init__(self, browser: Browser, base_url: str, our_backend: str) -> None:
        self.browser = browser
        self.url = f"{base_url}/bench/?backend={our_backend}"
        self.context: BrowserContext | None = None
        self.page: Page | None = None
        self.console: list[str] = []
        self.generation = 0  # counts (re)loads: a reload resets TF.js's backend and our engine
        self.ours_start: dict[str, Any] = {}

    async def open(self) -> dict[str, Any]:
        """Loads the page; returns our engine's start-up outcome ({ok, ms, error, ...})."""
        await self.close()
        self.generation += 1
        self.context = await self.browser.new_context()
        self.page = await self.context.new_page()
        self.page.on("console", lambda message: self.console.append(message.text))
        self.page.on("pageerror", lambda error: self.console.append(f"pageerror: {error}"))
        try:
            await self.page.goto(self.url)
            await self.page.wait_for_function("() => window.bench !== undefined", timeout=60_000)
        except PlaywrightError as exc:
            self.ours_start = {"ok": False, "error": f"the bench page did not load: {exc.message}"}
            return self.ours_start
        try:
            self.ours_start = await self.evaluate(
                "() => window.bench.oursStart()", None, BOOT_TIMEOUT_S
            )
        except CallTimeout:
            self.ours_start = {"ok": False, "error": f"not ready in {BOOT_TIMEOUT_S:.0f} s"}
        return self.ours_start

    async def evaluate(self, expression: str, arg: Any, timeout_s: float) -> Any:
        assert self.page is not None, "open the page first"
        try:
            return await asyncio.wait_for(self.page.evaluate(expression, arg), timeout_s)
        except TimeoutError:
            raise CallTimeout(f"no answer in {timeout_s:.0f} s") from None
        except PlaywrightError as exc:
            raise CallFailed(first_lines(exc.message)) from None

    async def call(self, side: str, method: str, args: dict[str, Any], timeout_s: float) -> Any:
        """window.bench.ours|theirs(method, args): the same method names on both sides."""
        return await self.evaluate(
            "([side, method, args]) => window.bench[side](method, args)",
            [side, method, args],
            timeout_s,
        )

    async def settle_ours(self) -> float:
        """Seconds spent waiting for our engine's first-visit work after ready to end (keeping
        the runtime snapshot, priming the code cache and storing bytecode for the next visit).
        It starts once the engine has been idle for 3 s, runs once per browser profile, and
        takes the CPU from whatever runs meanwhile: timed steps would partly measure it. After
        SETTLE_TIMEOUT_S the rows are measured anyway."""
        started = time.monotonic()
        try:
            while time.monotonic() - started < SETTLE_TIMEOUT_S:
                if not await self.evaluate(STORING, None, 30):
                    break
                await asyncio.sleep(0.1)
        except (CallFailed, CallTimeout):
            pass  # the page's trouble shows in the next call
        return time.monotonic() - started

    async def info(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.evaluate("() => window.bench.info()", None, 60)
        return result

    async def show(self, results: dict[str, Any], status: str) -> None:
        """The page doubles as the live report; a rendering problem must not stop the run."""
        try:
            await self.evaluate(
                "([results, status]) => { window.bench.render(results); window.bench.status(status); }",
                [results, status],
                30,
            )
        except (CallFailed, CallTimeout) as exc:
            print(f"  (live report not updated: {exc})")

    async def close(self) -> None:
        if self.context is not None:
            await self.context.close()
        self.context = self.page = None
