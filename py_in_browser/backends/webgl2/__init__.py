"""WebGL2 backend: GLSL ES 3.00 fragment kernels on float textures in the engine's worker."""

from __future__ import annotations

from ... import _js
from .. import register_backend
from .backend import WebGL2Backend
from .kernels import NAME


def available() -> bool:
    """In a browser whose worker can make a WebGL2 context on an OffscreenCanvas."""
    return _js.in_browser() and _js.webgl2_available()


register_backend(
    NAME,
    WebGL2Backend,
    priority=50,
    available=available,
    why_unavailable=lambda: _js.gpu_probe_reason(NAME),
)

__all__ = ["WebGL2Backend"]
