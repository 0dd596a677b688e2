"""Sphinx configuration: the API reference is built from the engine's docstrings (`make docs`)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

project = "py_in_browser"
author = "py_in_browser contributors"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon"]
html_theme = "furo"
html_title = "py_in_browser API reference"
exclude_patterns: list[str] = []

autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}
# A subclass's override without a docstring of its own (Dense.call, History.on_epoch_end) is
# described once, on its base class, instead of being repeated on every subclass.
autodoc_inherit_docstrings = False
autodoc_typehints = "signature"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
