"""The API reference's promises: every public name has a docstring with a runnable example, the
examples really run, and every name the package exports appears in the reference.

The public surface is read from docs/*.rst, the pages `make docs` builds: each module named by
`automodule` contributes what Sphinx's autodoc lists for it (its `__all__`, else the functions and
classes defined in it without a leading underscore), and `autofunction` / `autoexception` add
single objects. A class's own public methods and properties need a docstring too (an override
without one is described on its base class); Sequential's, Tensor's and Variable's methods need
an example each.

Examples are written as in the console page, where `pib` and `np` are imported and top-level
`await` works (also `python -m asyncio`): an example line that awaits runs on an event loop.
"""

from __future__ import annotations

import ast
import asyncio
import doctest
import importlib
import inspect
import re
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import py_in_browser as pib

DOCS = Path(__file__).resolve().parent.parent / "docs"
METHODS_WITH_EXAMPLES = (pib.Sequential, pib.Tensor, pib.Variable)
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _pages() -> str:
    return "\n".join(page.read_text() for page in sorted(DOCS.glob("*.rst")))


def _directives(kind: str) -> list[str]:
    return re.findall(rf"^\.\. {kind}:: (\S+)$", _pages(), re.MULTILINE)


def _member_lists() -> dict[str, list[str]]:
    """automodule directives that name their members (`:members: a, b`) instead of all."""
    found = re.findall(r"^\.\. automodule:: (\S+)\n   :members: (.+)$", _pages(), re.MULTILINE)
    return {module: [n.strip() for n in names.split(",")] for module, names in found}


def _resolve(dotted: str) -> Any:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _module_members(module: types.ModuleType) -> list[tuple[str, Any]]:
    """What autodoc's automodule lists: the names given with :members:, else `__all__`, else
    the classes and functions defined in the module."""
    names = _member_lists().get(module.__name__, getattr(module, "__all__", None))
    if names is None:
        names = [
            name
            for name, obj in vars(module).items()
            if not name.startswith("_")
            and (inspect.isfunction(obj) or inspect.isclass(obj))
            and obj.__module__ == module.__name__
        ]
    seen: set[int] = set()
    members = []
    for name in names:
        obj = getattr(module, name)
        if id(obj) not in seen:  # an alias (MaxPooling2D = MaxPool2D) is the same object
            seen.add(id(obj))
            members.append((f"{module.__name__}.{name}", obj))
    return members


def _documented_modules() -> list[types.ModuleType]:
    return [importlib.import_module(name) for name in _directives("automodule")]


def public_objects() -> list[tuple[str, Any]]:
    """Every function and class the reference documents, with its dotted name."""
    found = [m for module in _documented_modules() for m in _module_members(module)]
    for kind in ("autofunction", "autoclass", "autoexception"):
        found += [(dotted, _resolve(dotted)) for dotted in _directives(kind)]
    return found


def _overrides_documented(cls: type, name: str) -> bool:
    return any(getattr(getattr(base, name, None), "__doc__", None) for base in cls.__mro__[1:])


def public_members(cls: type) -> list[tuple[str, Any]]:
    """A class's own public methods and properties, as autodoc lists them under the class."""
    members = []
    for name, attr in vars(cls).items():
        if name.startswith("_") or not (
            inspect.isfunction(attr) or isinstance(attr, property | staticmethod | classmethod)
        ):
            continue
        if attr.__doc__ is None and _overrides_documented(cls, name):
            continue
        members.append((f"{cls.__module__}.{cls.__qualname__}.{name}", attr))
    return members


def _needs_example(owner: type | None, member: Any) -> bool:
    if owner is None:
        return True
    return owner in METHODS_WITH_EXAMPLES and not isinstance(member, property)


def documented_items() -> list[tuple[str, Any, bool]]:
    """(dotted name, object, whether its docstring must carry an example)."""
    items = []
    for dotted, obj in public_objects():
        items.append((dotted, obj, True))
        if inspect.isclass(obj):
            items += [(n, m, _needs_example(obj, m)) for n, m in public_members(obj)]
    return items


ITEMS = documented_items()


def test_every_exported_name_is_in_the_reference() -> None:
    modules = {id(m) for m in _documented_modules()}
    objects = {id(obj) for _, obj in public_objects()}
    missing = []
    for name in pib.__all__:
        obj = getattr(pib, name)
        if id(obj) not in (modules if inspect.ismodule(obj) else objects):
            missing.append(name)
    assert not missing, f"exported but not in docs/*.rst: {missing}"
    assert len(ITEMS) > 150  # the surface really was found


@pytest.mark.parametrize(("dotted", "obj", "example"), ITEMS, ids=[i[0] for i in ITEMS])
def test_docstring_states_its_rule(dotted: str, obj: Any, example: bool) -> None:
    doc = inspect.cleandoc(obj.__doc__ or "")
    assert len(doc) > 20, f"{dotted}: no docstring saying what it does"
    if example:
        assert ">>> " in doc, f"{dotted}: no example"


def _awaiting_runner(globs: dict[str, Any], loop: asyncio.AbstractEventLoop) -> Callable:
    """Runs one example's source with top-level await allowed, echoing its value like the REPL."""

    def run(source: str) -> None:
        code = compile(source, "<example>", "single", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(code, globs)
        if inspect.iscoroutine(result):
            loop.run_until_complete(result)

    return run


EXAMPLES = [
    test
    for dotted, obj, _ in ITEMS
    for test in doctest.DocTestFinder(recurse=False).find(
        obj.fget if isinstance(obj, property) else obj, dotted, globs={}
    )
    if test.examples
]


def test_examples_were_collected() -> None:
    assert len(EXAMPLES) > 100


@pytest.mark.parametrize("test", EXAMPLES, ids=[t.name for t in EXAMPLES])
def test_example_runs(test: doctest.DocTest) -> None:
    loop = asyncio.new_event_loop()
    test.globs.update(pib=pib, np=np, __run_awaiting=_awaiting_runner(test.globs, loop))
    for example in test.examples:
        if re.search(r"\bawait\b", example.source):
            example.source = f"__run_awaiting({example.source!r})\n"
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report: list[str] = []
    try:
        result = runner.run(test, out=report.append)
    finally:
        loop.close()
    assert result.failed == 0, "".join(report)
