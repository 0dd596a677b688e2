"""The WebGPU backend package: registers "webgpu" as the most preferred backend where it exists."""

from __future__ import annotations

from ... import _js
from .. import register_backend
from .backend import WebGPUBackend, webgpu_available
from .kernels import NAME

register_backend(
    NAME,
    WebGPUBackend,
    priority=100,
    available=webgpu_available,
    why_unavailable=lambda: _js.gpu_probe_reason(NAME),
)

__all__ = ["WebGPUBackend"]
