"""Top-k predictions: ranked on the device, only the k best per example read back."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import functional as F
from .. import resilience
from ..model import Sequential
from ..runtime import tidy
from ..tensor import Tensor, tensor


def _ranked(probabilities: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """(indices, values), each (N, k): k rounds of argmax and max over the classes, each round
    masking its winner to -inf, all on the device."""
    classes = probabilities.shape[-1]
    indices, values = [], []
    remaining = probabilities
    for _ in range(k):
        best = F.argmax(remaining, axis=-1)
        indices.append(F.reshape(best, (-1, 1)))
        values.append(F.max(remaining, axis=-1, keepdims=True))
        taken = F.cast(F.one_hot(best, classes), "bool")
        remaining = F.where(taken, float("-inf"), remaining)
    return F.concat(indices, axis=1), F.concat(values, axis=1)


async def top_k(
    model: Callable[..., Tensor],
    images: Any,
    k: int = 1,
    labels: Sequence[str] | None = None,
) -> list[list[dict[str, Any]]]:
    """The k most likely classes of each example, best first: JSON-able dicts with the class
    `index`, its `score` (the model's output there: a probability after softmax) and, with
    `labels`, its `label`.

    `model` is called on `images` (a batch) in inference mode; argmax and max run on the device
    and only (N, k) indices and scores are read back.

    Example:
        >>> model = pib.Sequential([pib.layers.Dense(3, activation="softmax")])
        >>> model.build((2,))
        >>> model.set_weights([np.array([[0.0, 1, 2], [0, 0, 0]]), np.zeros(3)])
        >>> best = await pib.data.top_k(model, np.array([[1.0, 0.0]]), k=2, labels=["a", "b", "c"])
        >>> [(r["label"], round(r["score"], 3)) for r in best[0]]
        [('c', 0.665), ('b', 0.245)]
    """
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"top_k: k must be a positive int, got {k!r}")
    # A lost device is recovered (the model rebuilt) and the ranking run again: resilience.py.
    return await resilience.guarded(
        lambda: _top_k(model, images, k, labels), resilience.state_of(model), inputs=(images,)
    )


async def _top_k(
    model: Callable[..., Tensor], images: Any, k: int, labels: Sequence[str] | None
) -> list[list[dict[str, Any]]]:
    def rank(out: Tensor) -> tuple[Tensor, Tensor]:
        if out.ndim != 2 or not k <= out.shape[1]:
            raise ValueError(f"top_k: needs (N, classes >= {k}) outputs, got shape {out.shape}")
        return _ranked(out, k)

    if isinstance(model, Sequential):
        # The model's pass and the ranking as one recorded pass (forward_replay.py): a replay
        # is one backend call where the backend replays inference, not Python per op.
        batch = images if isinstance(images, Tensor) else np.asarray(images)
        indices, scores = model._trainer.forward_passes(("top_k", k), rank)(batch)
    else:

        def eager() -> tuple[Tensor, Tensor]:
            batch = images if isinstance(images, Tensor) else tensor(images)
            return rank(model(batch, training=False))

        indices, scores = tidy(eager)()
    try:
        index_rows, score_rows = await indices.numpy(), await scores.numpy()
    finally:
        indices.dispose()
        scores.dispose()
    return [
        [
            {"index": int(i), "score": float(s), **({"label": labels[int(i)]} if labels else {})}
            for i, s in zip(row_i, row_s, strict=True)
        ]
        for row_i, row_s in zip(index_rows, score_rows, strict=True)
    ]
