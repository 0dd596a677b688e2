"""The feature x backend matrix: one table of small training cases over the public surface.

Every case builds its models through the public API only, trains a few steps with fixed seeds on
tiny data and returns plain JSON data: per-epoch losses and metrics, the final weights and
whatever its feature produces (evaluate's logs, predict's outputs, callback reports, ...).
CPython runs the table on cpu for the reference (tests_unit/test_feature_matrix.py); the browser
runs the same functions from the engine wheel on every backend (tests_e2e/test_feature_matrix.py):
`await run_cases([...names])`.

`covers` names the public features a case exercises, as "<kind>:<name>" (see FEATURE_KINDS). The
coverage test (tests_unit/test_feature_matrix.py) enumerates the public surface from the package,
requires every feature to appear in some case's covers, and checks the claims it can read off a
built model against that model.
"""

from __future__ import annotations

import contextlib
import io
import time
import traceback
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

import py_in_browser as pib
from py_in_browser import layers, losses, optimizers, permits
from py_in_browser.testing import graph_models

EPOCHS = 2
BATCH = 4
# 14 samples in batches of 4: three full batches and a ragged one per epoch, so a GPU backend
# records, replays (from the third step of a shape) and handles a second batch shape.
SAMPLES = 14
CLASSES = 3

FEATURE_KINDS = {
    "layer": "a layer class exported by nn.layers",
    "layer-option": "a layer constructor argument given a non-default value (Class.arg)",
    "initializer": "an initializer name used by a layer",
    "activation": "an activation name",
    "loss": "a loss class, with '(from_logits)' for its logits form",
    "loss-name": "a loss given to compile by name",
    "optimizer": "an optimizer class",
    "optimizer-option": "an optimizer constructor argument given a non-default value (Class.arg)",
    "optimizer-name": "an optimizer given to compile by name",
    "metric": "a metric name given to compile",
    "metric-kind": "how an accuracy is computed: binary, categorical or sparse",
    "callback": "a callback class (Callback: a user subclass)",
    "method": "a public method of Sequential",
    "fit-option": "a keyword argument of fit",
}

Arrays = tuple[np.ndarray, np.ndarray]
ModelFactory = Callable[[], pib.Sequential]
Procedure = Callable[[ModelFactory, Arrays], Awaitable[dict[str, Any]]]


# ---- data ----------------------------------------------------------------------------------------


def _features(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.Generator(np.random.PCG64(seed))
    return rng.standard_normal((SAMPLES, *shape)).astype(np.float32)


def _labels(x: np.ndarray) -> np.ndarray:
    """Classes from a fixed projection of the inputs, so the data is learnable and balanced-ish."""
    flat = x.reshape(len(x), -1)
    projection = np.random.Generator(np.random.PCG64(99)).standard_normal((flat.shape[1], CLASSES))
    return np.argmax(flat @ projection, axis=1).astype(np.int32)


def regression() -> Arrays:
    x = _features(1, (3,))
    return x, (x @ np.array([[1.0, -0.5], [0.3, 0.8], [-1.2, 0.2]], np.float32)).astype(np.float32)


def classes() -> Arrays:
    x = _features(2, (3,))
    return x, _labels(x)


def one_hot() -> Arrays:
    x, labels = classes()
    return x, np.eye(CLASSES, dtype=np.float32)[labels]


def binary() -> Arrays:
    x = _features(3, (3,))
    return x, (x.sum(axis=1, keepdims=True) > 0).astype(np.float32)


def images() -> Arrays:
    x = _features(4, (6, 6, 2))
    return x, _labels(x)


# ---- what a case returns -------------------------------------------------------------------------


async def weights_of(model: pib.Sequential) -> list[Any]:
    return [w.tolist() for w in await model.get_weights()]


async def trained(model: pib.Sequential, history: pib.History) -> dict[str, Any]:
    """Per-epoch logs (loss, metrics, val_*), the epochs that ran, and the final weights."""
    return {
        "history": {k: [float(v) for v in vs] for k, vs in history.history.items()},
        "epochs": list(history.epoch),
        "weights": await weights_of(model),
    }


# ---- procedures: how a case drives its models ----------------------------------------------------


async def fit(make: ModelFactory, data: Arrays) -> dict[str, Any]:
    model = make()
    history = await model.fit(*data, epochs=EPOCHS, batch_size=BATCH, seed=0)
    return await trained(model, history)


async def fit_validation_split(make: ModelFactory, data: Arrays) -> dict[str, Any]:
    model = make()
    history = await model.fit(*data, epochs=EPOCHS, batch_size=BATCH, validation_split=0.25)
    return await trained(model, history)


async def fit_recovery_options(make: ModelFactory, data: Arrays) -> dict[str, Any]:
    """Recovery checkpoints every 2 steps and training on while hidden change no number: the
    result equals a plain fit's (the recovery tests lose the device for real)."""
    model = make()
    history = await model.fit(
        *data,
        epochs=EPOCHS,
        batch_size=BATCH,
        recovery_every=2,
        recovery_timeout_s=5.0,
        on_hidden="continue",
    )
    return await trained(model, history)


def permit_for(model: pib.Sequential, epochs: int, samples: int, batch_size: int) -> str:
    """A token as a server's POST /api/training/permits answers it (the engine reads its bounds;
    only the server checks the signature, so any key does here)."""
    now = time.time()
    granted = permits.Permit(
        id="feature-case",
        client="127.0.0.1",
        issued_at=now,
        expires_at=now + 600,
        max_epochs=epochs,
        max_samples=samples,
        max_batch_size=batch_size,
        param_count=model.count_params(),
        input_shape=tuple(model.input_shape or ()),
    )
    return permits.sign(granted, b"feature-case key")


async def fit_within_a_permit(make: ModelFactory, data: Arrays) -> dict[str, Any]:
    """A permit one epoch short is refused before any step (the weights stay as built); the
    permit that fits trains exactly as a plain fit."""
    model = make()
    model.build(model.input_shape)
    built = await weights_of(model)
    refused = ""
    try:
        await model.fit(
            *data,
            epochs=EPOCHS,
            batch_size=BATCH,
            permit=permit_for(model, EPOCHS - 1, SAMPLES, BATCH),
        )
    except pib.PermitError as err:
        refused = str(err)
    unchanged = await weights_of(model) == built
    token = permit_for(model, EPOCHS, SAMPLES, BATCH)
    history = await model.fit(*data, epochs=EPOCHS, batch_size=BATCH, permit=token)
    return {**await trained(model, history), "refused": refused, "unchanged": unchanged}


async def fit_validation_data_early_stopping(make: ModelFactory, data: Arrays) -> dict[str, Any]:
    """val_loss cannot improve by 100, so training stops after the second epoch of four and the
    first epoch's weights come back: the decision does not hinge on float rounding."""
    x, y = data
    model = make()
    stop = pib.EarlyStopping(monitor="val_loss", min_delta=100.0, restore_best_weights=True)
    history = await model.fit(
        x[:10],
        y[:10],
        epochs=4,
        batch_size=BATCH,
        validation_data=(x[10:], y[10:]),
        callbacks=[stop],
    )
    return {**await trained(model, history), "stopped_epoch": stop.stopped_epoch}


class BatchLossRecorder(pib.Callback):
    """A user callback with a coroutine hook, as a UI saving or reporting per batch would be."""

    wants_batch_logs = True

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Any] = []

    async def on_batch_end(self, batch: int, logs: dict[str, Any]) -> None:
        assert self.model is not None
        self.seen.append([batch, logs["size"], logs["loss"]])

    def on_train_end(self, logs: dict[str, Any]) -> None:
        self.seen.append("end")


async def fit_with_callbacks(make: ModelFactory, data: Arrays) -> dict[str, Any]:
    model = make()
    epochs_begun: list[int] = []
    lambda_losses: list[float] = []
    reports: list[Any] = []
    custom = BatchLossRecorder()
    callbacks = [
        pib.LambdaCallback(
            on_epoch_begin=lambda epoch, logs: epochs_begun.append(epoch),
            on_batch_end=lambda batch, logs: lambda_losses.append(logs["loss"]),
        ),
        pib.ProgressCallback(
            lambda r: reports.append([r["event"], r["epoch"], r["batch"], r["logs"].get("loss")]),
            every_batches=2,
        ),
        custom,
    ]
    history = await model.fit(*data, epochs=EPOCHS, batch_size=BATCH, callbacks=callbacks)
    return {
        **await trained(model, history),
        "epochs_begun": epochs_begun,
        "batch_losses": lambda_losses,
        "progress": reports,
        "custom": custom.seen,
    }


async def fit_evaluate_predict(make: ModelFactory, data: Arrays) -> dict[str, Any]:
    """Inference after training: evaluate's logs and predict's outputs in uneven batches, from a
    host array and from a device tensor (sliced on the device)."""
    model = make()
    history = await model.fit(*data, epochs=EPOCHS, batch_size=BATCH)
    logs = await model.evaluate(*data, batch_size=5)
    outputs = []
    source = pib.tensor(data[0])
    for x in (data[0], source):
        predicted = await model.predict(x, batch_size=5)
        outputs.append((await predicted.numpy()).tolist())
        predicted.dispose()
    source.dispose()
    return {**await trained(model, history), "evaluate": logs, "predict": outputs}


async def train_on_batch_steps(make: ModelFactory, data: Arrays) -> dict[str, Any]:
    """Steps from host arrays, then from device tensors (checked by shape only, never read
    back), each returning the loss as a device tensor; then one returning the logs dict."""
    x, y = data
    model = make()
    losses_read: list[float] = []
    for step in range(6):
        rows = slice(BATCH * (step % 3), BATCH * (step % 3 + 1))
        if step < 4:
            loss = await model.train_on_batch(x[rows], y[rows])
        else:
            xt, yt = pib.tensor(x[rows]), pib.tensor(y[rows])
            loss = await model.train_on_batch(xt, yt)
            xt.dispose()
            yt.dispose()
        losses_read.append(float(await loss.item()))
        loss.dispose()
    logs = await model.train_on_batch(x[:BATCH], y[:BATCH], return_dict=True)
    return {"losses": losses_read, "logs": logs, "weights": await weights_of(model)}


async def transfer_weights(make: ModelFactory, data: Arrays) -> dict[str, Any]:
    """Weights read from one model (get_weights) and written to a fresh one (set_weights),
    which then trains on: the copy must continue from the trained values."""
    source = make()
    await source.fit(*data, epochs=1, batch_size=BATCH)
    copy = make()
    copy.set_weights(await source.get_weights())
    same = [
        bool(np.array_equal(a, b))
        for a, b in zip(await copy.get_weights(), await source.get_weights(), strict=True)
    ]
    history = await copy.fit(*data, epochs=1, batch_size=BATCH)
    return {**await trained(copy, history), "copied_exactly": same}


class StopAfter(pib.Callback):
    """Saves a checkpoint after a given (epoch, batch) and stops, as a UI's pause button would."""

    def __init__(self, epoch: int, batch: int) -> None:
        super().__init__()
        self.at, self.epoch, self.blob = (epoch, batch), 0, b""

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any]) -> None:
        self.epoch = epoch

    async def on_batch_end(self, batch: int, logs: dict[str, Any]) -> None:
        if (self.epoch, batch) == self.at:
            assert self.model is not None
            self.blob = await self.model.save_checkpoint()
            self.model.stop_training = True


async def checkpoint_resume(make: ModelFactory, data: Arrays) -> dict[str, Any]:
    """A fit paused mid-epoch, restored into a fresh model and resumed, beside the same fit run
    straight through: on cpu the two end bit-identical."""
    settings = {"epochs": 3, "batch_size": BATCH, "seed": 4}
    straight = make()
    straight_history = await straight.fit(*data, **settings)
    paused = make()
    saver = StopAfter(epoch=1, batch=1)
    await paused.fit(*data, callbacks=[saver], **settings)
    resumed = make()
    resumed.load_checkpoint(saver.blob)
    history = await resumed.fit(*data, resume=True, **settings)
    return {
        **await trained(resumed, history),
        "straight": await trained(straight, straight_history),
    }


async def save_and_load_model(make: ModelFactory, data: Arrays) -> dict[str, Any]:
    """A trained model through its model file (model.save, pib.load_model): the loaded model
    predicts as the original and trains on after compile."""
    model = make()
    history = await model.fit(*data, epochs=EPOCHS, batch_size=BATCH)
    blob = await model.save(labels=["a", "b", "c"], description="feature matrix")
    loaded = await pib.load_model(blob)
    outputs = []
    for source in (model, loaded):
        predicted = await source.predict(data[0])
        outputs.append((await predicted.numpy()).tolist())
        predicted.dispose()
    loaded.compile(optimizer=optimizers.SGD(0.05), loss="sparse_categorical_crossentropy")
    loaded_history = await loaded.fit(*data, epochs=1, batch_size=BATCH)
    return {
        **await trained(model, history),
        "predict": outputs,
        "loaded": await trained(loaded, loaded_history),
    }


async def tfjs_round_trip(make: ModelFactory, data: Arrays) -> dict[str, Any]:
    """A trained model through the TF.js Layers format (model.export_tfjs, pib.load_tfjs), with
    float32 and float16 weights: the imports predict as the original (float16 within its bound)."""
    model = make()
    history = await model.fit(*data, epochs=EPOCHS, batch_size=BATCH)
    outputs = []
    for source in (
        model,
        await pib.load_tfjs(await model.export_tfjs()),
        await pib.load_tfjs(await model.export_tfjs(quantize="float16")),
    ):
        predicted = await source.predict(data[0])
        outputs.append((await predicted.numpy()).tolist())
        predicted.dispose()
    return {**await trained(model, history), "predict": outputs}


async def sequential_api(make: ModelFactory, data: Arrays) -> dict[str, Any]:
    """A model assembled with add/build, inspected, called directly and fit from epoch 1 without
    shuffling (initial_epoch), printing its epochs (verbose): the rest of Sequential's surface."""
    model = make()
    forward = model(data[0][:3])
    before = (await forward.numpy()).tolist()
    forward.dispose()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        history = await model.fit(
            *data, epochs=3, batch_size=BATCH, shuffle=False, initial_epoch=1, verbose=1
        )
    return {
        **await trained(model, history),
        "summary": model.summary(print_fn=None),
        "count_params": model.count_params(),
        "metrics": [m.name for m in model.resolved_metrics()],
        "call": before,
        # The lines themselves show 4 decimals, which the GPU backends may round differently.
        "printed_epochs": [line.split(" - ")[0] for line in printed.getvalue().splitlines()],
    }


async def depthwise_fine_tune(make: ModelFactory, data: Arrays) -> dict[str, Any]:
    """A depthwise backbone (3x3 "same", then 3x3 at stride 2 with a channel multiplier of 2)
    fine-tuned with the model on top as its head, by a custom loop: tape gradients through both
    depthwise layers (their filters and, for the first, the second's input gradient) and plain
    SGD steps. Then the image gradient, as a saliency map would read it."""
    x, y = data
    model = make()
    model.build(model.input_shape)
    rng = np.random.Generator(np.random.PCG64(8))
    w1 = pib.Variable(rng.standard_normal((3, 3, 2, 1)).astype(np.float32) * 0.5, name="dw1")
    w2 = pib.Variable(rng.standard_normal((3, 3, 2, 2)).astype(np.float32) * 0.5, name="dw2")
    variables = [w1, w2, *model.trainable_weights]
    loss_fn = losses.SparseCategoricalCrossentropy()

    def forward(images: pib.Tensor) -> pib.Tensor:
        h = pib.relu(pib.depthwise_conv2d(images, w1, padding="same"))
        return model(pib.depthwise_conv2d(h, w2, strides=2, padding="same"), training=True)

    step_losses = []
    for step in range(EPOCHS * 3):
        rows = slice(BATCH * (step % 3), BATCH * (step % 3 + 1))
        with pib.tidy():
            images, labels = pib.tensor(x[rows]), pib.tensor(y[rows])
            with pib.GradientTape() as tape:
                loss = loss_fn(labels, forward(images))
            grads = tape.gradient(loss, variables)
            for variable, grad in zip(variables, grads, strict=True):
                variable.assign(variable - grad * 0.1)
            step_losses.append(float(await loss.item()))
    with pib.tidy():
        images = pib.tensor(x[:BATCH])
        with pib.GradientTape() as tape:
            tape.watch(images)
            top = pib.sum(pib.max(forward(images), axis=-1))
        saliency = (await tape.gradient(top, images).numpy()).tolist()
    return {
        "losses": step_losses,
        "weights": [(await v.numpy()).tolist() for v in variables],
        "saliency": saliency,
    }


# ---- models ------------------------------------------------------------------------------------


def model_of(
    stack: Callable[[], list[layers.Layer]],
    optimizer: Callable[[], Any] | str,
    loss: Any,
    metrics: Iterable[str] = (),
    seed: int = 0,
) -> ModelFactory:
    """A factory of fresh compiled models (layers and optimizer are built anew on every call)."""

    def make() -> pib.Sequential:
        model = pib.Sequential(stack(), seed=seed)
        model.compile(
            optimizer=optimizer if isinstance(optimizer, str) else optimizer(),
            loss=loss() if isinstance(loss, type) else loss,
            metrics=list(metrics),
        )
        return model

    return make


def assembled() -> pib.Sequential:
    model = pib.Sequential(seed=3)
    # Named layers: summary() must not depend on how many layers this process made before.
    model.add(layers.Dense(4, activation="tanh", name="hidden"))
    model.add(layers.Dense(CLASSES, activation="softmax", name="probabilities"))
    model.build((3,))
    model.compile(
        optimizer=optimizers.SGD(0.1), loss="sparse_categorical_crossentropy", metrics=["accuracy"]
    )
    return model


# ---- the table -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FeatureCase:
    name: str
    model: ModelFactory
    data: Callable[[], Arrays]
    covers: frozenset[str]
    procedure: Procedure = fit


def case(
    name: str,
    model: ModelFactory,
    data: Callable[[], Arrays],
    covers: str,
    procedure: Procedure = fit,
) -> FeatureCase:
    """`covers`: the case's features separated by spaces."""
    return FeatureCase(name, model, data, frozenset(covers.split()), procedure)


CASES: list[FeatureCase] = [
    case(
        "dense_sgd_mse",
        model_of(
            lambda: [layers.Dense(4, activation="relu", input_shape=(3,)), layers.Dense(2)],
            lambda: optimizers.SGD(0.05),
            "mse",
        ),
        regression,
        "layer:Dense activation:relu activation:linear loss:MeanSquaredError loss-name:mse "
        "optimizer:SGD optimizer-option:SGD.learning_rate method:compile method:fit "
        "method:get_weights callback:History fit-option:epochs fit-option:batch_size "
        "fit-option:seed initializer:glorot_uniform initializer:zeros",
    ),
    case(
        "sgd_momentum_clipping",
        model_of(
            lambda: [layers.Dense(4, activation="tanh", input_shape=(3,)), layers.Dense(2)],
            lambda: optimizers.SGD(0.05, momentum=0.9, clipnorm=0.5, global_clipnorm=0.8),
            "mean_squared_error",
        ),
        regression,
        "activation:tanh loss-name:mean_squared_error optimizer-option:SGD.momentum "
        "optimizer-option:SGD.clipnorm optimizer-option:SGD.global_clipnorm",
    ),
    case(
        "sgd_nesterov_categorical",
        model_of(
            lambda: [
                layers.Dense(4, activation="leaky_relu", input_shape=(3,)),
                layers.Dense(CLASSES, activation="softmax"),
            ],
            lambda: optimizers.SGD(0.1, momentum=0.8, nesterov=True),
            "categorical_crossentropy",
            metrics=["categorical_accuracy"],
        ),
        one_hot,
        "activation:leaky_relu activation:softmax loss:CategoricalCrossentropy "
        "loss-name:categorical_crossentropy optimizer-option:SGD.nesterov "
        "metric:categorical_accuracy metric-kind:categorical",
    ),
    case(
        "rmsprop_categorical_logits",
        model_of(
            lambda: [layers.Dense(4, activation="gelu", input_shape=(3,)), layers.Dense(CLASSES)],
            lambda: optimizers.RMSprop(
                0.01, rho=0.8, epsilon=1e-5, clipnorm=0.5, global_clipnorm=0.8
            ),
            losses.CategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        ),
        one_hot,
        "activation:gelu loss:CategoricalCrossentropy(from_logits) optimizer:RMSprop "
        "optimizer-option:RMSprop.learning_rate optimizer-option:RMSprop.rho "
        "optimizer-option:RMSprop.epsilon optimizer-option:RMSprop.clipnorm "
        "optimizer-option:RMSprop.global_clipnorm metric:accuracy",
    ),
    case(
        "adam_defaults_sparse",
        model_of(
            lambda: [
                layers.Dense(5, activation="sigmoid", input_shape=(3,)),
                layers.Dense(CLASSES, activation="softmax"),
            ],
            "adam",
            "sparse_categorical_crossentropy",
            metrics=["accuracy", "sparse_categorical_accuracy"],
        ),
        classes,
        "activation:sigmoid loss:SparseCategoricalCrossentropy "
        "loss-name:sparse_categorical_crossentropy optimizer:Adam optimizer-name:adam "
        "metric:accuracy metric:sparse_categorical_accuracy metric-kind:sparse",
    ),
    case(
        "adam_options_sparse_logits",
        model_of(
            lambda: [
                layers.Dense(
                    5,
                    activation="relu",
                    use_bias=False,
                    kernel_initializer="he_normal",
                    input_shape=(3,),
                ),
                layers.Dense(CLASSES, bias_initializer="ones"),
            ],
            lambda: optimizers.Adam(
                0.02,
                beta_1=0.8,
                beta_2=0.99,
                epsilon=1e-5,
                epsilon_placement="keras",
                clipnorm=0.5,
                global_clipnorm=0.8,
            ),
            losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["acc"],
        ),
        classes,
        "layer-option:Dense.use_bias layer-option:Dense.kernel_initializer "
        "layer-option:Dense.bias_initializer initializer:he_normal initializer:ones "
        "loss:SparseCategoricalCrossentropy(from_logits) optimizer-option:Adam.learning_rate "
        "optimizer-option:Adam.beta_1 optimizer-option:Adam.beta_2 optimizer-option:Adam.epsilon "
        "optimizer-option:Adam.epsilon_placement optimizer-option:Adam.clipnorm "
        "optimizer-option:Adam.global_clipnorm metric:acc",
    ),
    case(
        "adamw_binary",
        model_of(
            lambda: [
                layers.Dense(4, activation="relu", input_shape=(3,)),
                layers.Dense(1, activation="sigmoid"),
            ],
            lambda: optimizers.AdamW(
                0.02,
                weight_decay=0.1,
                beta_1=0.8,
                beta_2=0.99,
                epsilon=1e-5,
                epsilon_placement="keras",
                clipnorm=0.5,
                global_clipnorm=0.8,
            ),
            "binary_crossentropy",
            metrics=["accuracy", "binary_accuracy"],
        ),
        binary,
        "loss:BinaryCrossentropy loss-name:binary_crossentropy optimizer:AdamW "
        "optimizer-option:AdamW.learning_rate optimizer-option:AdamW.weight_decay "
        "optimizer-option:AdamW.beta_1 optimizer-option:AdamW.beta_2 "
        "optimizer-option:AdamW.epsilon optimizer-option:AdamW.epsilon_placement "
        "optimizer-option:AdamW.clipnorm "
        "optimizer-option:AdamW.global_clipnorm metric:binary_accuracy metric-kind:binary",
    ),
    case(
        "rmsprop_defaults_binary_logits",
        model_of(
            lambda: [layers.Dense(4, activation="relu", input_shape=(3,)), layers.Dense(1)],
            "rmsprop",
            losses.BinaryCrossentropy(from_logits=True),
        ),
        binary,
        "loss:BinaryCrossentropy(from_logits) optimizer-name:rmsprop",
    ),
    case(
        "adamw_defaults_activation_layers",
        model_of(
            lambda: [
                layers.Dense(4, input_shape=(3,)),
                layers.Activation("gelu"),
                layers.Dense(CLASSES),
                layers.Activation("log_softmax"),
            ],
            "adamw",
            "mse",
        ),
        one_hot,
        "layer:Activation activation:log_softmax optimizer-name:adamw",
    ),
    case(
        "sgd_defaults_softmax_layer",
        model_of(
            lambda: [
                layers.Dense(CLASSES, input_shape=(3,)),
                layers.Activation("softmax"),
            ],
            "sgd",
            "categorical_crossentropy",
        ),
        one_hot,
        "optimizer-name:sgd",
    ),
    case(
        "conv_same_maxpool_flatten",
        model_of(
            lambda: [
                layers.Conv2D(3, 3, padding="same", activation="relu", input_shape=(6, 6, 2)),
                layers.MaxPool2D(2),
                layers.Flatten(),
                layers.Dense(CLASSES, activation="softmax"),
            ],
            lambda: optimizers.Adam(0.01),
            "sparse_categorical_crossentropy",
            metrics=["accuracy"],
        ),
        images,
        "layer:Conv2D layer:MaxPool2D layer:Flatten layer-option:Conv2D.padding "
        "layer-option:Conv2D.activation layer-option:Dense.activation",
    ),
    case(
        "conv_strided_avgpool_global",
        model_of(
            lambda: [
                layers.Conv2D(
                    4,
                    (3, 2),
                    strides=(1, 2),
                    use_bias=False,
                    kernel_initializer="he_normal",
                    input_shape=(6, 6, 2),
                ),
                layers.AveragePooling2D(2, strides=1, padding="same"),
                layers.Conv2D(3, 2, bias_initializer="ones"),
                layers.GlobalAveragePooling2D(),
                layers.Dense(CLASSES, activation="softmax"),
            ],
            lambda: optimizers.Adam(0.01),
            "sparse_categorical_crossentropy",
        ),
        images,
        "layer:AveragePooling2D layer:GlobalAveragePooling2D layer-option:Conv2D.strides "
        "layer-option:Conv2D.use_bias layer-option:Conv2D.kernel_initializer "
        "layer-option:Conv2D.bias_initializer layer-option:AveragePooling2D.pool_size "
        "layer-option:AveragePooling2D.strides layer-option:AveragePooling2D.padding",
    ),
    case(
        "depthwise_fine_tune",
        model_of(
            lambda: [
                layers.GlobalAveragePooling2D(input_shape=(3, 3, 4)),
                layers.Dense(CLASSES, activation="softmax"),
            ],
            "sgd",
            "sparse_categorical_crossentropy",
        ),
        images,
        "method:__call__",
        depthwise_fine_tune,
    ),
    case(
        "maxpool_options",
        model_of(
            lambda: [
                layers.MaxPool2D(3, strides=2, padding="same", input_shape=(6, 6, 2)),
                layers.MaxPool2D((2, 1), strides=(1, 2)),
                layers.Flatten(),
                layers.Dense(CLASSES, activation="softmax"),
            ],
            lambda: optimizers.SGD(0.1),
            "sparse_categorical_crossentropy",
        ),
        images,
        "layer-option:MaxPool2D.pool_size layer-option:MaxPool2D.strides "
        "layer-option:MaxPool2D.padding",
    ),
    case(
        "batch_normalization",
        model_of(
            # No bias before a normalization that follows directly: its gradient is zero up to
            # rounding, which Adam would scale up to full steps of noise that differ per backend.
            lambda: [
                layers.Conv2D(3, 3, use_bias=False, input_shape=(6, 6, 2)),
                layers.BatchNormalization(momentum=0.8, epsilon=1e-2),
                layers.Activation("relu"),
                layers.GlobalAveragePooling2D(),
                layers.Dense(4, use_bias=False),
                layers.BatchNormalization(center=False, scale=False),
                layers.Dense(CLASSES, activation="softmax"),
            ],
            lambda: optimizers.Adam(0.01),
            "sparse_categorical_crossentropy",
            metrics=["accuracy"],
        ),
        images,
        "layer:BatchNormalization layer-option:BatchNormalization.momentum "
        "layer-option:BatchNormalization.epsilon layer-option:BatchNormalization.center "
        "layer-option:BatchNormalization.scale method:evaluate method:predict",
        fit_evaluate_predict,
    ),
    # Dropout masks: the CPython cpu run draws the same bits as every backend (today host-side
    # PCG64 masks; with the device random primitive, the same counter-based hash everywhere).
    case(
        "dropout",
        model_of(
            lambda: [
                layers.Dense(8, activation="relu", input_shape=(3,)),
                layers.Dropout(0.5),
                layers.Dense(6, activation="relu"),
                layers.Dropout(0.25, seed=7),
                layers.Dense(CLASSES, activation="softmax"),
            ],
            lambda: optimizers.Adam(0.01),
            "sparse_categorical_crossentropy",
            metrics=["accuracy"],
        ),
        classes,
        "layer:Dropout layer-option:Dropout.seed",
        fit_evaluate_predict,
    ),
    # Augmentation draws, like Dropout's masks, come from the counter-based hash: the same
    # crops, rotations and light on every backend, and a replayed step draws new ones.
    case(
        "random_augmentation",
        model_of(
            lambda: [
                layers.RandomAugmentation(
                    translation=0.1,
                    zoom=0.2,
                    rotation=0.05,
                    brightness=0.1,
                    contrast=0.2,
                    value_range=(-2, 2),
                    seed=9,
                    input_shape=(6, 6, 2),
                ),
                layers.Conv2D(2, 3, activation="relu"),
                layers.GlobalAveragePooling2D(),
                layers.Dense(CLASSES, activation="softmax"),
            ],
            lambda: optimizers.Adam(0.01),
            "sparse_categorical_crossentropy",
            metrics=["accuracy"],
        ),
        images,
        "layer:RandomAugmentation layer-option:RandomAugmentation.translation "
        "layer-option:RandomAugmentation.zoom layer-option:RandomAugmentation.rotation "
        "layer-option:RandomAugmentation.brightness layer-option:RandomAugmentation.contrast "
        "layer-option:RandomAugmentation.value_range layer-option:RandomAugmentation.seed",
        fit_evaluate_predict,
    ),
    # Pretrained graph models as layers: a frozen one read at a named node, then a trainable copy
    # of another, fine-tuned with the head (its depthwise convolution's gradient included).
    case(
        "pretrained_graph_models",
        model_of(
            lambda: [
                layers.Pretrained(
                    graph_models.small_backbone(seed=1), output="feat", input_shape=(6, 6, 2)
                ),
                layers.Pretrained(graph_models.small_backbone(seed=2), trainable=True),
                layers.Dense(CLASSES, activation="softmax"),
            ],
            lambda: optimizers.Adam(0.01),
            "sparse_categorical_crossentropy",
            metrics=["accuracy"],
        ),
        images,
        "layer:Pretrained layer-option:Pretrained.output layer-option:Pretrained.trainable",
        fit_evaluate_predict,
    ),
    case(
        "train_on_batch",
        model_of(
            lambda: [
                layers.Dense(4, activation="relu", input_shape=(3,)),
                layers.Dense(CLASSES, activation="softmax"),
            ],
            lambda: optimizers.Adam(0.01),
            "sparse_categorical_crossentropy",
            metrics=["accuracy"],
        ),
        classes,
        "method:train_on_batch",
        train_on_batch_steps,
    ),
    case(
        "set_weights",
        model_of(
            lambda: [
                layers.Dense(4, activation="relu", input_shape=(3,)),
                layers.BatchNormalization(),
                layers.Dense(CLASSES, activation="softmax"),
            ],
            lambda: optimizers.SGD(0.1, momentum=0.5),
            "sparse_categorical_crossentropy",
        ),
        classes,
        "method:set_weights method:get_weights",
        transfer_weights,
    ),
    case(
        "checkpoint_resume",
        model_of(
            lambda: [
                layers.Dense(6, activation="relu", input_shape=(3,)),
                layers.BatchNormalization(),
                layers.Dropout(0.3),
                layers.Dense(CLASSES, activation="softmax"),
            ],
            lambda: optimizers.AdamW(0.01),
            "sparse_categorical_crossentropy",
            metrics=["accuracy"],
            seed=5,
        ),
        classes,
        "method:save_checkpoint method:load_checkpoint fit-option:resume callback:Callback",
        checkpoint_resume,
    ),
    case(
        "validation_split",
        model_of(
            lambda: [
                layers.Dense(4, activation="relu", input_shape=(3,)),
                layers.Dense(CLASSES, activation="softmax"),
            ],
            lambda: optimizers.Adam(0.01),
            "sparse_categorical_crossentropy",
            metrics=["accuracy"],
        ),
        classes,
        "fit-option:validation_split",
        fit_validation_split,
    ),
    case(
        "recovery_options",
        model_of(
            lambda: [
                layers.Dense(4, activation="relu", input_shape=(3,)),
                layers.Dense(CLASSES, activation="softmax"),
            ],
            lambda: optimizers.Adam(0.01),
            "sparse_categorical_crossentropy",
            metrics=["accuracy"],
        ),
        classes,
        "fit-option:recovery_every fit-option:recovery_timeout_s fit-option:on_hidden",
        fit_recovery_options,
    ),
    case(
        "permit",
        model_of(
            lambda: [
                layers.Dense(4, activation="relu", input_shape=(3,)),
                layers.Dense(CLASSES, activation="softmax"),
            ],
            lambda: optimizers.Adam(0.01),
            "sparse_categorical_crossentropy",
            metrics=["accuracy"],
        ),
        classes,
        "fit-option:permit",
        fit_within_a_permit,
    ),
    case(
        "validation_data_early_stopping",
        model_of(
            lambda: [
                layers.Dense(4, activation="relu", input_shape=(3,)),
                layers.Dense(2),
            ],
            lambda: optimizers.RMSprop(0.01),
            "mse",
        ),
        regression,
        "fit-option:validation_data fit-option:callbacks callback:EarlyStopping",
        fit_validation_data_early_stopping,
    ),
    case(
        "callbacks",
        model_of(
            lambda: [
                layers.Dense(4, activation="relu", input_shape=(3,)),
                layers.Dense(1, activation="sigmoid"),
            ],
            lambda: optimizers.SGD(0.1),
            "binary_crossentropy",
            metrics=["accuracy"],
        ),
        binary,
        "callback:LambdaCallback callback:ProgressCallback callback:Callback fit-option:callbacks",
        fit_with_callbacks,
    ),
    case(
        "model_file",
        model_of(
            lambda: [
                layers.Conv2D(2, 3, activation="relu", input_shape=(6, 6, 2)),
                layers.BatchNormalization(),
                layers.Dropout(0.2),
                layers.GlobalAveragePooling2D(),
                layers.Dense(CLASSES, activation="softmax"),
            ],
            lambda: optimizers.Adam(0.01),
            "sparse_categorical_crossentropy",
        ),
        images,
        "method:save",
        save_and_load_model,
    ),
    case(
        "tfjs_round_trip",
        model_of(
            lambda: [
                layers.Conv2D(2, 3, activation="relu", input_shape=(6, 6, 2)),
                layers.MaxPool2D(2),
                layers.Flatten(),
                layers.Dense(CLASSES, activation="softmax"),
            ],
            lambda: optimizers.Adam(0.01),
            "sparse_categorical_crossentropy",
        ),
        images,
        "method:export_tfjs",
        tfjs_round_trip,
    ),
    case(
        "sequential_api",
        assembled,
        classes,
        "method:add method:build method:summary method:count_params method:__call__ "
        "method:resolved_metrics fit-option:shuffle fit-option:initial_epoch fit-option:verbose",
        sequential_api,
    ),
]


def by_name(names: Iterable[str] | None = None) -> list[FeatureCase]:
    if names is None:
        return list(CASES)
    table = {c.name: c for c in CASES}
    return [table[n] for n in names]


async def run_case(feature_case: FeatureCase) -> dict[str, Any]:
    return await feature_case.procedure(feature_case.model, feature_case.data())


async def run_cases(names: Iterable[str] | None = None) -> dict[str, Any]:
    """{name: {"result": ..., "seconds": ...}} or {"error": traceback} per case: one failing
    case never hides the others' results."""
    out: dict[str, Any] = {}
    for feature_case in by_name(names):
        start = time.perf_counter()
        try:
            out[feature_case.name] = {"result": await run_case(feature_case)}
        except Exception:
            out[feature_case.name] = {"error": traceback.format_exc()}
        out[feature_case.name]["seconds"] = time.perf_counter() - start
    return out
