"""The WebGPU backend package: registers "webgpu" as the most preferred backend where it exists."""

from __future__ import annotations

from .. import register_backend
from .backend import NAME, WebGPUBackend, webgpu_available
from .kernels import all_primitive_names

register_backend(
    NAME, WebGPUBackend, priority=100, available=webgpu_available, primitives=all_primitive_names
)

__all__ = ["WebGPUBackend"]
