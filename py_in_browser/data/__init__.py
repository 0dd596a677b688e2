"""pib.data: camera frames and images into model inputs on the device, and top-k predictions.

The gesture trainer's engine side. The page sends each frame to the engine's worker as a
transferred ImageBitmap, then runs Python that takes it by name::

    worker.postMessage({type: "bitmap", name: "frame", bitmap}, [bitmap]);   // no copy
    const top = await pib.runPython(
      "await pib.data.classify_bitmap(model, 'frame', prep, k=3, labels=labels)");

(web/js/engine-worker.js keeps the last bitmap per name; messages arrive in order, so the frame
is there when the code runs). `from_image_bitmap` puts a frame on the device without passing its
pixels through Python (WebGPU: copyExternalImageToTexture and a compute pass; WebGL2:
texImage2D and a draw; cpu: getImageData in JS), then `preprocess` mirrors, crops, resizes and
normalises it there as an `ImagePreprocessing` says (the config model files carry). Training
data augmentation per batch is the layer pib.layers.RandomAugmentation.
"""

from __future__ import annotations

from ..preprocessing import ImagePreprocessing
from .frames import classify_bitmap, from_image_bitmap, preprocess, take_bitmap
from .predictions import top_k

__all__ = [
    "ImagePreprocessing",
    "classify_bitmap",
    "from_image_bitmap",
    "preprocess",
    "take_bitmap",
    "top_k",
]
