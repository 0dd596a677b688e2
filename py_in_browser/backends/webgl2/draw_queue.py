"""The draw queue: commands and upload data waiting for bridge.js, sent in one JS call per flush,
step or read; every call to bridge.js goes through here (and is counted)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ... import _js
from .. import Backend
from . import shaders, wire
from .context import ContextLoss
from .epilogues import dead_draws
from .kernels import Uniform
from .multi_target import Physical, merge_fused_draws
from .recording import RecordingBuilder
from .textures import Handle

# A step's draws normally go in one flush; very long recordings are cut so JSON stays small.
FLUSH_AT_COMMANDS = 4096


class DrawQueue:
    """Queued commands for the engine bridge.js made; `owner` is the backend whose profile log
    and traffic counters this queue serves."""

    def __init__(self, owner: Backend) -> None:
        self.owner = owner
        self.engine: Any = None  # bridge.js's Engine, set by the backend's start()
        self.context = ContextLoss(owner.name)
        self.commands: list[wire.Command] = []
        self._staging: list[np.ndarray] = []
        self._staged = 0
        self._new_programs: dict[str, str] = {}
        self.known_programs: set[str] = set()
        self.recording: RecordingBuilder | None = None  # also captures draws and uploads
        # Draws a fused draw made redundant (epilogues.py): dropped at the flush if unread.
        self._droppable: dict[int, wire.Command] = {}
        self.is_free: Callable[[int], bool] = lambda texture_id: False  # set by TextureMemory
        self.physical: Physical = lambda texture_id: None  # set by TextureMemory
        self.draw_buffers = 1  # render targets one draw may write (set by the backend's start)
        self.js_calls = 0  # Python -> JS calls made (flushes, reads, warm-up)
        self.flushes = 0
        self._profiling = False  # draws flushed since pib.profile began are timed in bridge.js
        self.profile_timing = "wall"
        self.profile_discarded = 0  # timer results dropped for GPU_DISJOINT_EXT, last profile

    def call(self, method: str, *args: Any) -> Any:
        """A bridge.js Engine method called now (not queued): compiles, recordings, debug hooks."""
        self.js_calls += 1
        return getattr(self.engine, method)(*args)

    # ---- queueing ----

    def stage(self, texture_id: int, padded: np.ndarray) -> None:
        """Queues an upload of `padded` (the texture's texels, flat) into texture `texture_id`."""
        self.commands.append([wire.UPLOAD, texture_id, self._staged])
        self._staging.append(padded)
        self._staged += padded.size
        self.owner.bytes_uploaded += padded.nbytes
        if self.recording is not None:
            self.recording.order.append(("upload", len(self.recording.uploads)))
            self.recording.uploads.append((texture_id, padded))

    def draw(
        self,
        key: str,
        handle: Handle,
        inputs: list[Handle],
        uniforms: list[Uniform],
        label: str,
        pair: bool,
        more_targets: Sequence[Handle] = (),
    ) -> wire.Command:
        """Queues one draw of program `key` into handle's texture(s), and into more_targets'
        (render targets 1, 2, ... after handle's low part, if any) for block kernels."""
        if key not in self.known_programs:
            self._new_programs[key] = shaders.program_source(key)
            self.known_programs.add(key)
        extra = [handle.lo] if handle.lo else []
        extra += [h.texture for h in more_targets]
        draw = wire.draw(
            key,
            handle.texture.id,
            [t.id for t in extra],
            handle.texture.layout.size,
            [
                [h.texture.id, h.lo.id if h.lo and pair else -1, h.texture.layout.size, h.repeat]
                for h in inputs
            ],
            [list(u) for u in uniforms],
            label,  # the label a profile reports this draw under (also when replayed)
        )
        self.start_profile_if_asked()
        self.commands.append(draw)
        if self.recording is not None:
            self.recording.order.append(("draw", len(self.recording.draws)))
            self.recording.draws.append(draw)
        self.maybe_flush()
        return draw

    def merge_fused(self, commands: Sequence[wire.Command]) -> list[wire.Command]:
        """`commands` with adjacent fused draws as one multi-target draw (multi_target.py)."""
        return merge_fused_draws(
            commands, self.physical, self.draw_buffers, self.known_programs.__contains__
        )

    def _held(self, texture_id: int) -> bool:
        return not self.is_free(texture_id)

    def mark_droppable(self, command: wire.Command) -> None:
        """`command` may be left out if nothing reads what it draws (see epilogues.dead_draws)."""
        self._droppable[id(command)] = command
        if self.recording is not None:
            self.recording.droppable[id(command)] = command

    # ---- talking to JS: one call per flush ----

    def _payload(self) -> tuple[str, np.ndarray]:
        if self.owner.profile_log is None:
            self._profiling = False  # a profiled function that raised never reached collect
        if self._droppable:
            dead = dead_draws(self.commands, set(self._droppable), self._held)
            self.commands[:] = [c for i, c in enumerate(self.commands) if i not in dead]
            self._droppable.clear()
        self.commands[:] = self.merge_fused(self.commands)
        payload = wire.payload(self._new_programs, self.commands, self._profiling, self._staging)
        self._new_programs = {}
        self.commands.clear()
        self._staging.clear()
        self._staged = 0
        self.flushes += 1
        return payload

    def maybe_flush(self) -> None:
        if len(self.commands) >= FLUSH_AT_COMMANDS:
            self.flush()

    def flush(self) -> None:
        """Sends the recorded commands to the GPU (one JS call)."""
        if not self.commands and not self._new_programs:
            return
        payload, staging = self._payload()
        self.js_calls += 1
        if self.engine.run(payload, staging) == "lost":
            self.context.fail(self.flushes)

    async def end_step(self) -> None:
        """After each train step: send the step's draws, then apply back-pressure (bridge.js
        sets a fence every wire.FENCE_EVERY_FLUSHES flushes; this waits, without reading data,
        while the GPU is more than wire.MAX_PENDING_FENCES fences behind). A step the GPU is
        not too far behind returns without awaiting anything from JS."""
        payload, staging = self._payload()
        self.js_calls += 1
        try:
            status = self.engine.step(payload, staging, wire.MAX_PENDING_FENCES)
            if status == "wait":
                status = await self.engine.drain(wire.MAX_PENDING_FENCES)
        except Exception:
            if self.engine.lost:
                self.context.fail(self.flushes)
            raise
        if status == "lost":
            self.context.fail(self.flushes)

    async def read(self, texture_ids: list[int]) -> np.ndarray:
        """Sends what is queued, then reads the textures back: their texels as RGBA floats, one
        texture after another."""
        payload, staging = self._payload()
        self.js_calls += 1
        try:
            data = await self.engine.read(payload, staging, json.dumps(texture_ids))
        except Exception as exc:
            if self.engine.lost:
                self.context.fail(self.flushes)
            raise RuntimeError(f"webgl2: reading a tensor back failed: {exc}") from exc
        flat = _js.typed_array_to_numpy(data, "float32", (int(data.length),))
        self.owner.bytes_downloaded += flat.nbytes
        return flat

    # ---- profiling: bridge.js times each draw while pib.profile runs ----

    def start_profile_if_asked(self) -> None:
        """On the first draw under pib.profile: send what was queued before it untimed, so the
        profile holds only the profiled function's draws."""
        if self.owner.profile_log is not None and not self._profiling:
            self.flush()
            self._profiling = True

    async def collect_profile(self) -> None:
        """Adds the draws' times (GPU timer queries, or wall time around each draw) by label to
        the owner's profile log: the primitive's name, also inside a replayed step, or
        recorder.REPLAY_COPY_LABEL for the copies a replay makes of its state and outputs."""
        if not self._profiling:
            return
        self.flush()
        self._profiling = False
        report = json.loads(await self.call("takeProfile"))
        self.profile_timing = str(report["timing"])
        self.profile_discarded = int(report["discarded"])
        if self.owner.profile_log is not None:
            for label, ms in report["rows"]:
                self.owner.profile_log.setdefault(str(label), []).append(float(ms))
