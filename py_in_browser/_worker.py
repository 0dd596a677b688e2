"""Glue between the engine's Web Worker and Python: boots the engine and runs page code as JSON."""

from __future__ import annotations

import json
import math
import sys
import traceback
from typing import Any

# One namespace for every runPython call, so a test can define a model in one call and use it in
# the next; `pib` and `np` are there already, as in the console.
_namespace: dict[str, Any] = {"__name__": "__main__"}
PAGE_CODE_FILENAME = "<runPython>"


def python_version() -> str:
    return ".".join(map(str, sys.version_info[:3]))


def import_engine() -> None:
    """Imports the engine into the page's namespace: the worker's "engine" start-up stage."""
    import numpy as np

    import py_in_browser as pib

    _namespace.update(pib=pib, np=np)


async def boot(backend: str | None, kept_verdicts: str | None) -> str:
    """Chooses and starts the backend (the "init" stage), once import_engine has run.
    kept_verdicts: what selection learned on earlier visits (backends/verdicts.py; "" when
    nothing was kept yet), or None where the worker cannot keep it."""
    from py_in_browser.backends import verdicts

    if kept_verdicts is not None:
        verdicts.load(kept_verdicts)
    chosen: str = await _namespace["pib"].init(backend=backend)
    return chosen


def verdicts_to_keep() -> str:
    """What backend selection learned, for the worker to keep until the next visit."""
    from py_in_browser.backends import verdicts

    return verdicts.dump()


def after_ready() -> None:
    """The worker has posted ready: the backend starts what init left for later (compiling
    kernels ahead of the first step), now that it no longer delays ready."""
    _namespace["pib"].runtime.current_backend().start_background()


def set_hidden(hidden: bool) -> None:
    """The page was hidden or shown (visibilitychange): a running fit pauses while hidden."""
    from py_in_browser import visibility

    visibility.set_hidden(hidden)


async def run_json(code: str) -> str:
    """Run `code` (top-level await allowed); JSON of {"ok", "value"} or {"ok": false, "error"}.

    Each call is its own task in the worker's event loop, so calls overlap like the page's promises.
    The error is the traceback text from the page code's first frame on, without this glue's frames.
    """
    from pyodide.code import eval_code_async  # only exists under Pyodide

    try:
        value = await eval_code_async(code, globals=_namespace, filename=PAGE_CODE_FILENAME)
        return json.dumps({"ok": True, "value": to_jsonable(value)}, allow_nan=False)
    except BaseException as exc:  # the page gets every failure, KeyboardInterrupt included
        return json.dumps({"ok": False, "error": page_traceback(exc)})


def page_traceback(exc: BaseException) -> str:
    """The traceback starting at the page's code, so users see their own lines first."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != PAGE_CODE_FILENAME:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))


def to_jsonable(value: Any) -> Any:
    """Plain JSON data from numpy arrays and scalars, tuples, dicts; non-finite floats as strings."""
    if value is None or isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(key): to_jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(item) for item in value]
    if hasattr(value, "tolist") and hasattr(value, "dtype"):  # numpy arrays and scalars
        return to_jsonable(value.tolist())
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        raise TypeError(
            f"runPython cannot return a {type(value).__name__} directly: read it back with "
            "`await t.numpy()` and return that"
        )
    return repr(value)
