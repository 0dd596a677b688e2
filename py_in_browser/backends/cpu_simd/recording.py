"""A cpu train step recorded as the SIMD module's calls, and replayed by the module in one call.

While the step runs eagerly, SimdKernels hands every call to a CallLog, and the cpu backend tells
it which arrays each op read and returned. The step can be replayed when all of its data went
through the module: every array a call reads lies in an op's inputs or in what an earlier call
wrote, and every op's result lies in one of those too (views of them included); an op computed
in numpy (an int cast, a random draw, a dtype the module does not take) leaves the step eager.
The log keeps every array it saw alive, so the addresses it recorded stay valid and unshared.

A replay (native/replay.c) copies the new batch and the current state into the recorded input and
state arrays, then makes the recorded calls again on the same addresses: the same kernels on the
same data, so a replayed step gives the bits of the eager step it recorded (a layer's matmul, bias
add and relu are merged into one call that gives their bits: epilogues.py).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import epilogues
from .kernels import REPLAYED, SIGNATURES, Call, Region, SimdKernels


def extent(kernels: SimdKernels, x: np.ndarray) -> Region:
    """The bytes x's elements span in the module's memory (strides may be 0 or negative)."""
    start = kernels.address(x)
    if x.size == 0:
        return start, start
    low = sum((n - 1) * s for n, s in zip(x.shape, x.strides, strict=True) if s < 0)
    high = sum((n - 1) * s for n, s in zip(x.shape, x.strides, strict=True) if s > 0)
    return start + low, start + high + x.itemsize


@dataclass
class CallLog:
    """The calls of one eagerly run step, and whether they alone computed it."""

    kernels: SimdKernels
    calls: list[Call] = field(default_factory=list)
    known: list[Region] = field(default_factory=list)  # op inputs and memory calls wrote
    problem: str | None = None  # why the step cannot be replayed, once found

    def _known(self, x: np.ndarray) -> bool:
        low, high = extent(self.kernels, x)
        # Newest first: a call mostly reads what the calls just before it wrote (a step's log
        # holds thousands of regions; the oldest-first scan took a fifth of recording a small CNN).
        return any(start <= low and high <= end for start, end in reversed(self.known))

    def enter_op(self, inputs: list[Any]) -> None:
        """An op is about to read these handles."""
        self.known += [extent(self.kernels, x) for x in inputs if isinstance(x, np.ndarray)]

    def call(
        self, name: str, args: tuple[Any, ...], values: list[int], tables: list[np.ndarray]
    ) -> None:
        kinds = SIGNATURES[name][0]
        for kind, arg in zip(kinds, args, strict=True):
            reads = arg if kind == "a" else [arg] if kind == "p" else []
            if self.problem is None and not all(self._known(x) for x in reads):
                self.problem = f"{name} reads an array computed outside the module"
        self.known += [
            extent(self.kernels, a) for k, a in zip(kinds, args, strict=True) if k == "o"
        ]
        self.calls.append(Call(name, args, values, tables))

    def leave_op(self, op: str, result: Any) -> None:
        """An op returned `result`: it must be what calls wrote or a view of known memory."""
        if self.problem is None and not (isinstance(result, np.ndarray) and self._known(result)):
            self.problem = f"{op} ran outside the module"


@dataclass(eq=False)
class Recording:
    signature: Any
    words: np.ndarray  # int32: per call its REPLAYED id, argument count and arguments
    inputs: list[tuple[int, tuple[int, ...], np.dtype[Any]]]  # address, shape, dtype
    state_in: list[tuple[np.ndarray, int]]  # each variable's recorded array and its address
    outputs: list[np.ndarray]
    calls: list[Call]  # keeps every array the words name alive


def _dense_and_apart(kernels: SimdKernels, arrays: list[np.ndarray]) -> bool:
    """Whether a replay may copy into each of these arrays: dense, and no two share memory."""
    if not all(isinstance(x, np.ndarray) and x.flags.c_contiguous for x in arrays):
        return False
    regions = sorted(extent(kernels, x) for x in arrays)
    return all(a[1] <= b[0] for a, b in itertools.pairwise(regions))


def build(
    log: CallLog,
    inputs: list[np.ndarray],
    state: list[tuple[np.ndarray, np.ndarray]],
    outputs: list[np.ndarray],
) -> Recording:
    """The recording of a finished log; its signature equals nothing when it cannot be replayed."""
    kernels = log.kernels
    before = [b for b, _ in state]
    roles: list[tuple[Region, tuple[Any, ...]]] = [
        *((extent(kernels, x), ("input", k)) for k, x in enumerate(inputs)),
        *((extent(kernels, x), ("state", k)) for k, x in enumerate(before)),
    ]

    def name(x: np.ndarray, written: bool = False) -> tuple[Any, ...]:
        """x by role: an input's, a state's or a temporary's memory at an offset, else its data."""
        low, high = extent(kernels, x)
        for (start, end), role in roles:
            if start <= low and high <= end:
                return (*role, low - start, x.shape, x.strides)
        if written:
            roles.append(((low, high), ("temp", len(roles))))
            return name(x)
        return ("const", x.dtype.str, x.shape, np.ascontiguousarray(x).tobytes())

    afters = [after for _, after in state]
    kept = [extent(kernels, x) for x in (*afters, *outputs) if isinstance(x, np.ndarray)]
    steps: list[Any] = []
    words: list[int] = []
    for call in epilogues.merge(log.calls, lambda x: extent(kernels, x), kept):
        named: list[Any] = []
        for kind, arg in zip(SIGNATURES[call.name][0], call.args, strict=True):
            if kind == "a":
                named.append(tuple(name(x) for x in arg))
            elif kind == "m":
                named.append(np.asarray(arg).tobytes())
            elif kind in "po":
                named.append(name(arg, written=kind == "o"))
            else:
                named.append(arg)
        steps.append((call.name, *named))
        words += [REPLAYED.index(call.name), len(call.values), *call.values]
    replayable = (
        log.problem is None
        and _dense_and_apart(kernels, [*inputs, *before])
        and all(isinstance(x, np.ndarray) for x in (*afters, *outputs))
    )
    final = tuple(name(x) for x in (*afters, *outputs)) if replayable else ()
    return Recording(
        # object() equals nothing, so a recording that cannot be replayed is never verified.
        signature=(tuple(steps), final) if replayable else object(),
        words=np.array(words, dtype=np.uint32).view(np.int32),
        inputs=[(kernels.address(x), x.shape, x.dtype) for x in inputs],
        state_in=[(x, kernels.address(x)) for x in before],
        outputs=list(outputs),
        calls=log.calls,
    )


def replay(
    kernels: SimdKernels,
    recording: Recording,
    arrays: list[np.ndarray],
    state_now: list[np.ndarray],
) -> list[np.ndarray]:
    """Runs the recorded step on a new batch from the current state, in one call to the module;
    returns read-only copies of the recorded outputs."""
    sources: list[np.ndarray] = []  # alive until the call returns
    copies: list[int] = []
    for (address, shape, dtype), array in zip(recording.inputs, arrays, strict=True):
        if tuple(array.shape) != shape:
            raise ValueError(f"replay: input of shape {array.shape}, recorded {shape}")
        source = np.ascontiguousarray(array, dtype)
        sources.append(source)
        copies += (kernels.address(source), address, source.nbytes)
    for now, (recorded, address) in zip(state_now, recording.state_in, strict=True):
        if now is recorded:
            continue
        if now.shape != recorded.shape or now.dtype != recorded.dtype:
            raise ValueError(f"replay: state of shape {now.shape}, recorded {recorded.shape}")
        source = np.ascontiguousarray(now)
        sources.append(source)
        copies += (kernels.address(source), address, source.nbytes)
    kernels.replay(np.array(copies, dtype=np.uint32), recording.words)
    results = [np.array(x, copy=True) for x in recording.outputs]
    for x in results:
        x.flags.writeable = False
    return results
