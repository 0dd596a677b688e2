"""Fault injection, to see the engine recover: ``await pib.debug.lose_device()``."""

from __future__ import annotations

import asyncio

from .runtime import current_backend


async def lose_device(restore: bool = True, restore_after_s: float = 0.05) -> str:
    """Makes the browser really drop the current backend's GPU context or device; returns the
    backend's name. It only injects the fault: a running fit recovers on its own.

    webgl2: WEBGL_lose_context.loseContext(), and with `restore` restoreContext() in a later task
    after `restore_after_s`. webgpu: GPUDevice.destroy() (a destroyed device never comes back:
    recovery asks for a new adapter and device whatever `restore` says). The cpu backend has no
    device to lose and raises RuntimeError.

    Example:
        >>> try:
        ...     await pib.debug.lose_device()
        ... except RuntimeError as err:
        ...     print(err)
        backend 'cpu' has no device to lose
    """
    backend = current_backend()
    backend.lose_device(restore, restore_after_s)
    await asyncio.sleep(0)  # the browser reports the loss (an event, a promise) after this task
    return backend.name
