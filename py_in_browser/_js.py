"""The only module that imports `js` and `pyodide.ffi`: JS bridge loading and buffer crossing.

Everything else in the engine imports in CPython; browser-only code asks `in_browser()` first and
receives its JS objects from here. Bridges are self-contained ES modules shipped in the package.
"""

from __future__ import annotations

import sys
from importlib import resources
from typing import Any

import numpy as np


def in_browser() -> bool:
    return sys.platform == "emscripten"


async def load_bridge(package: str, filename: str) -> Any:
    """Import the ES module `filename` of `package` (shipped in the package) in the engine's worker.

    The worker exposes `pibImportModule(source)` (web/js/engine-worker.js), which imports the text
    through a same-origin blob: URL, so bridges need no route of their own on the server.
    """
    import js

    source = resources.files(package).joinpath(filename).read_text()
    return await js.pibImportModule(source)


def to_js_bytes(data: bytes) -> Any:
    """A Uint8Array copy of `data`."""
    from pyodide.ffi import to_js

    return to_js(data)


def wasm_validates(module: bytes) -> bool:
    """Whether this browser's WebAssembly compiles `module` (a feature probe)."""
    import js

    return bool(js.WebAssembly.validate(to_js_bytes(module)))


def runtime_module() -> Any:
    """Pyodide's Emscripten module: its HEAPU8 is the memory numpy's arrays live in."""
    import pyodide_js

    return pyodide_js._module


def js_global(name: str) -> Any:
    """A global of the worker (navigator, OffscreenCanvas, performance, ...)."""
    import js

    return getattr(js, name)


def typed_array_to_numpy(typed_array: Any, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Copy a JS TypedArray (or ArrayBuffer) into a new numpy array of `dtype` and `shape`."""
    out = np.empty(shape, dtype=dtype)
    typed_array.assign_to(out)
    return out


def take_bitmap(name: str) -> Any:
    """The ImageBitmap the page last sent under `name` (engine-worker.js's "bitmap" message),
    removed from the worker's table: the caller owns it now (uploads close it)."""
    import js

    bitmaps = js.pibBitmaps
    if not bitmaps.has(name):
        raise KeyError(
            f"no ImageBitmap named {name!r} was sent to the engine worker (post "
            '{type: "bitmap", name, bitmap} with the bitmap transferred, then run the code)'
        )
    bitmap = bitmaps.get(name)
    bitmaps.delete(name)
    return bitmap


async def copy_bitmap(bitmap: Any) -> Any:
    """A second ImageBitmap of the same pixels (createImageBitmap): classify_bitmap keeps one to
    classify again after a device loss took the first (uploads close theirs)."""
    import js

    return await js.createImageBitmap(bitmap)


def image_bitmap_rgba(bitmap: Any) -> np.ndarray:
    """An ImageBitmap's pixels as (height, width, 4) uint8, drawn on an OffscreenCanvas and read
    with getImageData (the cpu backend's way in; GPU backends take the bitmap itself). Closes it."""
    import js

    width, height = int(bitmap.width), int(bitmap.height)
    context = js.OffscreenCanvas.new(width, height).getContext("2d")
    context.drawImage(bitmap, 0, 0)
    bitmap.close()
    pixels = context.getImageData(0, 0, width, height).data
    return typed_array_to_numpy(pixels, "uint8", (height, width, 4))


# Proxies created inside each open tidy scope, innermost last (runtime.tidy opens and closes
# them): a scope destroys those it created that it does not return.
proxy_scopes: list[list[Any]] = []
_proxies = {"live": 0}  # made by create_proxy and not yet destroyed (leak tests read it)


def create_proxy(fn: Any, persistent: bool = False) -> Any:
    """A proxy JS can keep for the Python callable `fn` (event listeners, callbacks).

    Inside a tidy scope the scope owns it and destroys it on exit (unless returned), like the
    tensors it made; `persistent=True` is for proxies that live as long as their owner (a
    backend's lost-context listener), which destroys them itself.
    """
    from pyodide.ffi import create_proxy as make

    proxy = make(fn)
    _proxies["live"] += 1
    if proxy_scopes and not persistent:
        proxy_scopes[-1].append(proxy)
    return proxy


def destroy_proxy(proxy: Any) -> None:
    """Destroys a proxy create_proxy made (a persistent one, by its owner; a scope's, on exit)."""
    proxy.destroy()
    _proxies["live"] -= 1


def live_js_objects() -> dict[str, int]:
    """What Pyodide holds across the JS boundary: js_refs, JS values Python references (its
    hiwire table), and py_proxies_traced, live PyProxies JS holds, counted only while Pyodide's
    allocation tracing is on (pyodide._module.enable_pyproxy_allocation_tracing(); it records
    a stack per proxy, so it is for tests, off by default). Empty outside the browser."""
    if not in_browser():
        return {}
    import pyodide_js

    module = pyodide_js._module
    return {
        "js_refs": int(module._hiwire_num_refs()),
        "py_proxies_traced": int(module.pyproxy_alloc_map.size),
    }


def live_proxies() -> int:
    """How many proxies create_proxy made that are not destroyed yet."""
    return _proxies["live"]


def can_run_sync() -> bool:
    """Whether this browser lets Python block on a JS promise (JSPI); never assume it elsewhere."""
    if not in_browser():
        return False
    try:
        from pyodide.ffi import can_run_sync as probe
    except ImportError:
        return False
    return bool(probe())


def gpu_probe_reason(api: str) -> str:
    """Why the engine's worker has no `api` ("webgpu" or "webgl2"): the reason its GPU probe
    (web/js/gpu-probe.js) gave, the words the app's status panel shows too."""
    if not in_browser():
        return "runs only in a browser's worker (this is CPython)"
    import js

    probed = getattr(js, "pibGpuEnvironment", None)
    if probed is None:
        return "this worker ran no GPU probe (web/js/gpu-probe.js)"
    return str(getattr(probed, api).reason)


_webgl2_probe: list[bool] = []


def webgl2_available() -> bool:
    """Whether this worker can make a WebGL2 context on an OffscreenCanvas: what the engine's
    worker probed at boot (web/js/gpu-probe.js), else probed here once (the probe context is
    released at once because browsers cap live contexts)."""
    if not _webgl2_probe:
        context = None
        if in_browser():
            import js

            probed = getattr(js, "pibGpuEnvironment", None)
            if probed is not None:
                _webgl2_probe.append(bool(probed.webgl2.available))
                return _webgl2_probe[0]
            if hasattr(js, "OffscreenCanvas"):
                context = js.OffscreenCanvas.new(1, 1).getContext("webgl2")
        if context is not None:
            lose = context.getExtension("WEBGL_lose_context")
            if lose is not None:
                lose.loseContext()
        _webgl2_probe.append(context is not None)
    return _webgl2_probe[0]


def run_sync(awaitable: Any) -> Any:
    """Blocks on `awaitable` (only where can_run_sync() is True: JSPI)."""
    from pyodide.ffi import run_sync as block

    return block(awaitable)
