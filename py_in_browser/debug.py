"""Fault injection, to see the engine recover: ``await pib.debug.lose_device()``."""

from __future__ import annotations

import asyncio

from .runtime import current_backend


async def lose_device(
    restore: bool = True, restore_after_s: float = 0.05, in_replay: int | None = None
) -> str:
    """Makes the browser really drop the current backend's GPU context or device; returns the
    backend's name. It only injects the fault: a running fit recovers on its own.

    webgl2: WEBGL_lose_context.loseContext(), and with `restore` restoreContext() in a later task
    after `restore_after_s`. webgpu: GPUDevice.destroy(); a destroyed device never comes back, so
    recovery asks for a new adapter and device, and with restore=False none comes either: the
    worker's navigator.gpu.requestAdapter() goes unanswered until recovery gives the lost backend
    up (then it answers no adapter and later requests are served again).

    With `in_replay=k` (k >= 1) the loss is armed instead of made now: it happens right after the
    k-th command (webgl2: draw or upload; webgpu: dispatch) of the next replayed training step,
    inside the one synchronous JS call that replays it (on webgpu the device then comes back).
    The cpu backend has no device to lose and raises RuntimeError.

    Example:
        >>> try:
        ...     await pib.debug.lose_device()
        ... except RuntimeError as err:
        ...     print(err)
        backend 'cpu' has no device to lose
    """
    backend = current_backend()
    if in_replay is None:
        backend.lose_device(restore, restore_after_s)
    elif isinstance(in_replay, bool) or not isinstance(in_replay, int) or in_replay < 1:
        raise ValueError(f"in_replay must be None or an int >= 1, got {in_replay!r}")
    else:
        backend.lose_device_in_replay(in_replay, restore, restore_after_s)
    await asyncio.sleep(0)  # the browser reports the loss (an event, a promise) after this task
    return backend.name
