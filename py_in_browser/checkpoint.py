"""Checkpoints as one .npz blob that plain numpy reads: np.load(io.BytesIO(blob)).

Keys (format "py_in_browser.checkpoint.v1"):
  format                      the format string above
  weights/NNNN                model weights in Keras order (get_weights order)
  optimizer/config            JSON of the optimizer class and hyper-parameters ("" if none)
  optimizer/state/NNNN        iterations, then each trainable variable's slots in order
  rng/seed                    the model seed (initializers and dropout)
  rng/dropout_calls           per layer, how many dropout masks it has drawn (0 for others)
  progress/json               data cursor: epoch, batch (next batch to run), seed, batch_size,
                              shuffle, samples, seen (samples accumulated this epoch)
  progress/accumulators       this epoch's loss sum then metric hit counts (float32)

Shuffling is a pure function of (seed, epoch) (training.epoch_order), so the cursor plus these
counters restore the exact data order and masks; resumed training is bit-identical on cpu.
"""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import numpy as np

from . import optimizers
from .events import record_event
from .runtime import tidy
from .tensor import tensor
from .trainable import TrainableModel
from .training import Trainer

FORMAT = "py_in_browser.checkpoint.v1"


async def save(model: TrainableModel, trainer: Trainer, event: bool = True) -> bytes:
    """The checkpoint blob of `model` and of its `trainer`'s data cursor (and running fit); a
    "checkpoint" runtime event unless event=False (recovery.py's frequent host checkpoints)."""
    arrays: dict[str, Any] = {"format": np.array(FORMAT)}
    opt = model.optimizer
    # Every read at once: on a GPU each read waits for the device, and recovery checkpoints
    # often (a read after another costs W2 ~15 waits a checkpoint; together they cost ~one).
    weights, states, draws, (progress, accumulators) = await asyncio.gather(
        model.get_weights(),
        asyncio.gather(*(var.numpy() for var in (opt.variables() if opt else []))),
        asyncio.gather(*(_draw_count(la) for la in model.layers)),
        trainer.saved_progress(),
    )
    for i, w in enumerate(weights):
        arrays[f"weights/{i:04d}"] = w
    arrays["optimizer/config"] = np.array(json.dumps(opt.get_config()) if opt else "")
    for i, state in enumerate(states):
        arrays[f"optimizer/state/{i:04d}"] = state
    arrays["rng/seed"] = np.array(model.seed)
    arrays["rng/dropout_calls"] = np.array(draws)
    if accumulators is not None:
        arrays["progress/accumulators"] = accumulators
    arrays["progress/json"] = np.array(json.dumps(progress))
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    if event:
        step = int(await opt.iterations.item()) if opt and opt.iterations is not None else 0
        record_event("checkpoint", step, epoch=progress.get("epoch"), batch=progress.get("batch"))
    return buffer.getvalue()


async def _draw_count(layer: Any) -> int:
    """How many random draws `layer` has made (Dropout masks, augmentations); 0 for others."""
    return int(await layer.draw_count()) if hasattr(layer, "draw_count") else 0


def load(model: TrainableModel, trainer: Trainer, blob: bytes) -> None:
    """Restores `blob` into `model` and hands its data cursor to `trainer` (fit(resume=True))."""
    with np.load(io.BytesIO(blob), allow_pickle=False) as data:
        if "format" not in data or str(data["format"]) != FORMAT:
            raise ValueError(f"load_checkpoint: not a {FORMAT} blob")
        n_weights = len([k for k in data.files if k.startswith("weights/")])
        model.set_weights([data[f"weights/{i:04d}"] for i in range(n_weights)])
        config = str(data["optimizer/config"])
        states = [
            data[k] for k in sorted(k for k in data.files if k.startswith("optimizer/state/"))
        ]
        if config:
            _restore_optimizer(model, json.loads(config), states)
        calls = data["rng/dropout_calls"]
        if len(calls) != len(model.layers):
            raise ValueError("load_checkpoint: the checkpoint has a different number of layers")
        for layer, count in zip(model.layers, calls, strict=True):
            if hasattr(layer, "set_draw_count"):
                layer.set_draw_count(int(count))
        accumulators = data.get("progress/accumulators")
        trainer.restore_progress(json.loads(str(data["progress/json"])), accumulators)


def _restore_optimizer(model: TrainableModel, config: dict[str, Any], states: list[np.ndarray]):
    opt = model.optimizer
    if opt is None or opt.get_config() != config:
        model.optimizer = opt = optimizers.from_config(config)
    if not states:
        return
    opt.build(model.trainable_weights)
    variables = opt.variables()
    if len(variables) != len(states):
        raise ValueError("load_checkpoint: optimizer state does not match this model's weights")
    with tidy():
        for var, value in zip(variables, states, strict=True):
            var.assign(tensor(value, dtype=var.dtype))
