"""Frames into model inputs on the device: ImageBitmaps from the page, and the preprocessing."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import _js, resilience
from .. import functional as F
from ..preprocessing import ImagePreprocessing
from ..runtime import current_backend, tidy
from ..tensor import Tensor, _wrap, tensor
from .predictions import top_k


def preprocess(images: Any, preprocessing: ImagePreprocessing | dict[str, Any]) -> Tensor:
    """Images (N, H, W, 3), values in [0, 1], as the model's inputs (N, height, width, 3).

    Mirrors, crops and resizes as `preprocessing` says in one pib.affine_sample kernel, then
    normalises each channel: (v - mean) / std (folded into the same kernel when every channel
    has the same mean and std). `preprocessing` is an ImagePreprocessing or its JSON form.

    Example:
        >>> prep = pib.data.ImagePreprocessing(size=(2, 2), mirror=True, mean=(0.5,) * 3)
        >>> frame = np.zeros((1, 2, 4, 3)); frame[:, :, 1, :] = 1.0  # a bright second column
        >>> (await pib.data.preprocess(frame, prep).numpy())[0, :, :, 0]  # cropped and mirrored
        array([[-0.5,  0.5],
               [-0.5,  0.5]], dtype=float32)
    """
    prep = _as_preprocessing(preprocessing)
    batch = images if isinstance(images, Tensor) else tensor(images)
    if batch.ndim != 4 or batch.shape[3] != 3:
        raise ValueError(f"preprocess: images must be (N, H, W, 3), got shape {batch.shape}")

    def run() -> Tensor:
        row = prep.affine_row(batch.shape[1], batch.shape[2])
        folded = prep.uniform_normalisation()
        if folded is not None:
            row[6:] = folded
        params = tensor(np.tile(np.array(row, np.float32), (batch.shape[0], 1)))
        out = F.affine_sample(batch, params, prep.size)
        if folded is None:
            out = (out - tensor(prep.mean)) / tensor(prep.std)
        return out

    result: Tensor = tidy(run)()
    return result


def take_bitmap(name: str) -> Any:
    """The ImageBitmap the page last posted to the engine worker under `name` (message
    {type: "bitmap", name, bitmap}, the bitmap transferred), removed from the worker's table.
    Only in the browser; the module docstring shows the page's side.

    Example:
        >>> try:
        ...     pib.data.take_bitmap("frame")
        ... except (KeyError, ImportError):  # nothing sent, or not in a browser
        ...     print("no frame")
        no frame
    """
    return _js.take_bitmap(name)


async def from_image_bitmap(
    bitmap: Any, preprocessing: ImagePreprocessing | dict[str, Any] | None = None
) -> Tensor:
    """An ImageBitmap on the active backend as (1, H, W, 3) RGB in [0, 1] (bytes / 255, alpha
    dropped), then preprocessed when `preprocessing` is given. Closes the bitmap.

    WebGPU copies it into a texture (copyExternalImageToTexture) and converts it with one compute
    pass, WebGL2 uploads it with texImage2D and converts it with one draw: its pixels never pass
    through Python. The cpu backend reads them in JS (OffscreenCanvas getImageData). Browser
    only; frames come from `take_bitmap`.

    Example:
        >>> async def frame_tensor():  # in the browser, after the page posted a frame
        ...     bitmap = pib.data.take_bitmap("frame")
        ...     return await pib.data.from_image_bitmap(bitmap, {"schema":
        ...         "py_in_browser.image_preprocessing", "version": 1, "size": [64, 64]})
    """
    backend = current_backend()
    shape = (1, int(bitmap.height), int(bitmap.width), 3)  # a closed bitmap reads 0 x 0
    frame = _wrap(backend, await backend.upload_image(bitmap), shape, "float32")
    if preprocessing is None:
        return frame
    try:
        return preprocess(frame, preprocessing)
    finally:
        frame.dispose()


async def classify_bitmap(
    model: Callable[..., Tensor],
    name: str,
    preprocessing: ImagePreprocessing | dict[str, Any],
    k: int = 3,
    labels: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The live-prediction call: takes frame `name`, preprocesses it on the device, runs the
    model and reads back only its top k. Returns {"top": [{"index", "score"[, "label"]}, ...],
    "ms": milliseconds from taking the frame to having the result} (JSON-able).

    Example:
        >>> async def predict_frame(model, prep):  # in the browser, after the page posted a frame
        ...     return await pib.data.classify_bitmap(model, "frame", prep, k=2)
    """
    started = time.perf_counter()
    bitmap = take_bitmap(name)
    # On a GPU a copy of the frame is kept while the call runs: the upload closes the frame, and
    # a device lost after it (resilience.py runs the call again) needs the pixels once more.
    spare = [await _js.copy_bitmap(bitmap) if resilience.losable() else None]

    async def classify() -> list[dict[str, Any]]:
        frame_bitmap = bitmap
        if bitmap.width == 0:  # closed: the first run uploaded it to a device that was lost
            frame_bitmap, spare[0] = spare[0], await _js.copy_bitmap(spare[0])
        frame = await from_image_bitmap(frame_bitmap, preprocessing)
        try:
            ranked = await top_k(model, frame, k=k, labels=labels)
        finally:
            frame.dispose()
        return ranked[0]

    try:
        top = await resilience.guarded(classify, resilience.state_of(model))
    finally:
        if spare[0] is not None:
            spare[0].close()
    return {"top": top, "ms": (time.perf_counter() - started) * 1000.0}


def _as_preprocessing(value: ImagePreprocessing | dict[str, Any]) -> ImagePreprocessing:
    return value if isinstance(value, ImagePreprocessing) else ImagePreprocessing.from_dict(value)
