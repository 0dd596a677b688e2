"""What a recorded training step is on WebGPU: its dispatch records, the buffers it keeps alive, and
a signature that says whether two recordings computed the same function of (state, batch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .buffers import GpuHandle
from .commands import DISPATCH, DISPATCH_BINDINGS, DISPATCH_HEADER


@dataclass
class RecordingBuilder:
    """Collects what one step dispatches and uploads; keeps a reference on every buffer it sees so
    none of them is reused (or changes identity) while the recording may be replayed."""

    words: list[int] = field(default_factory=list)
    uploads: dict[int, bytes] = field(default_factory=dict)  # buffer id -> bytes written
    retained: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class Recording:
    """A step the bridge can replay: write `inputs`, copy current state into `state_in`, run the
    recorded dispatches, copy `outputs` out to fresh buffers."""

    id: int
    inputs: tuple[GpuHandle, ...]
    state_in: tuple[GpuHandle, ...]
    outputs: tuple[GpuHandle, ...]
    retained: frozenset[int]
    signature: Any
    dispatches: int


def signature(
    builder: RecordingBuilder,
    inputs: list[GpuHandle],
    state: list[tuple[GpuHandle, GpuHandle]],
    outputs: list[GpuHandle],
) -> tuple[Any, ...]:
    """The step with buffer ids replaced by their roles: equal signatures mean equal computations.

    Inputs and state are named by position, uploads that are not inputs by their bytes (host-side
    randomness such as a dropout mask shows up here), every other buffer by first appearance.
    """
    names: dict[int, Any] = {}
    for k, handle in enumerate(inputs):
        names[handle.id] = ("input", k)
    for k, (before, _) in enumerate(state):
        names.setdefault(before.id, ("state", k))

    def name(buffer_id: int) -> Any:
        if buffer_id not in names:
            upload = builder.uploads.get(buffer_id)
            names[buffer_id] = ("temp", len(names)) if upload is None else ("const", upload)
        return names[buffer_id]

    words = builder.words
    steps: list[Any] = []
    i = 0
    while i < len(words):
        assert words[i] == DISPATCH
        count = words[i + DISPATCH_BINDINGS]
        pairs = words[i + DISPATCH_HEADER : i + DISPATCH_HEADER + 2 * count]
        steps.append(
            (
                *words[i + 1 : i + DISPATCH_BINDINGS],
                *((name(b), n) for b, n in zip(pairs[::2], pairs[1::2], strict=True)),
            )
        )
        i += DISPATCH_HEADER + 2 * count
    final = tuple(name(after.id) for _, after in state) + tuple(name(h.id) for h in outputs)
    return (tuple(steps), final)
