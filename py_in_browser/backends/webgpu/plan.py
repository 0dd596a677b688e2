"""What one primitive compiles to on WebGPU: the contract between the WGSL kernel generators
(kernels.py, tested natively with wgpu-py) and the runtime that records and submits them.

A primitive becomes a KernelPlan: one or more dispatches over the op's input buffers, its output
buffer and optional scratch buffers. Every dispatch is a complete WGSL module (entry point `main`)
whose bind group 0 holds, in order, the buffers its `bindings` name (inputs read-only storage,
output and scratch read_write storage) and, when `params` is not empty, a uniform buffer with
those bytes at the next binding. Element types: float32 -> f32, int32 -> i32, bool -> u32 (0/1),
4 bytes per element, buffers at least 4 bytes. Equal `key`s promise equal `wgsl`, so the runtime
caches pipelines (and, for a replayed step, bind groups) by key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

BufferRole = Literal["input", "output", "scratch"]


@dataclass(frozen=True)
class BufferRef:
    """A buffer a dispatch binds: the op's input `index`, its output, or scratch slot `index`."""

    role: BufferRole
    index: int = 0


@dataclass(frozen=True)
class Dispatch:
    key: str
    wgsl: str
    bindings: tuple[BufferRef, ...]
    params: bytes
    workgroups: tuple[int, int, int]


@dataclass(frozen=True)
class KernelPlan:
    dispatches: tuple[Dispatch, ...]
    scratch_bytes: tuple[int, ...] = ()


@dataclass(frozen=True)
class DeviceLimits:
    """The adapter limits kernels must respect (WebGPU defaults unless the device says more)."""

    max_workgroups_per_dimension: int = 65535
    max_storage_buffer_binding_size: int = 134217728
    max_workgroup_storage_size: int = 16384
    max_invocations_per_workgroup: int = 256
    # Storage buffers one kernel may bind (WebGPU's default 8; SwiftShader in Chromium has 10):
    # bounds how many fused calls one kernel runs (fused_runs.py).
    max_storage_buffers: int = 8
    # 0: the GPU schedules every workgroup of a grid itself. n > 0: a software adapter running
    # workgroups on CPU threads, where each workgroup that synchronizes (the GEMMs' shared-memory
    # tiles) costs a fiber set-up: those kernels then launch at most n workgroups, each looping
    # over tiles (measured on SwiftShader, 2 cores: 784x64 @ 64x128 from 32-58 ms to 12-20 ms).
    resident_workgroups: int = 0
