"""Textures on the Python side: ids, a pool keyed by physical shape and format, and the handles
(tensors) that name them."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from . import wire
from .texture_layout import Layout

# Freed textures beyond this many pooled bytes are deleted instead of kept for reuse.
POOL_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Texture:
    id: int
    layout: Layout
    half: bool

    @property
    def nbytes(self) -> int:
        return self.layout.bytes(2 if self.half else 4)


@dataclass(eq=False)
class Handle:
    """A tensor on the GPU: its texture, the float16 rounding error texture (compensated
    storage, or None), and the logical shape and dtype needed to read it back."""

    texture: Texture
    lo: Texture | None
    shape: tuple[int, ...]
    dtype: str
    # Element i of the tensor is element (i // repeat) % size of the texture: an expand along
    # trailing dims ((64, 1) -> (64, 10)) read in place (see rewrites.periodic_view, element()).
    repeat: int = 1


class TexturePool:
    """Hands out texture ids; freed ones wait in a pool for the next tensor of the same physical
    shape and format, so a training step allocates nothing once the first step has run."""

    def __init__(self, commands: list[wire.Command]) -> None:
        self._commands = commands  # the draw queue's list: creation and deletion are commands too
        self._free: defaultdict[tuple[int, int, int, bool], list[Texture]] = defaultdict(list)
        self._next_id = 1
        self._free_ids: set[int] = set()
        self._generations: dict[int, int] = {}  # texture id -> times handed out
        self._physical: dict[int, tuple[int, int, int]] = {}  # id -> width, height, channels
        self.live_textures = 0  # created and not deleted (in use or pooled)
        self.gpu_bytes = 0
        self.pooled_bytes = 0

    def is_free(self, texture_id: int) -> bool:
        """Pooled: no tensor holds it, so nothing can read what it holds."""
        return texture_id in self._free_ids

    def generation(self, texture_id: int) -> int:
        """How many times the texture was handed out: a tensor's texture that was pooled and
        handed out again holds another tensor now."""
        return self._generations.get(texture_id, 0)

    def physical(self, texture_id: int) -> tuple[int, int, int] | None:
        """The texture's width, height and channels (fixed for its life, whatever tensor it
        holds), or None once deleted (or never made here)."""
        return self._physical.get(texture_id)

    def acquire(self, layout: Layout, half: bool) -> Texture:
        bucket = self._free[(layout.width, layout.height, layout.channels, half)]
        if bucket:
            texture = bucket.pop()
            self._free_ids.discard(texture.id)
            self._generations[texture.id] += 1
            self.pooled_bytes -= texture.nbytes
            # The pooled texture may have had another logical size; the layout carries this one's.
            return Texture(texture.id, layout, half)
        texture = Texture(self._next_id, layout, half)
        self._next_id += 1
        self._generations[texture.id] = 1
        self._physical[texture.id] = (layout.width, layout.height, layout.channels)
        self._commands.append(wire.texture(texture.id, layout, half))
        self.live_textures += 1
        self.gpu_bytes += texture.nbytes
        return texture

    def release(self, texture: Texture) -> None:
        if self.pooled_bytes + texture.nbytes > POOL_BYTES:
            self._commands.append([wire.DELETE, texture.id])
            self.live_textures -= 1
            self.gpu_bytes -= texture.nbytes
            del self._generations[texture.id]
            del self._physical[texture.id]
            return
        self._free_ids.add(texture.id)
        self._free[
            (texture.layout.width, texture.layout.height, texture.layout.channels, texture.half)
        ].append(texture)
        self.pooled_bytes += texture.nbytes
