"""Records a train step's draws once and replays them from bridge.js (the protocol replay.py
drives): what a recording is and its signature live in recording.py."""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

from .. import OutSpec
from . import kernels, wire
from .draw_queue import DrawQueue
from .memory import TextureMemory
from .recording import (
    Recording,
    RecordingBuilder,
    drop_dead_draws,
    lendable,
    merge_fused,
    movable,
    replay_program,
    signature,
    swappable,
    texture_ids,
)
from .textures import Handle

# What a profile calls the draws a replay adds: copies of the state in and of the outputs out.
REPLAY_COPY_LABEL = "replay_copy"


class StepRecorder:
    """Captures what the queue sends between begin and finish; replays it on new batches."""

    def __init__(self, memory: TextureMemory, queue: DrawQueue) -> None:
        self.memory = memory
        self.queue = queue
        self.recordings = 0  # ids handed out
        self.steps_replayed = 0
        # State texture id -> (its pool generation, memory.stamp of the tensor copied into it
        # last): a step that only reads that state (a batch given as tensors) and gets the same
        # tensor again finds it there. Every copy or swap into a texture updates or drops this.
        self._holds: dict[int, tuple[int, Any]] = {}

    def begin(self) -> None:
        self.queue.recording = RecordingBuilder()
        # A recording must draw what it derives from its state: a padded copy or a fusable
        # block made before it began would be read as it was then, in every replay (predict
        # after more training read a Dense(10) layer's old padded weights).
        self.memory.padded.clear()
        self.memory.blocked.clear()

    def _end(self, keep: set[int]) -> None:
        self.queue.recording = None
        self.memory.end_recording(keep)

    def abort(self) -> None:
        self._end(set())

    def finish(
        self, inputs: list[Handle], state: list[tuple[Handle, Handle]], outputs: list[Handle]
    ) -> Recording:
        """Hands the captured step to bridge.js (one call); its textures stay reserved for it."""
        builder = self.queue.recording
        assert builder is not None, "finish_recording without begin_recording"
        # What the step leaves for later: tensors still held, and the recording's roles.
        freed = self.memory.freed_while_recording()
        roles = {
            t.id for h in [*inputs, *outputs, *(h for p in state for h in p)] for t in _parts(h)
        }
        drop_dead_draws(builder, lambda tex: tex not in freed or tex in roles)
        merge_fused(builder, self.queue.merge_fused)
        ids = texture_ids(builder)
        self.memory.retain(ids)
        self._end(ids)
        self.recordings += 1
        commands, constants = replay_program(builder, inputs, roles)
        self.queue.flush()  # the eager step's own commands first
        self.queue.call("record", self.recordings, commands, constants)
        return Recording(
            id=self.recordings,
            inputs=tuple(inputs),
            state_in=tuple(before for before, _ in state),
            state_out=tuple(after for _, after in state),
            swappable=swappable(builder, inputs, state, outputs),
            outputs=tuple(outputs),
            textures=frozenset(ids),
            signature=signature(builder, inputs, state),
            lendable=lendable(builder, inputs, state, outputs),
            movable=movable(builder, inputs, state, outputs),
        )

    def replay(
        self, recording: Recording, arrays: list[np.ndarray], state_now: list[Handle]
    ) -> list[Handle]:
        """Brings the state in, runs the recorded step on new inputs, copies the outputs out:
        queued with the rest, so with end_step's flush a replayed step is one JS call. A
        variable still in the textures the last replay left it in (the usual case) is swapped
        into the recorded state textures, not copied (recording.swappable says when)."""
        lent: list[wire.Command] = []
        for now, before, after, swap, lend in zip(
            state_now,
            recording.state_in,
            recording.state_out,
            recording.swappable,
            recording.lendable,
            strict=True,
        ):
            if now.texture.id == before.texture.id:
                continue
            if lend and self._may_lend(now, before, recording, lent):
                lent.append([wire.SWAP, before.texture.id, now.texture.id])
                continue
            if swap and now.texture.id == after.texture.id and _same_lo(now, after):
                self._swap(before.texture.id, after.texture.id)
                if before.lo is not None and after.lo is not None:
                    self._swap(before.lo.id, after.lo.id)
                continue
            stamp = self.memory.stamp(now) if before is after else None
            if stamp is not None and self._holding(before) == stamp:
                continue  # read-only state (the step never writes it) still holding `now`
            self._copy(now, before)
            if stamp is not None:
                self._holds[before.texture.id] = (self._generation(before), stamp)
        for handle, array in zip(recording.inputs, arrays, strict=True):
            if tuple(array.shape) != handle.shape:
                raise ValueError(f"replay: input of shape {array.shape}, recorded {handle.shape}")
            self.memory.stage_array(handle, array)  # the batch goes into the recorded inputs
        self.queue.start_profile_if_asked()
        self.queue.commands.extend(lent)
        self.queue.commands.append([wire.REPLAY, recording.id])
        self.queue.commands.extend(lent)  # each swap again gives the lent textures back
        self.memory.blocked.clear()  # the replay rewrites textures fused draws might re-read
        self.memory.padded.clear()  # and textures padded copies were made of
        self.steps_replayed += 1
        outputs = []
        for source, move in zip(recording.outputs, recording.movable, strict=True):
            target = self.memory.allocate(source.shape, source.dtype, source.lo is not None)
            if move and _same_layouts(source, target):
                for a, b in zip(_parts(source), _parts(target), strict=True):
                    self._swap(a.id, b.id)  # the next replay writes what target held first
            else:
                self._copy(source, target)
            outputs.append(target)
        return outputs

    @staticmethod
    def _may_lend(
        now: Handle, before: Handle, recording: Recording, lent: list[wire.Command]
    ) -> bool:
        """Whether `now` can stand in for the read-only state `before` for one replay: one
        layout, no low parts or broadcast, not named by the recording or lent twice."""
        return (
            now.lo is None
            and before.lo is None
            and now.repeat == before.repeat == 1
            and now.texture.layout == before.texture.layout
            and now.texture.half == before.texture.half
            and now.texture.id not in recording.textures
            and all(command[2] != now.texture.id for command in lent)
        )

    def _generation(self, handle: Handle) -> int:
        return self.memory.pool.generation(handle.texture.id)

    def _holding(self, state: Handle) -> Any:
        """The stamp of the tensor last copied into `state`'s texture, if nothing wrote it since."""
        generation, stamp = self._holds.get(state.texture.id, (None, None))
        return stamp if generation == self._generation(state) else None

    def _swap(self, a: int, b: int) -> None:
        self.queue.commands.append([wire.SWAP, a, b])
        self._holds.pop(a, None)
        self._holds.pop(b, None)

    def _copy(self, source: Handle, target: Handle) -> None:
        """A draw copying source's elements into target (replay state in, outputs out). A
        broadcast scalar (one-element texture for a bigger shape) fills the target."""
        self._holds.pop(target.texture.id, None)
        size, out_size = source.texture.layout.size, target.texture.layout.size
        if out_size == 1 and size != 1:
            raise RuntimeError("webgl2: a replay cannot copy a tensor into a broadcast scalar")
        uniforms = _copy_uniforms(size)
        for src, dst in ((source.texture, target.texture), (source.lo, target.lo)):
            if src is not None and dst is not None:
                same = src.layout.channels == dst.layout.channels and size == out_size
                key = "fill4" if size == 1 else "copy4" if same else "strided"
                self.queue.commands.append(
                    wire.draw(
                        key,
                        dst.id,
                        [],
                        out_size,
                        [[src.id, -1, size, 1]],
                        [list(u) for u in uniforms],
                        REPLAY_COPY_LABEL,
                    )
                )

    def drop(self, recording: Recording) -> None:
        self.queue.call("dropRecording", recording.id)
        for texture_id in recording.textures:
            self._holds.pop(texture_id, None)
        self.memory.release(recording.textures)


@cache  # every replay copies its outputs out: planned once per size
def _copy_uniforms(size: int) -> tuple[Any, ...]:
    _, uniforms = kernels.plan(
        "reshape", {"shape": (size,)}, OutSpec((size,), "float32", ((size,),), ("float32",))
    )
    return tuple(uniforms)


def _same_lo(a: Handle, b: Handle) -> bool:
    return (a.lo.id if a.lo else None) == (b.lo.id if b.lo else None)


def _same_layouts(a: Handle, b: Handle) -> bool:
    """Textures of one physical shape part by part (what a swap needs)."""
    return all(
        x.layout == y.layout and x.half == y.half for x, y in zip(_parts(a), _parts(b), strict=True)
    )


def _parts(handle: Handle) -> list[Any]:
    return [handle.texture] if handle.lo is None else [handle.texture, handle.lo]
