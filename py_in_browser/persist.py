"""Checkpoints that outlive the page: kept in the worker's IndexedDB under a key (store.js).

fit(on_hidden="pause") writes one when the tab is hidden, and fit(resume="auto") reads it after a
reload. Outside the browser there is no IndexedDB: nothing is stored and nothing is found.
"""

from __future__ import annotations

from typing import Any

from . import _js

_bridge: dict[str, Any] = {}


async def _store() -> Any:
    if "module" not in _bridge:
        _bridge["module"] = await _js.load_bridge(__package__ or "py_in_browser", "store.js")
    return _bridge["module"]


async def save(key: str, blob: bytes) -> bool:
    """Stores `blob` under `key`; False outside the browser (nowhere to keep it)."""
    if not _js.in_browser():
        return False
    await (await _store()).put(key, blob)
    return True


async def load(key: str) -> bytes | None:
    """The blob stored under `key`, or None."""
    if not _js.in_browser():
        return None
    found = await (await _store()).get(key)
    return None if found is None else bytes(found.to_bytes())


async def remove(key: str) -> None:
    """Forgets what is stored under `key` (a fit that finished needs no resume)."""
    if _js.in_browser():
        await (await _store()).remove(key)
