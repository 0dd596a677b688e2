"""Backbone identity: the sha256 pinned for the hand model is that of the files set-up fetched
(and the dev server serves), and a model file's ONNX export names the backbone too."""

from __future__ import annotations

import asyncio
import json

import onnx

import py_in_browser as pib
from py_in_browser.interop import backbones, onnx_export
from server.pretrained_models import ensure_pretrained_models
from server.settings import Paths


def test_the_pinned_sha256_is_that_of_the_served_files() -> None:
    paths = Paths.default()
    ensure_pretrained_models(paths, log=lambda _: None)  # a no-op once `make setup` ran
    folder = paths.pretrained_models
    name = backbones.HAND_LANDMARK_LITE.name
    files = {
        "model.json": (folder / f"{name}.json").read_bytes(),
        f"{name}.bin": (folder / f"{name}.bin").read_bytes(),
    }
    assert backbones.files_sha256(files) == backbones.HAND_LANDMARK_LITE.sha256
    files[f"{name}.bin"] = files[f"{name}.bin"][:-1] + b"\x00"
    assert backbones.files_sha256(files) != backbones.HAND_LANDMARK_LITE.sha256


def test_the_onnx_export_of_a_head_names_its_backbone() -> None:
    head = pib.Sequential([pib.layers.Dense(2, activation="softmax", input_shape=(672,))])
    head.build()
    reference = backbones.HAND_LANDMARK_LITE.reference()
    data = asyncio.run(head.save(backbone=reference))
    proto = onnx.load_from_string(onnx_export.from_model_file(data))
    props = {p.key: p.value for p in proto.metadata_props}
    assert json.loads(props["backbone"]) == reference
