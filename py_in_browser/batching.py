"""Batch sizing within device limits: which batch one train step can run in a single pass.

Before a step runs the engine knows the physical size of every tensor it will allocate: a train
step's tensors with a batch axis are the input, each layer's output and their gradients (same
shapes; no kernel materialises more, e.g. the convolutions read im2col without storing it); the
weights, their gradients and the optimizer slots have the weights' shapes. Backend.tensor_fits
says whether one tensor fits (WebGL2: one texture within MAX_TEXTURE_SIZE; WebGPU: one storage
binding within maxStorageBufferBindingSize). fit, evaluate and predict split a bigger batch
into micro-batches of max_batch_size (training.py accumulates their gradients).
"""

from __future__ import annotations

from .backends import Backend
from .limits import DEFAULT_LIMITS
from .runtime import current_backend
from .trainable import TrainableModel


class ExampleTooLargeError(ValueError):
    """Even one example (or one weight) of the model does not fit within the device limits; the
    message names the layer and the limit. Raised before training starts.

    Example:
        >>> await pib.init("cpu", limits={"max_allocation_bytes": 4096})
        'cpu'
        >>> model = pib.Sequential([pib.layers.Activation("relu", input_shape=(2000,))])
        >>> try:
        ...     pib.max_batch_size(model)
        ... except pib.ExampleTooLargeError as err:
        ...     print(err)
        a single example does not fit in one pass: the input: cpu: a tensor of shape (1, 2000) needs 8000 bytes, over this backend's max_allocation_bytes (4096)
        >>> await pib.init("cpu")
        'cpu'
    """


def _batched_shapes(model: TrainableModel) -> list[tuple[str, tuple[int, ...]]]:
    """(owner, per-example shape) of every tensor a train step allocates with a batch axis."""
    assert model.input_shape is not None
    shapes = [("the input", tuple(model.input_shape))]
    for layer in model.layers:
        assert layer.output_shape is not None
        shapes.append((f"layer {layer.name!r}", tuple(layer.output_shape)))
    return shapes


def _misfit(backend: Backend, model: TrainableModel, batch: int) -> str | None:
    """Why a step of `batch` examples cannot run in one pass, or None when it can."""
    for owner, shape in _batched_shapes(model):
        reason = backend.tensor_fits((batch, *shape))
        if reason is not None:
            return f"{owner}: {reason}"
    return None


def max_batch_size(model: TrainableModel, backend: Backend | None = None) -> int:
    """The largest batch one training pass of `model` fits within the device limits of the
    current backend (at most the engine's max_batch_size cap, 1024).

    fit, evaluate and predict split bigger batches into micro-batches of this size and
    accumulate the gradients, so the update equals the full batch's (fit then reports it in
    history.params["micro_batch_size"]). A model whose single
    example (or one weight) does not fit raises ExampleTooLargeError naming the layer and the
    limit. The model is built first if it is not.

    Example:
        >>> model = pib.Sequential([pib.layers.Dense(4, input_shape=(8,))])
        >>> pib.max_batch_size(model)
        1024
    """
    backend = backend or current_backend()
    if not model.built:
        model.build()
    for layer in model.layers:
        for weight in layer.weights:
            reason = backend.tensor_fits(tuple(weight.shape))
            if reason is not None:
                raise ExampleTooLargeError(f"layer {layer.name!r}: its weight {reason}")
    reason = _misfit(backend, model, 1)
    if reason is not None:
        raise ExampleTooLargeError(f"a single example does not fit in one pass: {reason}")
    fits, over = 1, DEFAULT_LIMITS.max_batch_size + 1
    if _misfit(backend, model, over - 1) is None:
        return over - 1
    while over - fits > 1:  # a tensor's footprint grows with the batch: bisect
        middle = (fits + over) // 2
        if _misfit(backend, model, middle) is None:
            fits = middle
        else:
            over = middle
    return fits
