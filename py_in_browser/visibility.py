"""Whether the page is hidden, as the engine's worker learns it: the page's main thread sees each
visibilitychange and tells the worker (web/js/pib-client.js -> engine-worker.js -> set_hidden).
fit pauses while hidden (recovery.py); CPython never hides."""

from __future__ import annotations

import asyncio

POLL_S = 0.05  # how often a paused fit looks whether the page is visible again

_state = {"hidden": False}


def set_hidden(hidden: bool) -> None:
    """The worker's message handler calls this on every visibilitychange of the page."""
    _state["hidden"] = bool(hidden)


def is_hidden() -> bool:
    return _state["hidden"]


async def wait_visible() -> None:
    """Returns once the page is visible (at once if it is)."""
    while _state["hidden"]:
        await asyncio.sleep(POLL_S)
