"""Sequential: a stack of layers with Keras' compile / fit / evaluate / predict surface."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Literal, overload

import numpy as np

from . import checkpoint, model_file, optimizers, recovery, resilience, training
from .callbacks import History
from .interop import tfjs
from .nn import activations, losses
from .nn import metrics as metric_lib
from .nn.layers import Layer
from .runtime import tidy
from .tensor import Tensor, Variable, tensor


class Sequential:
    """Layers applied in order; weights are created lazily from the first input shape.

    `seed` (default 0) fixes every initializer and dropout mask: see nn/initializers.py.

    The Keras surface: add layers, `compile` with an optimizer, loss and metrics, then `fit`,
    `evaluate`, `predict` (all awaited, so training never blocks the page). Calling the model
    runs the layers in order on a tensor.

    Example:
        >>> model = pib.Sequential(
        ...     [
        ...         pib.layers.Dense(8, activation="relu", input_shape=(2,)),
        ...         pib.layers.Dense(1, activation="sigmoid"),
        ...     ],
        ...     seed=1,
        ... )
        >>> model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
        >>> x = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], np.float32)
        >>> y = np.array([0, 1, 1, 1], np.float32)
        >>> history = await model.fit(x, y, epochs=3, batch_size=4)
        >>> sorted(history.history)
        ['accuracy', 'loss']
        >>> model(x).shape
        (4, 1)
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
        # Host copies of the variables, rebuilt on a new device after a loss (resilience.py);
        # it holds the model weakly, as the Trainer does.
        self.device_state = _device_state(self)
        for layer in layers or []:
            self.add(layer)

    def add(self, layer: Layer) -> None:
        """Appends an unbuilt layer; it is seeded from the model's seed and its position.

        Example:
            >>> model = pib.Sequential()
            >>> model.add(pib.layers.Dense(3, input_shape=(2,)))
            >>> len(model.layers)
            1
        """
        if not isinstance(layer, Layer):
            raise TypeError(f"Sequential.add expects a Layer, got {type(layer).__name__}")
        if layer.built:
            raise ValueError(f"layer {layer.name!r} is already built; add fresh layers")
        layer.seed = (self.seed, len(self.layers))
        self.layers.append(layer)

    # ---- building ----

    @property
    def built(self) -> bool:
        """Whether every layer has its weights (after `build` or a first call)."""
        return bool(self.layers) and all(layer.built for layer in self.layers)

    @property
    def input_shape(self) -> tuple[int, ...] | None:
        """The first layer's input shape without the batch axis; None until known."""
        return self.layers[0].input_shape if self.layers else None

    @property
    def output_shape(self) -> tuple[int, ...]:
        """The last layer's output shape without the batch axis (builds the model if needed)."""
        self._require_built()
        shape = self.layers[-1].output_shape
        assert shape is not None
        return shape

    def build(self, input_shape: Sequence[int] | None = None) -> None:
        """Creates all weights; input_shape excludes the batch axis (e.g. (64, 64, 3)).

        Without an argument, the first layer's input_shape is used.

        Example:
            >>> model = pib.Sequential([pib.layers.Flatten(), pib.layers.Dense(4)])
            >>> model.build((8, 8, 3))
            >>> model.output_shape, model.count_params()
            ((4,), 772)
        """
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
        """The layers applied in order to a batch (a tensor or array); builds on first use."""
        x = x if isinstance(x, Tensor) else tensor(x)
        if not self.built:
            self.build(x.shape[1:])
        for layer in self.layers:
            x = layer(x, training=training)
        return x

    # ---- weights ----

    @property
    def weights(self) -> list[Variable]:
        """Every layer's weights, layer by layer (the order of get_weights and set_weights)."""
        return [w for layer in self.layers for w in layer.weights]

    @property
    def trainable_weights(self) -> list[Variable]:
        """The weights the optimizer updates, layer by layer."""
        return [w for layer in self.layers for w in layer.trainable_weights]

    @property
    def non_trainable_weights(self) -> list[Variable]:
        """The other weights (BatchNormalization's moving statistics), layer by layer."""
        return [w for layer in self.layers for w in layer.non_trainable_weights]

    def count_params(self) -> int:
        """Number of scalars in all weights (builds the model if needed).

        Example:
            >>> model = pib.Sequential([pib.layers.Dense(3, input_shape=(2,))])
            >>> model.count_params()  # kernel 2 * 3, bias 3
            9
        """
        self._require_built()
        return sum(w.size for w in self.weights)

    async def get_weights(self) -> list[np.ndarray]:
        """Host copies in Keras order (per layer: kernel, bias; BN: gamma, beta, mean, var).

        Example:
            >>> model = pib.Sequential([pib.layers.Dense(3, input_shape=(2,))])
            >>> [w.shape for w in await model.get_weights()]
            [(2, 3), (3,)]
        """
        self._require_built()

        async def read() -> list[np.ndarray]:
            # Read together: on a GPU each read waits for the device, together they wait once.
            return list(await asyncio.gather(*(w.numpy() for w in self.weights)))

        return await resilience.guarded(read, self.device_state)

    def set_weights(self, weights: Sequence[Any]) -> None:
        """Replaces every weight from arrays in get_weights' order; each shape must match.

        Example:
            >>> model = pib.Sequential([pib.layers.Dense(1, input_shape=(2,))])
            >>> model.set_weights([np.array([[1.0], [2.0]]), np.array([0.5])])
            >>> await model(np.array([[1.0, 1.0]])).numpy()
            array([[3.5]], dtype=float32)
        """
        self._require_built()
        current = self.weights
        if len(weights) != len(current):
            raise ValueError(f"set_weights: expected {len(current)} arrays, got {len(weights)}")
        arrays = [np.asarray(value) for value in weights]
        for var, array in zip(current, arrays, strict=True):
            if array.shape != var.shape:
                raise ValueError(
                    f"set_weights: {var.name} expects shape {var.shape}, got {array.shape}"
                )
        for var, array in zip(current, arrays, strict=True):
            with tidy():
                var.assign(tensor(array, dtype=var.dtype))
        # The arrays are the host copies: a device lost now rebuilds them (no read needed).
        self.device_state.keep(list(zip(current, arrays, strict=True)))
        self._trainer.drop_recordings()  # re-recorded from the new weights on the next step

    def summary(self, print_fn: Callable[[str], Any] | None = print) -> str:
        """A Keras-like table of layers, output shapes and parameter counts; printed and returned.

        Pass print_fn=None to only return the text.

        Example:
            >>> model = pib.Sequential([pib.layers.Dense(3, activation="relu", input_shape=(2,))])
            >>> print(model.summary(print_fn=None).splitlines()[-3])
            Total params: 9
        """
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
        """Resolves the optimizer, loss and metrics (names use Keras defaults).

        optimizer: an `optimizers.Optimizer` or a name ("sgd", "rmsprop", "adam", "adamw");
        loss: a `losses.Loss` or a name (required); metrics: names such as "accuracy" (resolved
        from the loss, as Keras) or `metrics.Accuracy` objects. Compiling again starts a new
        optimizer state.

        Example:
            >>> model = pib.Sequential([pib.layers.Dense(2, input_shape=(4,))])
            >>> model.compile(optimizer="adam", loss="categorical_crossentropy", metrics=["acc"])
            >>> model.optimizer.get_config()["name"], model.loss.name
            ('adam', 'categorical_crossentropy')
        """
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
        """The compiled metrics as objects (names resolved against the loss and output shape).

        Example:
            >>> model = pib.Sequential([pib.layers.Dense(3, input_shape=(4,))])
            >>> loss = "sparse_categorical_crossentropy"
            >>> model.compile(optimizer="sgd", loss=loss, metrics=["accuracy"])
            >>> [m.kind for m in model.resolved_metrics()]
            ['sparse']
        """
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
        fit's: the same NaN-safe gated update, and on webgpu/webgl2 (and cpu with its SIMD module)
        the same recordings, so from the third call with the same batch shapes the step is
        replayed with O(1) Python work (from JS on the GPU backends, by the module on cpu); fit
        and train_on_batch share those recordings.

        Returns the batch loss as a Tensor that has NOT been read back: nothing waits for the GPU
        unless you ask, e.g. `await loss.numpy()` every 10 steps (dispose it when done). With
        return_dict=True it waits and returns {"loss": float, <metric>: float} for this batch.
        A batch whose loss is NaN/Inf changes nothing (weights, slots, step counter); its
        returned loss shows the NaN.

        Example:
            >>> dense = pib.layers.Dense(1, kernel_initializer="zeros", input_shape=(1,))
            >>> model = pib.Sequential([dense])
            >>> model.compile(optimizer="sgd", loss="mse")
            >>> x = y = np.ones((4, 1), np.float32)
            >>> loss = await model.train_on_batch(x, y)
            >>> await loss.item()  # the loss before the step
            1.0
            >>> logs = await model.train_on_batch(x, y, return_dict=True)
            >>> round(logs["loss"], 4)  # (1 - 0.04)^2 after the first step
            0.9216
        """
        trainer, state = self._trainer, self.device_state
        if not resilience.losable():
            return await trainer.train_on_batch(x, y, return_dict=return_dict)
        self._build_state()
        replay_x, replay_y, nbytes = _replay_inputs(x), _replay_inputs(y), _nbytes(x, y)

        async def replay() -> None:
            result = await trainer.train_on_batch(replay_x, replay_y)
            if isinstance(result, Tensor):
                result.dispose()

        async def step() -> Tensor | dict[str, float]:
            if state.missing():  # new variables (a first step's slots): their copies first
                await state.sync()
            result = await trainer.train_on_batch(x, y, return_dict=return_dict)
            if state.record(replay, nbytes):
                await state.sync()
            return result

        return await resilience.guarded(step, state, settle=False, inputs=(x, y))

    def _build_state(self) -> None:
        """Makes the optimizer's slots of a built model before a training call, so that they
        exist (and get host copies) before its first step changes them."""
        if self.built and self.optimizer is not None:
            self.optimizer.build(self.trainable_weights)

    def _device_variables(self) -> list[Variable]:
        """Everything of this model on the device: weights, Dropout draw counters, the
        optimizer's step and slots (what a rebuild after a device loss uploads)."""
        own = [v for layer in self.layers for v in (*layer.weights, *layer.state_variables())]
        return own + (self.optimizer.variables() if self.optimizer is not None else [])

    async def fit(self, x: Any, y: Any, **kwargs: Any) -> History:
        """Trains for `epochs` passes over (x, y); returns the History of per-epoch logs.

        Args:
            x: inputs of shape ``(samples, *input_shape)``, a numpy array or nested lists.
            y: targets as the loss expects them (class labels for sparse losses).
            epochs: train until this epoch index (default 1).
            batch_size: samples per step (default 32; the last batch may be smaller).
            shuffle: a new sample order each epoch, drawn from (seed, epoch) (default True).
            seed: the data order's seed (default 0); weights come from the model's seed.
            validation_split: the last fraction of x, y held out and evaluated each epoch.
            validation_data: (x_val, y_val) evaluated each epoch, as val_loss and val_<metric>.
            callbacks: `callbacks.Callback` objects (a History is always added).
            verbose: 1 prints one line per epoch.
            initial_epoch: the epoch to start from.
            resume: continue exactly where the checkpoint given to load_checkpoint stopped
                (epoch, batch, data order and the epoch's running sums).
            recovery_every: on webgpu and webgl2, steps between the host checkpoints that a
                lost context or device is recovered from (default 50; None: no recovery).
            recovery_timeout_s: how long a lost device may take to come back before training
                moves to the next backend (webgpu, webgl2, cpu; default 10 s).
            on_hidden: "pause" (default): when the page is hidden, finish the step, write a
                checkpoint to IndexedDB and wait until it is visible; "continue": train on.
            resume: also "auto": continue from the checkpoint a hidden page wrote before a
                reload, if there is one (recovery.py).
            permit: a training permit token from a server that requires them (POST
                /api/training/permits): fit refuses, with `PermitError`, to run more epochs,
                samples or a bigger batch than it grants, or past its expiry (permits.py).

        A step with a NaN or Inf loss changes nothing and fit raises NonFiniteLossError. A lost
        GPU context or device is recovered (recovery.py): the final weights are those of an
        uninterrupted run, and callbacks hear it through on_runtime_event.

        Example:
            >>> model = pib.Sequential([pib.layers.Dense(1, input_shape=(3,))])
            >>> model.compile(optimizer=pib.optimizers.SGD(0.1), loss="mse")
            >>> x = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
            >>> y = x @ np.array([[1.0], [-2.0], [0.5]], np.float32)
            >>> history = await model.fit(x, y, epochs=20, batch_size=16, validation_split=0.25)
            >>> losses = history.history["loss"]
            >>> losses[-1] < 0.01 * losses[0], sorted(history.history)
            (True, ['loss', 'val_loss'])
        """

        async def run() -> History:
            self.history = History()  # this fit's, also when it raises
            self.stop_training = False
            return await recovery.fit(self, self._trainer, self.history, x, y, **kwargs)

        state = self.device_state
        if not resilience.losable():
            return await run()
        self._build_state()
        if state.missing():
            # Host copies of the state fit starts from, so that a loss it cannot recover by
            # itself (recovery_every=None) runs it again from there.
            await resilience.guarded(state.sync, state)
        return await resilience.guarded(run, state, sync=True, inputs=(x, y))

    async def evaluate(self, x: Any, y: Any, batch_size: int = 32, verbose: int = 0):
        """Mean loss and metrics over (x, y) in inference mode: {"loss": ..., <metric>: ...}.

        Example:
            >>> dense = pib.layers.Dense(1, kernel_initializer="zeros", input_shape=(2,))
            >>> model = pib.Sequential([dense])
            >>> model.compile(optimizer="sgd", loss="mse")
            >>> await model.evaluate(np.ones((4, 2)), np.full((4, 1), 2.0))
            {'loss': 4.0}
        """
        return await resilience.guarded(
            lambda: self._trainer.evaluate(x, y, batch_size=batch_size, verbose=verbose),
            self.device_state,
            inputs=(x, y),
        )

    async def predict(self, x: Any, batch_size: int = 32) -> Tensor:
        """The model's outputs for x (inference mode), batch by batch, as one tensor.

        A tensor input stays on the device; read the result with ``await out.numpy()``. On cpu
        with its SIMD module, webgl2 and webgpu, from the third batch of a shape the forward pass
        is replayed in one call (the same bits); the result is always the caller's own tensor.

        Example:
            >>> dense = pib.layers.Dense(2, kernel_initializer="ones", input_shape=(3,))
            >>> model = pib.Sequential([dense])
            >>> out = await model.predict(np.ones((5, 3)), batch_size=2)
            >>> out.shape, (await out.numpy())[0]
            ((5, 2), array([3., 3.], dtype=float32))
        """
        return await resilience.guarded(
            lambda: self._trainer.predict(x, batch_size=batch_size),
            self.device_state,
            inputs=(x,),
        )

    async def save_checkpoint(self, event: bool = True) -> bytes:
        """An .npz blob of weights, optimizer state, RNG counters and the data cursor; with
        event=False no "checkpoint" runtime event (a caller's own bookkeeping, which the page's
        event banners need not show).

        Example:
            >>> model = pib.Sequential([pib.layers.Dense(1, input_shape=(2,))])
            >>> model.compile(optimizer="adam", loss="mse")
            >>> blob = await model.save_checkpoint()
            >>> blob[:2]  # a zip archive
            b'PK'
        """
        return await resilience.guarded(
            lambda: checkpoint.save(self, self._trainer, event=event), self.device_state
        )

    def load_checkpoint(self, blob: bytes) -> None:
        """Restores a save_checkpoint blob; then fit(..., resume=True) continues where it stopped.

        The model must have the same layers (weights are checked by shape); the optimizer is
        rebuilt from the checkpoint's configuration if it differs.

        Example:
            >>> def make():
            ...     model = pib.Sequential([pib.layers.Dense(1, input_shape=(2,))], seed=7)
            ...     model.compile(optimizer="adam", loss="mse")
            ...     return model
            >>> x, y = np.ones((8, 2)), np.zeros((8, 1))
            >>> trained = make()
            >>> history = await trained.fit(x, y, epochs=1, batch_size=4)
            >>> restored = make()
            >>> restored.load_checkpoint(await trained.save_checkpoint())
            >>> history = await restored.fit(x, y, epochs=2, batch_size=4, resume=True)
            >>> history.epoch  # the second epoch only: the first was done before the checkpoint
            [1]
        """
        checkpoint.load(self, self._trainer, blob)
        self._trainer.drop_recordings()
        self.device_state.changed()
        self.device_state.sync_soon()  # the optimizer's slots too (the weights are kept)

    async def save(
        self,
        *,
        labels: list[str] | None = None,
        preprocessing: dict[str, Any] | None = None,
        description: str = "",
        backbone: dict[str, Any] | None = None,
    ) -> bytes:
        """The engine's model file (see model_file.py for the format): one zip of the
        architecture as Keras-style layer configs, the weights (float32), and the class
        `labels`, `preprocessing` description and `description` an app needs to use it.
        `backbone`: for a head trained on a pretrained backbone's features, the backbone it
        reads (interop/backbones.py Backbone.reference()); the file holds the head alone.

        Example:
            >>> model = pib.Sequential([pib.layers.Dense(2, input_shape=(3,))])
            >>> blob = await model.save(labels=["cat", "dog"])
            >>> blob[:2]  # a zip archive
            b'PK'
        """
        return await resilience.guarded(
            lambda: model_file.dumps(
                self,
                labels=labels,
                preprocessing=preprocessing,
                description=description,
                backbone=backbone,
            ),
            self.device_state,
        )

    async def export_tfjs(
        self,
        *,
        quantize: str | None = None,
        labels: list[str] | None = None,
        preprocessing: dict[str, Any] | None = None,
        description: str = "",
        backbone: dict[str, Any] | None = None,
    ) -> dict[str, str | bytes]:
        """The model as a TensorFlow.js Layers model: {"model.json": text,
        "group1-shard1of1.bin": bytes}, which tf.loadLayersModel reads (format:
        py_in_browser/interop/tfjs.py). quantize="float16" halves the weight bytes (as the TF.js
        converter's --quantize_float16; weights round to half precision). labels, preprocessing
        and description travel in model.json's userDefinedMetadata, so `pib.load_tfjs` gets the
        same model file back; so does `backbone` (see save). `py_in_browser.interop.tfjs.write_folder` writes the files to a
        folder (CPython), `tfjs.export_zip` zips them.

        Example:
            >>> model = pib.Sequential([pib.layers.Dense(2, input_shape=(3,), name="dense")])
            >>> files = await model.export_tfjs()
            >>> import json
            >>> json.loads(files["model.json"])["weightsManifest"][0]["weights"][0]
            {'name': 'dense/kernel', 'shape': [3, 2], 'dtype': 'float32'}
            >>> len((await model.export_tfjs(quantize="float16"))["group1-shard1of1.bin"])
            16
        """
        blob = await self.save(
            labels=labels, preprocessing=preprocessing, description=description, backbone=backbone
        )
        return tfjs.from_model_file(blob, quantize=quantize)


def _device_state(model: Sequential) -> resilience.DeviceState:
    owner = weakref.ref(model)

    def variables() -> list[Variable]:
        alive = owner()
        return alive._device_variables() if alive is not None else []

    def rebuilt() -> None:
        alive = owner()
        if alive is not None:
            alive._trainer.reset()  # its recorded steps name buffers of the lost device

    return resilience.DeviceState(variables, rebuilt)


def _replay_inputs(value: Any) -> Any:
    """What a replay of a train_on_batch step takes: a copy of host data (the caller may change
    its array afterwards), a tensor as it is (it may be lost with the device: resilience.py)."""
    return value if isinstance(value, Tensor) else np.array(value)


def _nbytes(*values: Any) -> int:
    return sum(0 if isinstance(v, Tensor) else np.asarray(v).nbytes for v in values)


def loads(data: bytes) -> tuple[Sequential, model_file.ModelHeader]:
    """A built Sequential and the file's header (labels, input shape, preprocessing) from a
    model file written by Sequential.save; ModelFileError names what is malformed.

    Example:
        >>> from py_in_browser.model import loads
        >>> model = pib.Sequential([pib.layers.Dense(2, input_shape=(3,))])
        >>> loaded, header = loads(await model.save(labels=["cat", "dog"]))
        >>> header.labels, loaded.count_params()
        (['cat', 'dog'], 8)
    """
    contents = model_file.read(data)
    header = contents.header
    model = Sequential(contents.layers, name=header.name, seed=header.seed)
    model.build(header.input_shape)
    model.set_weights(contents.weights)
    return model, header


async def load_model(data: bytes) -> Sequential:
    """The reverse of ``await model.save()``: the model, built, with its weights.

    Example:
        >>> model = pib.Sequential([pib.layers.Dense(2, input_shape=(3,))])
        >>> loaded = await pib.load_model(await model.save())
        >>> [w.shape for w in await loaded.get_weights()]
        [(3, 2), (2,)]
    """
    return loads(data)[0]


async def load_tfjs(source: Any) -> Sequential:
    """A TensorFlow.js Layers model as a built Sequential with its weights: `source` is the
    files ({"model.json": text or bytes, "<shard>.bin": bytes, ...}), the URL of a model.json
    (fetched in the browser; shards next to it) or, in CPython, a folder or model.json path.
    An unsupported layer or setting, a missing shard or a weight of the wrong shape raises
    py_in_browser.interop.tfjs.FormatError (a ModelFileError) naming it.

    Example:
        >>> model = pib.Sequential([pib.layers.Dense(2, input_shape=(3,))])
        >>> loaded = await pib.load_tfjs(await model.export_tfjs())
        >>> [w.shape for w in await loaded.get_weights()]
        [(3, 2), (2,)]
    """
    return loads(tfjs.to_model_file(await tfjs.read_source(source)))[0]
