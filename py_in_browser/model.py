"""Sequential: a stack of layers with Keras' compile / fit / evaluate / predict surface."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, overload

import numpy as np

from . import checkpoint, model_file, optimizers, training
from .callbacks import History
from .nn import activations, losses
from .nn import metrics as metric_lib
from .nn.layers import Layer
from .runtime import tidy
from .tensor import Tensor, Variable, tensor


class Sequential:
    """Layers applied in order; weights are created lazily from the first input shape.

    `seed` (default 0) fixes every initializer and dropout mask: see nn/initializers.py.
    """

    def __init__(
        self, layers: Sequence[Layer] | None = None, name: str = "sequential", seed: int = 0
    ) -> None:
        self.name, self.seed = name, int(seed)
        self.layers: list[Layer] = []
        self.optimizer: optimizers.Optimizer | None = None
        self.loss: losses.Loss | None = None
        self._metric_specs: list[Any] = []
        self.metrics: list[metric_lib.Accuracy] = []
        self.stop_training = False
        self.history: History | None = None
        # Everything fit keeps between calls (data cursor, resume, recorded steps) is its own.
        self._trainer = training.Trainer(self)
        for layer in layers or []:
            self.add(layer)

    def add(self, layer: Layer) -> None:
        if not isinstance(layer, Layer):
            raise TypeError(f"Sequential.add expects a Layer, got {type(layer).__name__}")
        if layer.built:
            raise ValueError(f"layer {layer.name!r} is already built; add fresh layers")
        layer.seed = (self.seed, len(self.layers))
        self.layers.append(layer)

    # ---- building ----

    @property
    def built(self) -> bool:
        return bool(self.layers) and all(layer.built for layer in self.layers)

    @property
    def input_shape(self) -> tuple[int, ...] | None:
        return self.layers[0].input_shape if self.layers else None

    @property
    def output_shape(self) -> tuple[int, ...]:
        self._require_built()
        shape = self.layers[-1].output_shape
        assert shape is not None
        return shape

    def build(self, input_shape: Sequence[int] | None = None) -> None:
        """Creates all weights; input_shape excludes the batch axis (e.g. (64, 64, 3))."""
        if not self.layers:
            raise ValueError("Sequential has no layers")
        shape = tuple(input_shape) if input_shape is not None else self.input_shape
        if shape is None:
            raise ValueError(
                "input shape unknown: pass input_shape=... to the first layer or call build(shape)"
            )
        for layer in self.layers:
            if not layer.built:
                layer.build(shape)
            elif layer.input_shape != shape:
                raise ValueError(
                    f"layer {layer.name!r} was built for {layer.input_shape}, not {shape}"
                )
            assert layer.output_shape is not None
            shape = layer.output_shape

    def _require_built(self) -> None:
        if not self.built:
            self.build()

    def __call__(self, x: Any, training: bool = False) -> Tensor:
        x = x if isinstance(x, Tensor) else tensor(x)
        if not self.built:
            self.build(x.shape[1:])
        for layer in self.layers:
            x = layer(x, training=training)
        return x

    # ---- weights ----

    @property
    def weights(self) -> list[Variable]:
        return [w for layer in self.layers for w in layer.weights]

    @property
    def trainable_weights(self) -> list[Variable]:
        return [w for layer in self.layers for w in layer.trainable_weights]

    @property
    def non_trainable_weights(self) -> list[Variable]:
        return [w for layer in self.layers for w in layer.non_trainable_weights]

    def count_params(self) -> int:
        self._require_built()
        return sum(w.size for w in self.weights)

    async def get_weights(self) -> list[np.ndarray]:
        """Host copies in Keras order (per layer: kernel, bias; BN: gamma, beta, mean, var)."""
        self._require_built()
        return [await w.numpy() for w in self.weights]

    def set_weights(self, weights: Sequence[Any]) -> None:
        self._require_built()
        current = self.weights
        if len(weights) != len(current):
            raise ValueError(f"set_weights: expected {len(current)} arrays, got {len(weights)}")
        for var, value in zip(current, weights, strict=True):
            array = np.asarray(value)
            if array.shape != var.shape:
                raise ValueError(
                    f"set_weights: {var.name} expects shape {var.shape}, got {array.shape}"
                )
            with tidy():
                var.assign(tensor(array, dtype=var.dtype))
        self._trainer.drop_recordings()  # re-recorded from the new weights on the next step

    def summary(self, print_fn: Callable[[str], Any] | None = print) -> str:
        """A Keras-like table of layers, output shapes and parameter counts; printed and returned."""
        self._require_built()
        rows = [("Layer (type)", "Output Shape", "Param #")]
        for layer in self.layers:
            kind = type(layer).__name__
            act = getattr(layer, "activation", None)
            if act is not None and kind != "Activation":
                kind += f", {activations.name_of(act)}"
            shape = str((None, *(layer.output_shape or ())))
            rows.append((f"{layer.name} ({kind})", shape, f"{layer.count_params():,}"))
        widths = [max(len(r[i]) for r in rows) + 2 for i in range(3)]
        rule = "=" * sum(widths)
        lines = [f'Model: "{self.name}"', rule]
        for i, row in enumerate(rows):
            lines.append("".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
            lines.append(rule if i == 0 else "-" * sum(widths))
        trainable = sum(w.size for w in self.trainable_weights)
        lines[-1] = rule
        lines += [
            f"Total params: {self.count_params():,}",
            f"Trainable params: {trainable:,}",
            f"Non-trainable params: {self.count_params() - trainable:,}",
        ]
        text = "\n".join(lines)
        if print_fn is not None:
            print_fn(text)
        return text

    # ---- training ----

    def compile(self, optimizer: Any = "rmsprop", loss: Any = None, metrics: Any = None) -> None:
        """Resolves the optimizer, loss and metrics (names use Keras defaults)."""
        if loss is None:
            raise ValueError(f"compile: loss is required; one of {sorted(losses.LOSSES)}")
        if self.optimizer is not None:
            self.optimizer.dispose()
        self._trainer.reset()
        self.optimizer = optimizers.get(optimizer)
        self.loss = losses.get(loss)
        specs = [] if metrics is None else list(metrics)
        for spec in specs:
            if not isinstance(spec, str | metric_lib.Accuracy):
                raise ValueError(f"metrics: expected names like 'accuracy', got {spec!r}")
        self._metric_specs = specs
        self.metrics = []

    def resolved_metrics(self) -> list[metric_lib.Accuracy]:
        if not self.metrics and self._metric_specs:
            assert self.loss is not None
            self.metrics = [
                metric_lib.get(m, self.loss, self.output_shape) for m in self._metric_specs
            ]
        return self.metrics

    @overload
    async def train_on_batch(
        self, x: Any, y: Any, return_dict: Literal[False] = False
    ) -> Tensor: ...

    @overload
    async def train_on_batch(
        self, x: Any, y: Any, return_dict: Literal[True]
    ) -> dict[str, float]: ...

    async def train_on_batch(
        self, x: Any, y: Any, return_dict: bool = False
    ) -> Tensor | dict[str, float]:
        """One optimizer step on one batch, like Keras' train_on_batch.

        x, y: numpy arrays / nested lists (checked like fit's, uploaded each call) or tensors
        already on the device (checked by shape and dtype only, never read back). The step is
        fit's: the same NaN-safe gated update, and on webgpu/webgl2 the same recordings, so from
        the third call with the same batch shapes the step is replayed from JS with O(1)
        Python->JS calls; fit and train_on_batch share those recordings.

        Returns the batch loss as a Tensor that has NOT been read back: nothing waits for the GPU
        unless you ask, e.g. `await loss.numpy()` every 10 steps (dispose it when done). With
        return_dict=True it waits and returns {"loss": float, <metric>: float} for this batch.
        A batch whose loss is NaN/Inf changes nothing (weights, slots, step counter); its
        returned loss shows the NaN.
        """
        return await self._trainer.train_on_batch(x, y, return_dict=return_dict)

    async def fit(self, x: Any, y: Any, **kwargs: Any) -> History:
        """See Trainer.fit for the arguments (epochs, batch_size, shuffle, seed, callbacks, ...)."""
        self.history = History()  # this fit's, also when it raises
        self.stop_training = False
        return await self._trainer.fit(x, y, self.history, **kwargs)

    async def evaluate(self, x: Any, y: Any, batch_size: int = 32, verbose: int = 0):
        return await self._trainer.evaluate(x, y, batch_size=batch_size, verbose=verbose)

    async def predict(self, x: Any, batch_size: int = 32) -> Tensor:
        return await self._trainer.predict(x, batch_size=batch_size)

    async def save_checkpoint(self) -> bytes:
        """An .npz blob of weights, optimizer state, RNG counters and the data cursor."""
        return await checkpoint.save(self, self._trainer)

    def load_checkpoint(self, blob: bytes) -> None:
        """Restores a save_checkpoint blob; then fit(..., resume=True) continues where it stopped."""
        checkpoint.load(self, self._trainer, blob)
        self._trainer.drop_recordings()

    async def save(
        self,
        *,
        labels: list[str] | None = None,
        preprocessing: dict[str, Any] | None = None,
        description: str = "",
    ) -> bytes:
        """The engine's model file (model_file.py): architecture, weights, labels, description."""
        return await model_file.dumps(
            self, labels=labels, preprocessing=preprocessing, description=description
        )


def loads(data: bytes) -> tuple[Sequential, model_file.ModelHeader]:
    """A built Sequential and its header from a model file; ModelFileError if malformed."""
    contents = model_file.read(data)
    header = contents.header
    model = Sequential(contents.layers, name=header.name, seed=header.seed)
    model.build(header.input_shape)
    model.set_weights(contents.weights)
    return model, header


async def load_model(data: bytes) -> Sequential:
    """The reverse of `await model.save()`: `model = await pib.load_model(blob)`."""
    return loads(data)[0]
