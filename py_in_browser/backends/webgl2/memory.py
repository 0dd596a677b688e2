"""Tensor memory on WebGL2: textures for handles, uploads, read-backs, and freeing that respects
textures shared by views and textures a recorded step still names."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import dtypes, wire
from .draw_queue import DrawQueue
from .epilogues import Blocked, Product, Summed
from .texture_layout import choose_layout
from .textures import Handle, Texture, TexturePool


class TextureMemory:
    """Allocates, fills, reads and frees the textures behind handles."""

    def __init__(self, queue: DrawQueue) -> None:
        self.queue = queue
        self.pool = TexturePool(queue.commands)
        self.max_side = 0  # what start() learns from the context (and pib.init's limits)
        self.half = False
        self.compensated = False
        self._freed_while_recording: list[Texture] = []
        self._retained: dict[int, int] = {}  # texture id -> recordings naming it
        self._deferred: dict[int, Texture] = {}  # freed, but a recording still names it
        self._shared: dict[int, int] = {}  # texture id -> handles on it beyond the first
        # Interleave outputs (split-K sums, small products) a bias, relu or pool may still be
        # fused into (epilogues.py), and the block targets (partial sums) each keeps until it is freed.
        self.blocked: dict[int, Blocked | Summed | Product] = {}
        self._attached: dict[int, list[Handle]] = {}
        # Zero-padded copies of a texture's tensor (rewrites.pad_matrix), kept until it is freed
        # or a replay may rewrite it: a layer's weight or gradient padded for one product is
        # padded once for the others of the step. Texture id -> {(generation, shape, repeat,
        # pads): padded handle}.
        self.padded: dict[int, dict[tuple[Any, ...], Handle]] = {}
        queue.is_free = self.pool.is_free
        queue.physical = self.pool.physical

    def allocate(self, shape: tuple[int, ...], dtype: str, with_lo: bool) -> Handle:
        layout = choose_layout(shape, self.max_side)  # refuses oversized tensors before drawing
        lo = self.pool.acquire(layout, self.half) if with_lo else None
        return Handle(self.pool.acquire(layout, self.half), lo, shape, dtype)

    def _stage(self, texture: Texture, values: np.ndarray) -> None:
        layout = texture.layout
        padded = np.zeros(layout.texels * layout.channels, dtype=np.float32)
        padded[: values.size] = values.reshape(-1)
        self.queue.stage(texture.id, padded)

    def stage_array(self, handle: Handle, array: np.ndarray) -> None:
        """Queues `array` into handle's texture(s)."""
        values = np.asarray(array, dtype=np.float32)
        if handle.lo is None:
            self._stage(handle.texture, values)
        else:
            # Compensated float16: the half-rounded value and exactly what rounding lost.
            hi = values.astype(np.float16).astype(np.float32)
            self._stage(handle.texture, hi)
            self._stage(handle.lo, dtypes.rounding_loss(values, hi))

    def upload(self, array: np.ndarray) -> Handle:
        dtypes.check_upload(array, self.half)
        is_float = array.dtype.kind == "f"
        handle = self.allocate(
            tuple(array.shape), _dtype_name(array), self.compensated and is_float
        )
        self.stage_array(handle, array)
        self.queue.maybe_flush()
        return handle

    def share(self, source: Handle) -> None:
        """Counts one more handle on source's textures (a view), so free() pools them once."""
        for texture in (source.texture, source.lo):
            if texture is not None:
                self._shared[texture.id] = self._shared.get(texture.id, 0) + 1

    def attach(
        self, handle: Handle, targets: list[Handle], record: Blocked | Summed | Product
    ) -> None:
        """Keeps `targets` allocated while handle's texture is, and remembers how it was drawn."""
        self.blocked[handle.texture.id] = record
        # A copy: handles sharing targets (an interleave's input and output) share no list that
        # keep_with then grows.
        self._attached[handle.texture.id] = list(targets)

    def keep_with(self, source: Handle, handle: Handle) -> None:
        """Frees `handle` when source's texture is freed."""
        self._attached.setdefault(source.texture.id, []).append(handle)

    def free(self, handle: Handle) -> None:
        """Pools the handle's textures, except those a recording may name: while recording they
        wait for finish_recording, and one a live recording names waits for drop_recording (a
        replay writes and reads it again, so no other tensor may get it meanwhile)."""
        for texture in (handle.texture, handle.lo):
            if texture is None:
                continue
            others = self._shared.get(texture.id, 0)  # other handles on this texture
            if others:
                if others == 1:
                    del self._shared[texture.id]
                else:
                    self._shared[texture.id] = others - 1
                continue
            self.blocked.pop(texture.id, None)
            self.padded.pop(texture.id, None)
            for target in self._attached.pop(texture.id, []):
                self.free(target)
            if self.queue.recording is not None:
                self._freed_while_recording.append(texture)
            elif texture.id in self._retained:
                self._deferred[texture.id] = texture
            else:
                self.pool.release(texture)

    # ---- textures a recorded step names ----

    def freed_while_recording(self) -> set[int]:
        return {texture.id for texture in self._freed_while_recording}

    def retain(self, texture_ids: set[int]) -> None:
        """Keeps these textures from other tensors while a recording names them."""
        for tex_id in texture_ids:
            self._retained[tex_id] = self._retained.get(tex_id, 0) + 1

    def stamp(self, handle: Handle) -> tuple[tuple[int, int], ...] | None:
        """What identifies the values in handle's textures: (id, pool generation) of each, or
        None where a recording names one (a replay may rewrite it in place). Any other texture
        is written once, when its tensor is made: an equal stamp later means equal values."""
        textures = [handle.texture] if handle.lo is None else [handle.texture, handle.lo]
        if any(t.id in self._retained for t in textures):
            return None
        return tuple((t.id, self.pool.generation(t.id)) for t in textures)

    def end_recording(self, keep: set[int]) -> None:
        """Frees what was freed while recording, except what the recording kept names."""
        freed, self._freed_while_recording = self._freed_while_recording, []
        for texture in freed:
            if texture.id in keep:
                self._deferred[texture.id] = texture
            else:
                self.pool.release(texture)

    def release(self, texture_ids: frozenset[int]) -> None:
        """A recording naming these textures was dropped: pool those freed meanwhile."""
        for tex_id in texture_ids:
            self._retained[tex_id] -= 1
            if self._retained[tex_id] == 0:
                del self._retained[tex_id]
                texture = self._deferred.pop(tex_id, None)
                if texture is not None:
                    self.pool.release(texture)

    # ---- reading back ----

    async def download(self, handle: Handle) -> np.ndarray:
        textures = [handle.texture] if handle.lo is None else [handle.texture, handle.lo]
        flat = await self.queue.read([t.id for t in textures])
        values = np.full(handle.texture.layout.size, -0.0, np.float32)  # -0 + x keeps x's zero sign
        offset = 0
        for texture in textures:
            texels = texture.layout.texels * wire.READ_CHANNELS
            values += wire.unpack(flat[offset : offset + texels], texture.layout)
            offset += texels
        # A broadcast view reads as the kernels read it: each element `repeat` times, cyclically.
        values = np.resize(np.repeat(values, handle.repeat), math.prod(handle.shape))
        return _to_dtype(values.reshape(handle.shape), handle.dtype)


def _dtype_name(array: np.ndarray) -> str:
    kind = array.dtype.kind
    return "bool" if kind == "b" else "int32" if kind in "iu" else str(array.dtype)


def _to_dtype(values: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bool":
        return values != 0
    if dtype == "int32":
        return np.rint(values).astype(np.int32)
    return values.astype(dtype)
