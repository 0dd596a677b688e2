"""Large products of the cpu backend split by rows between the engine's worker and helper workers.

Pyodide runs Python and the SIMD module in one thread. A product of at least MIN_MACS
multiply-adds (a 256^3 matmul) is worth the machine's other cores: pool.js starts a helper per
spare core, each running gemm.c on a shared memory of its own; the engine's worker copies a
helper's rows of A and the whole of B there, computes its own rows meanwhile, then copies the
helpers' rows of C back. Each row of C is summed the same way whichever thread computes it, and
the helpers run the relaxed build's arithmetic, so they are used only where the engine runs that
build: the product is the bits the engine alone would compute.

Only eager products use them (a matmul, a graph model's first call): a recorded step replays
inside the module in one call (recording.py). A helper that stops answering (its worker died)
leaves its rows to the engine's worker, and the helpers are closed for the session: a runtime
event says why.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

from ... import _js
from ...events import record_event
from .kernels import MR, SimdKernels

HELPER_MODULE = Path(__file__).with_name("gemm-helper.wasm")
MIN_MACS = 1 << 24
MAX_HELPERS = 7
# How long a helper may take, at worst, before it is taken for dead: a floor, plus its rows at
# 0.2 G multiply-adds a second (50-100x slower than it runs on an idle core).
ANSWER_FLOOR_MS = 1000.0
SLOWEST_MACS_PER_MS = 200_000.0

_state: dict[str, Any] = {"task": None}


class RowHelpers:
    """pool.js's GemmPool as SimdKernels.gemm uses it (kernels.Helpers)."""

    def __init__(self, pool: Any, kernels: SimdKernels) -> None:
        self._pool = pool
        self._kernels = kernels
        self.count = int(pool.size)

    @property
    def products(self) -> int:
        """Products the helpers took part in."""
        return int(self._pool.products)

    def own_rows(self, m: int, n: int, k: int) -> int | None:
        """Rows of C the engine's worker keeps (the first ones), or None to compute it alone:
        too few multiply-adds to pay for the copies, or too few rows for a panel each."""
        parts = self.count + 1
        if m * n * k < MIN_MACS or m < MR * parts:
            return None
        return math.ceil(m / parts)

    def begin(self, a: int, b: int, m: int, n: int, k: int, transposed_b: bool, own: int) -> bool:
        """Starts the helpers on rows [own, m) of C (operands at these addresses); False when
        they could not take them (an operand too large for a helper's memory)."""
        per = math.ceil((m - own) / self.count)
        return bool(self._pool.begin(a, b, m, n, k, transposed_b, own, per))

    def finish(self, c: int, m: int, n: int, k: int) -> list[tuple[int, int]]:
        """Copies the helpers' rows into C; returns the (first row, count) the helpers did not
        deliver, which the caller computes, after closing the helpers for good."""
        timeout = ANSWER_FLOOR_MS + math.ceil(m / (self.count + 1)) * n * k / SLOWEST_MACS_PER_MS
        missing = [(int(row), int(rows)) for row, rows in self._pool.finish(c, n, timeout)]
        if missing:
            self.close(f"a helper did not answer within {timeout:.0f} ms")
        return missing

    def close(self, reason: str) -> None:
        self._pool.close()
        if self._kernels.helpers is self:
            self._kernels.helpers = None
        record_event("gemm_helpers_closed", 0, reason=reason)


def _wanted_helpers() -> int:
    """Spare cores of a cross-origin isolated page (shared memory needs it)."""
    if not bool(_js.js_global("crossOriginIsolated")):
        return 0
    cores = int(_js.js_global("navigator").hardwareConcurrency or 1)
    return min(MAX_HELPERS, cores - 1)


async def _start(kernels: SimdKernels) -> bool:
    count = _wanted_helpers()
    if count < 1 or not HELPER_MODULE.is_file():
        return False
    try:
        bridge = await _js.load_bridge(__package__ or "py_in_browser.backends.cpu_simd", "pool.js")
        pool = await bridge.GemmPool.start(
            _js.to_js_bytes(HELPER_MODULE.read_bytes()), count, _js.runtime_module()
        )
    except Exception as exc:  # any failure leaves the engine's worker computing alone
        record_event("gemm_helpers_unavailable", 0, reason=str(exc))
        return False
    kernels.helpers = RowHelpers(pool, kernels)
    return True


def start_soon(kernels: SimdKernels | None) -> None:
    """Starts the helpers in the background where they can help: in a browser, with the relaxed
    build running (whose arithmetic the helpers share) and a core to spare."""
    if kernels is None or _state["task"] is not None or not _js.in_browser():
        return
    if not kernels.fuses_multiply_adds():
        return
    _state["task"] = asyncio.ensure_future(_start(kernels))


async def ready() -> bool:
    """Whether helpers started (waits for a start in progress; False when none was begun)."""
    task = _state["task"]
    return bool(await task) if task is not None else False
