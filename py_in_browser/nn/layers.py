"""Keras-style layers: Dense, Conv2D, pooling, Flatten, Dropout, BatchNormalization, Activation,
RandomAugmentation, and Pretrained (an imported graph model as a layer)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Protocol

import numpy as np

from .. import functional as F
from .. import fusion
from ..tensor import Tensor, Variable, call, tensor
from . import activations, initializers

Shape = tuple[int, ...]

# Moving-statistic updates go here instead of being assigned while a train step collects them,
# so the step can apply them only when its loss is finite (see training.train_step).
state_update_sink: list[tuple[Variable, Tensor]] | None = None

_standalone_layers = itertools.count(1)


class Layer:
    """Base layer: lazily built from the input shape (without batch axis) on first call.

    A subclass creates its weights in `build` with `add_weight` and computes its output in
    `call`; calling the layer builds it from the first input and checks later inputs against
    that shape. Inputs that are not tensors (numpy arrays, lists) are converted to float32.

    Args:
        name: unique name; default the class name in snake_case, numbered from the second
            instance on (``dense``, ``dense_1``, ...). Weights are named ``<layer>/<weight>``.
        input_shape: the input shape without the batch axis, for the first layer of a
            Sequential (lets it build before seeing data).

    Example:
        >>> class Scale(pib.layers.Layer):
        ...     def build(self, input_shape):
        ...         self.factor = self.add_weight("factor", (input_shape[-1],), "ones")
        ...         super().build(input_shape)
        ...     def call(self, x, training):
        ...         return x * self.factor
        >>> scale = Scale()
        >>> await scale(np.ones((2, 3))).numpy()
        array([[1., 1., 1.],
               [1., 1., 1.]], dtype=float32)
        >>> scale.count_params(), scale.output_shape
        (3, (3,))
    """

    _name_counts: ClassVar[dict[str, int]] = {}

    def __init__(self, name: str | None = None, input_shape: Sequence[int] | None = None):
        base = _snake(type(self).__name__)
        count = Layer._name_counts.get(base, 0)
        Layer._name_counts[base] = count + 1
        self.name = name or (base if count == 0 else f"{base}_{count}")
        self.input_shape: Shape | None = tuple(input_shape) if input_shape is not None else None
        self.built = False
        self.trainable_weights: list[Variable] = []
        self.non_trainable_weights: list[Variable] = []
        # (model seed, layer index); a Sequential overwrites it before building.
        self.seed: tuple[int, int] = (0, 1_000_000 + next(_standalone_layers))
        self.output_shape: Shape | None = None

    @property
    def weights(self) -> list[Variable]:
        """All weights: the trainable ones, then the non-trainable ones, each in creation order."""
        return self.trainable_weights + self.non_trainable_weights

    def add_weight(self, name: str, shape: Shape, initializer: Any, trainable: bool = True):
        """Creates the Variable ``<layer name>/<name>`` of `shape`, drawn by `initializer` (a
        name from `initializers` or a function (shape, rng) -> array) from a generator seeded by
        (model seed, layer index, weight index); trainable ones are what optimizers update."""
        index = len(self.weights)
        rng = initializers.rng_for(self.seed[0], self.seed[1], index)
        value = initializers.get(initializer)(tuple(shape), rng)
        var = Variable(value, trainable=trainable, name=f"{self.name}/{name}")
        (self.trainable_weights if trainable else self.non_trainable_weights).append(var)
        return var

    def build(self, input_shape: Shape) -> None:
        """Creates the weights for inputs of `input_shape` (no batch axis); a subclass adds its
        weights, then calls ``super().build(input_shape)`` to record the shapes."""
        self.input_shape = tuple(input_shape)
        self.output_shape = self.compute_output_shape(self.input_shape)
        self.built = True

    def compute_output_shape(self, input_shape: Shape) -> Shape:
        """The output shape (no batch axis) for inputs of `input_shape`; the base keeps it."""
        return input_shape

    def call(self, x: Tensor, training: bool) -> Tensor:
        """The layer's computation on a built layer; `training` is True inside fit's steps."""
        raise NotImplementedError

    def __call__(self, x: Tensor, training: bool = False) -> Tensor:
        """Builds on first use, checks the input shape, then runs `call`."""
        if not isinstance(x, Tensor):
            x = tensor(x)
        if not self.built:
            self.build(x.shape[1:])
        elif self.input_shape is not None and x.shape[1:] != self.input_shape:
            raise ValueError(
                f"layer {self.name!r}: expected input shape (batch, *{self.input_shape}), "
                f"got {x.shape}"
            )
        return self.call(x, training)

    def count_params(self) -> int:
        """Number of scalars in all weights, trainable or not."""
        return sum(w.size for w in self.weights)

    def state_variables(self) -> list[Variable]:
        """Device state a train step advances that is not a weight (Dropout's draw counter):
        recorded steps carry it like the weights; get_weights leaves it out, as Keras leaves
        seed state out of `weights`."""
        return []

    def get_config(self) -> dict[str, Any]:
        """The layer's settings by name (the base: its name)."""
        return {"name": self.name}


def _snake(name: str) -> str:
    """Keras-style layer names: Conv2D -> conv2d, GlobalAveragePooling2D -> global_average_pooling2d."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", name).lower()


def _positive_int(value: Any, name: str) -> int:
    if not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


class Dense(Layer):
    """Fully connected layer: activation(x @ kernel + bias).

    Input (batch, ..., features) gives (batch, ..., units); kernel has shape (features, units),
    bias (units,).

    Args:
        units: output features.
        activation: a name from `activations` ("relu", "softmax", ...) or a function of a
            tensor; None (default) is linear.
        use_bias: whether to add the bias (default True).
        kernel_initializer: default "glorot_uniform".
        bias_initializer: default "zeros".
        **kwargs: `Layer`'s name and input_shape.

    Example:
        >>> dense = pib.layers.Dense(2, kernel_initializer="ones", bias_initializer="ones")
        >>> await dense(np.array([[1.0, 2.0, 3.0]])).numpy()
        array([[7., 7.]], dtype=float32)
        >>> dense.kernel.shape, dense.bias.shape
        ((3, 2), (2,))
    """

    def __init__(
        self,
        units: int,
        activation: Any = None,
        use_bias: bool = True,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.units = _positive_int(units, "Dense units")
        self.activation = activations.get(activation)
        self.use_bias = use_bias
        self.kernel_initializer, self.bias_initializer = kernel_initializer, bias_initializer

    def build(self, input_shape: Shape) -> None:
        self.kernel = self.add_weight(
            "kernel", (input_shape[-1], self.units), self.kernel_initializer
        )
        if self.use_bias:
            self.bias = self.add_weight("bias", (self.units,), self.bias_initializer)
        super().build(input_shape)

    def compute_output_shape(self, input_shape: Shape) -> Shape:
        return (*input_shape[:-1], self.units)

    def call(self, x: Tensor, training: bool) -> Tensor:
        y = F.matmul(x, self.kernel)
        if self.use_bias:
            y = F.add(y, self.bias)
        return self.activation(y)


class Conv2D(Layer):
    """2-D convolution over (batch, height, width, channels) inputs, kernels (kh, kw, in, out).

    Output (batch, h_out, w_out, filters), per spatial axis of size n with kernel k and stride
    s: "valid" gives floor((n - k) / s) + 1, "same" gives ceil(n / s) (zeros padded, the odd
    one after, as TensorFlow). Then bias and activation as `Dense`. No dilation or groups.

    Args:
        filters: output channels.
        kernel_size: an int or (kh, kw).
        strides: an int or (sh, sw); default 1.
        padding: "valid" (default) or "same".
        activation: as `Dense`; also use_bias, kernel_initializer, bias_initializer and the
            keyword arguments of `Layer`.

    Example:
        >>> conv = pib.layers.Conv2D(4, 3, padding="same")
        >>> conv(np.zeros((1, 8, 8, 3))).shape, conv.kernel.shape
        ((1, 8, 8, 4), (3, 3, 3, 4))
        >>> pib.layers.Conv2D(4, 3, strides=2)(np.zeros((1, 8, 8, 3))).shape
        (1, 3, 3, 4)
    """

    def __init__(
        self,
        filters: int,
        kernel_size: int | Sequence[int],
        strides: int | Sequence[int] = 1,
        padding: str = "valid",
        activation: Any = None,
        use_bias: bool = True,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.filters = _positive_int(filters, "Conv2D filters")
        self.kernel_size = F._pair_of(kernel_size, "Conv2D kernel_size")
        self.strides = F._pair_of(strides, "Conv2D strides")
        if padding not in ("valid", "same"):
            raise ValueError(f"Conv2D padding must be 'valid' or 'same', got {padding!r}")
        self.padding = padding
        self.activation = activations.get(activation)
        self.use_bias = use_bias
        self.kernel_initializer, self.bias_initializer = kernel_initializer, bias_initializer

    def build(self, input_shape: Shape) -> None:
        if len(input_shape) != 3:
            raise ValueError(f"Conv2D expects (height, width, channels) inputs, got {input_shape}")
        shape = (*self.kernel_size, input_shape[-1], self.filters)
        self.kernel = self.add_weight("kernel", shape, self.kernel_initializer)
        if self.use_bias:
            self.bias = self.add_weight("bias", (self.filters,), self.bias_initializer)
        super().build(input_shape)

    def compute_output_shape(self, input_shape: Shape) -> Shape:
        return (*_spatial(input_shape, self.kernel_size, self.strides, self.padding), self.filters)

    def call(self, x: Tensor, training: bool) -> Tensor:
        y = F.conv2d(x, self.kernel, self.strides, self.padding)
        if self.use_bias:
            y = F.add(y, self.bias)
        return self.activation(y)


def _spatial(shape: Shape, window: Sequence[int], strides: Sequence[int], padding: str):
    pads = F.resolve_padding(padding, shape[:2], window, strides)
    return tuple(
        (shape[i] + pads[i][0] + pads[i][1] - window[i]) // strides[i] + 1 for i in range(2)
    )


class _Pool2D(Layer):
    op = "max"

    def __init__(
        self,
        pool_size: int | Sequence[int] = 2,
        strides: int | Sequence[int] | None = None,
        padding: str = "valid",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.pool_size = F._pair_of(pool_size, "pool_size")
        self.strides = F._pair_of(strides if strides is not None else self.pool_size, "strides")
        if padding not in ("valid", "same"):
            raise ValueError(f"pooling padding must be 'valid' or 'same', got {padding!r}")
        self.padding = padding

    def compute_output_shape(self, input_shape: Shape) -> Shape:
        if len(input_shape) != 3:
            raise ValueError(f"{type(self).__name__} expects (h, w, c) inputs, got {input_shape}")
        return (*_spatial(input_shape, self.pool_size, self.strides, self.padding), input_shape[2])

    def call(self, x: Tensor, training: bool) -> Tensor:
        pool = F.max_pool2d if self.op == "max" else F.avg_pool2d
        return pool(x, self.pool_size, self.strides, self.padding)


class MaxPool2D(_Pool2D):
    """Maximum over each pool_size window of (batch, height, width, channels) inputs.

    Output sizes follow `Conv2D`'s rule with the window as kernel; with "same" padding the
    padded cells never win. Alias: ``MaxPooling2D``.

    Args:
        pool_size: an int or (ph, pw); default 2.
        strides: an int or pair; default pool_size.
        padding: "valid" (default) or "same".

    Example:
        >>> x = np.arange(16.0).reshape(1, 4, 4, 1)
        >>> (await pib.layers.MaxPool2D(2)(x).numpy())[0, :, :, 0]
        array([[ 5.,  7.],
               [13., 15.]], dtype=float32)
    """

    op = "max"


class AveragePooling2D(_Pool2D):
    """Mean over each pool_size window; arguments and output sizes as `MaxPool2D`.

    With "same" padding a window's mean counts only its cells inside the input (TensorFlow's
    rule). Alias: ``AvgPool2D``.

    Example:
        >>> x = np.arange(16.0).reshape(1, 4, 4, 1)
        >>> (await pib.layers.AveragePooling2D(2)(x).numpy())[0, :, :, 0]
        array([[ 2.5,  4.5],
               [10.5, 12.5]], dtype=float32)
    """

    op = "avg"


MaxPooling2D = MaxPool2D
AvgPool2D = AveragePooling2D


class GlobalAveragePooling2D(Layer):
    """Mean over height and width: (batch, height, width, channels) -> (batch, channels).

    Example:
        >>> x = np.arange(8.0).reshape(1, 2, 2, 2)
        >>> await pib.layers.GlobalAveragePooling2D()(x).numpy()
        array([[3., 4.]], dtype=float32)
    """

    def compute_output_shape(self, input_shape: Shape) -> Shape:
        return (input_shape[-1],)

    def call(self, x: Tensor, training: bool) -> Tensor:
        return F.mean(x, axis=(1, 2))


class Flatten(Layer):
    """Keeps the batch axis and flattens the rest in row-major order: (batch, ...) -> (batch, n).

    Example:
        >>> pib.layers.Flatten()(np.zeros((2, 4, 4, 3))).shape
        (2, 48)
    """

    def compute_output_shape(self, input_shape: Shape) -> Shape:
        return (int(np.prod(input_shape, dtype=np.int64)),)

    def call(self, x: Tensor, training: bool) -> Tensor:
        return F.flatten(x)


class Activation(Layer):
    """Applies an activation (a name from `activations` or a function) elementwise.

    Example:
        >>> await pib.layers.Activation("relu")(np.array([[-1.0, 2.0]])).numpy()
        array([[0., 2.]], dtype=float32)
    """

    def __init__(self, activation: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.activation = activations.get(activation)

    def call(self, x: Tensor, training: bool) -> Tensor:
        return self.activation(x)


# Dropout keeps an element where its uniform draw is >= rate. 22 bits: every backend stores such
# a draw exactly (float16 storage too, as value plus compensation), so masks agree everywhere.
DROPOUT_BITS = 22


def _mask_program(rate: float) -> fusion.Program:
    """x * (0 where draw < rate, else 1 / (1 - rate)): one kernel, and NaN * 0 stays NaN."""
    scale = 1.0 / (1.0 - rate)
    return fusion.trace(lambda x, u: x * fusion.where(fusion.less(u, rate), 0.0, scale), 2)


# Masking and its gradient run in every step of a Dropout model: GPU backends compile them at
# start-up (constants travel as parameters, so one rate's kernels serve every rate).
fusion.register_common(_mask_program(0.5), ("full", "full"), gradient_kind="full", wrt=(0,))


class _RandomLayer(Layer):
    """A layer that draws from pib.random_uniform keyed by (seed, layer) with a draw counter on
    the device: the train step advances the counter (through the state-update sink when one is
    recording, so a replayed step draws anew), and checkpoints store it (rng/dropout_calls)."""

    def __init__(self, seed: int | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.explicit_seed = seed
        self.draws: Variable | None = None  # draws so far; a float32 scalar on the device

    def build(self, input_shape: Shape) -> None:
        self.draws = Variable(0.0, trainable=False, name=f"{self.name}/draws")
        super().build(input_shape)

    def state_variables(self) -> list[Variable]:
        return [self.draws] if self.draws is not None else []

    async def draw_count(self) -> int:
        """How many draws this layer has made (read from the device)."""
        return int(await self.draws.item()) if self.draws is not None else 0

    def set_draw_count(self, count: int) -> None:
        """Sets the draw counter, so the next draw is number `count` (what load_checkpoint
        restores); the layer must be built."""
        if self.draws is None:
            raise RuntimeError(f"layer {self.name!r} is not built")
        self.draws.assign(tensor(float(count)))

    def draw_seed(self) -> int:
        """The seed of this layer's draws: its own if given, else the model's."""
        return (self.seed[0] if self.explicit_seed is None else self.explicit_seed) % 2**32

    def advance_draws(self) -> None:
        """Counts one draw: deferred to the step's state updates while a step is recorded."""
        assert self.draws is not None
        advanced = F.add(self.draws, 1.0)
        if state_update_sink is not None:
            state_update_sink.append((self.draws, advanced))
        else:
            self.draws.assign(advanced)


class Dropout(_RandomLayer):
    """Inverted dropout: in training, zeroes each element with probability `rate` (0 <= rate < 1)
    and scales the rest by 1 / (1 - rate), so the expected value is unchanged; at inference
    (fit's validation, evaluate, predict) the layer passes its input through.

    Mask k of a layer is draw k of pib.random_uniform keyed by (seed, layer index), seed being
    the model's unless given here: reproducible, and the same on every backend. The draw counter
    k lives on the device and the train step advances it (only when the loss is finite, like
    moving statistics), so a recorded step replays with a new mask each time, and checkpoints
    store it (rng/dropout_calls) so resumed training draws the same masks.

    Example:
        >>> drop = pib.layers.Dropout(0.5)
        >>> x = np.ones((1, 1000))
        >>> bool((await drop(x).numpy() == 1).all())  # inference: unchanged
        True
        >>> kept = await drop(x, training=True).numpy()
        >>> sorted(set(kept.ravel().tolist()))  # dropped, or scaled by 1 / (1 - rate)
        [0.0, 2.0]
    """

    def __init__(self, rate: float, seed: int | None = None, **kwargs: Any) -> None:
        super().__init__(seed, **kwargs)
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"Dropout rate must be in [0, 1), got {rate!r}")
        self.rate = float(rate)
        self._program = _mask_program(self.rate)

    def call(self, x: Tensor, training: bool) -> Tensor:
        if not training or self.rate == 0.0:
            return x
        assert self.draws is not None
        draw = F.random_uniform(
            x.shape,
            seed=self.draw_seed(),
            stream=self.seed[1] % 2**32,
            counter=self.draws,
            bits=DROPOUT_BITS,
        )
        y = call("fused", x, F.cast(draw, x.dtype), program=self._program)
        self.advance_draws()
        return y


# Taylor series of cos and sin to the terms after which, for |angle| <= pi / 4 (the largest
# rotation RandomAugmentation takes), the error is below 1e-9: the fused programs have no
# trigonometric op, and Horner's form costs a few multiply-adds.
_COS_TERMS = 6
_SIN_TERMS = 6
# RandomAugmentation's six draws per image are six random_uniform streams of the layer:
# stream = layer stream + (k + 1) * this, apart from Dropout's (the layer stream itself).
AUGMENT_STREAM_STRIDE = 1 << 24
MAX_ROTATION = 0.125


def _cos(t: Any) -> Any:
    t2, acc = t * t, 1.0
    for k in range(_COS_TERMS - 1, 0, -1):
        acc = 1.0 - t2 * acc / ((2 * k - 1) * (2 * k))
    return acc


def _sin(t: Any) -> Any:
    t2, acc = t * t, 1.0
    for k in range(_SIN_TERMS - 1, 0, -1):
        acc = 1.0 - t2 * acc / ((2 * k) * (2 * k + 1))
    return t * acc


class RandomAugmentation(_RandomLayer):
    """Random crop/zoom, shift, small rotation, brightness and contrast per image, in training only.

    For NHWC images. Each training batch draws, per image, a zoom z in [1 - zoom, 1 + zoom]
    (below 1 zooms in, as Keras' RandomZoom), an angle in [-rotation, rotation] turns (fractions
    of 2 pi, as Keras' RandomRotation; at most 0.125), shifts in [-translation, translation] of
    the width and height (Keras' RandomTranslation), a brightness delta in [-brightness,
    brightness] of the value range and a contrast factor k in [1 - contrast, 1 + contrast].
    Output pixel p then samples the input at z R(angle) p + shift (normalized coordinates, edges
    repeated; pib.affine_sample, one GPU kernel for the whole batch, after six draw kernels and
    eight tiny fused ones that turn the draws into its (N, 8) params) and becomes
    (sample - mid) * k + mid + delta, mid the centre of `value_range` (Keras' RandomContrast
    scales around each image's mean instead). At inference (validation, evaluate, predict) the
    layer passes its input through.

    The draws come from pib.random_uniform keyed by (seed, layer) with a draw counter on the
    device that each train step advances, exactly as Dropout's masks: a run is reproducible, the
    same on every backend, replays from JS with new draws each step, and checkpoints keep the
    counter.

    Example:
        >>> aug = pib.layers.RandomAugmentation(translation=0.1, zoom=0.1, rotation=0.02)
        >>> x = np.random.default_rng(0).uniform(size=(2, 8, 8, 3))
        >>> bool((await aug(x).numpy() == x.astype("float32")).all())  # inference: unchanged
        True
        >>> (await aug(x, training=True).numpy()).shape
        (2, 8, 8, 3)
    """

    def __init__(
        self,
        translation: float = 0.1,
        zoom: float = 0.1,
        rotation: float = 0.02,
        brightness: float = 0.0,
        contrast: float = 0.0,
        value_range: Sequence[float] = (0.0, 1.0),
        seed: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(seed, **kwargs)
        factors = {"translation": translation, "zoom": zoom, "brightness": brightness}
        factors["contrast"] = contrast
        for name, value in factors.items():
            if not 0.0 <= float(value) < 1.0:
                raise ValueError(f"RandomAugmentation: {name} must be in [0, 1), got {value!r}")
        if not 0.0 <= float(rotation) <= MAX_ROTATION:
            raise ValueError(
                f"RandomAugmentation: rotation must be in [0, {MAX_ROTATION}] turns, got "
                f"{rotation!r}"
            )
        low, high = (float(v) for v in value_range)
        if not low < high:
            raise ValueError(
                f"RandomAugmentation: value_range must be (low, high), got {value_range}"
            )
        self.translation, self.zoom, self.rotation = (
            float(translation),
            float(zoom),
            float(rotation),
        )
        self.brightness, self.contrast = float(brightness), float(contrast)
        self.value_range = (low, high)
        self._programs = self._params_programs()

    def _params_programs(self) -> list[tuple[fusion.Program, tuple[int, ...]]]:
        """Each column of affine_sample's params as a fused program of the draws it uses (draw
        k: 0 zoom, 1 angle, 2 and 3 shifts, 4 brightness, 5 contrast)."""
        z, turn, shift = self.zoom, self.rotation * 2.0 * np.pi, 2.0 * self.translation
        low, high = self.value_range
        mid, delta = (low + high) / 2.0, self.brightness * (high - low)

        def span(u: Any, half: float, centre: float = 0.0) -> Any:
            return centre + half * (2.0 * u - 1.0)

        def gain(uc: Any) -> Any:
            return span(uc, self.contrast, 1.0)

        columns: list[tuple[Callable[..., Any], tuple[int, ...]]] = [
            (lambda uz, ua: span(uz, z, 1.0) * _cos(span(ua, turn)), (0, 1)),
            (lambda uz, ua: -(span(uz, z, 1.0) * _sin(span(ua, turn))), (0, 1)),
            (lambda ux: span(ux, shift), (2,)),
            (lambda uz, ua: span(uz, z, 1.0) * _sin(span(ua, turn)), (0, 1)),
            (lambda uz, ua: span(uz, z, 1.0) * _cos(span(ua, turn)), (0, 1)),
            (lambda uy: span(uy, shift), (3,)),
            (gain, (5,)),
            (lambda uc, ub: mid * (1.0 - gain(uc)) + span(ub, delta), (5, 4)),
        ]
        return [(fusion.trace(fn, len(uses)), uses) for fn, uses in columns]

    def build(self, input_shape: Shape) -> None:
        if len(input_shape) != 3:
            raise ValueError(
                f"RandomAugmentation takes NHWC images, got examples of shape {input_shape}"
            )
        super().build(input_shape)

    def params(self, batch: int) -> Tensor:
        """The (batch, 8) affine_sample params of the current draw."""
        assert self.draws is not None
        draws = [
            F.random_uniform(
                (batch, 1),
                seed=self.draw_seed(),
                stream=(self.seed[1] + (k + 1) * AUGMENT_STREAM_STRIDE) % 2**32,
                counter=self.draws,
            )
            for k in range(6)
        ]
        columns = [
            call("fused", *(draws[k] for k in uses), program=p) for p, uses in self._programs
        ]
        return F.concat(columns, axis=1)

    def call(self, x: Tensor, training: bool) -> Tensor:
        if not training:
            return x
        assert self.draws is not None
        params = self.params(x.shape[0])
        y = F.affine_sample(x, F.cast(params, x.dtype), x.shape[1:3])
        self.advance_draws()
        return y


class BatchNormalization(Layer):
    """Normalizes over every axis but the last; batch statistics in training, moving ones after.

    y = gamma * (x - mean) / sqrt(var + epsilon) + beta, per channel (the last axis). In
    training, mean and var are the batch's (var biased, over all other axes) and the moving
    statistics become moving = momentum * moving + (1 - momentum) * batch (a step whose loss
    is not finite leaves them); at inference the moving statistics are used. gamma (ones) and
    beta (zeros) are trainable unless scale / center is False; moving_mean (zeros) and
    moving_variance (ones) are not. Keras's defaults: momentum 0.99, epsilon 1e-3.

    Example:
        >>> bn = pib.layers.BatchNormalization()
        >>> x = np.array([[0.0], [2.0]])  # mean 1, variance 1
        >>> (await bn(x, training=True).numpy()).round(4)
        array([[-0.9995],
               [ 0.9995]], dtype=float32)
        >>> await bn.moving_mean.numpy()  # 0.99 * 0 + 0.01 * 1
        array([0.01], dtype=float32)
    """

    def __init__(
        self,
        momentum: float = 0.99,
        epsilon: float = 1e-3,
        center: bool = True,
        scale: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.momentum, self.epsilon = float(momentum), float(epsilon)
        self.center, self.scale = center, scale

    def build(self, input_shape: Shape) -> None:
        channels = (input_shape[-1],)
        self.gamma = self.add_weight("gamma", channels, "ones") if self.scale else None
        self.beta = self.add_weight("beta", channels, "zeros") if self.center else None
        self.moving_mean = self.add_weight("moving_mean", channels, "zeros", trainable=False)
        self.moving_variance = self.add_weight("moving_variance", channels, "ones", trainable=False)
        super().build(input_shape)

    def call(self, x: Tensor, training: bool) -> Tensor:
        if training:
            axes = tuple(range(x.ndim - 1))
            mean = F.mean(x, axis=axes)
            var = F.variance(x, axis=axes)
            m = self.momentum
            self._update(self.moving_mean, F.stop_gradient(mean), m)
            self._update(self.moving_variance, F.stop_gradient(var), m)
        else:
            mean, var = self.moving_mean, self.moving_variance
        y = F.div(F.sub(x, mean), F.sqrt(F.add(var, self.epsilon)))
        if self.gamma is not None:
            y = F.mul(y, self.gamma)
        if self.beta is not None:
            y = F.add(y, self.beta)
        return y

    @staticmethod
    def _update(var: Variable, batch_value: Tensor, momentum: float) -> None:
        new = F.add(F.mul(var, momentum), F.mul(batch_value, 1.0 - momentum))
        if state_update_sink is not None:
            state_update_sink.append((var, new))
        else:
            var.assign(new)


class _GraphModelLike(Protocol):
    """What Pretrained uses of a pib.GraphModel (interop sits above the layers, so by protocol)."""

    host_weights: dict[str, np.ndarray]

    @property
    def outputs(self) -> list[dict[str, Any]]: ...

    def weights(self) -> dict[str, Variable]: ...

    def output_shape(self, input_shape: Sequence[int], output: str | None = None) -> Shape: ...

    def run(
        self, x: Any, output: Any = None, weights: dict[str, Tensor] | None = None
    ) -> Tensor | list[Tensor]: ...


class Pretrained(Layer):
    """A pretrained graph model (``await pib.load_graph_model(...)``) as a layer: the value of its
    node `output` (default: its one signature output) for the layer's input.

    Frozen by default: the model's own weights (uploaded once per backend) are the layer's
    non-trainable weights, so fit trains only the layers after it and never computes a gradient
    inside it. With ``trainable=True`` the layer trains copies of its own (float constants
    trainable, integer ones not); the GraphModel is never changed. The output shape comes from
    the op table's shape rules (GraphModel.output_shape): building runs nothing on the device.

    Example:
        >>> from py_in_browser.testing import graph_models
        >>> gm = await pib.load_graph_model(graph_models.tiny_graph_model())
        >>> model = pib.Sequential([pib.layers.Pretrained(gm, output="h"), pib.layers.Dense(1)])
        >>> model.build((3,))
        >>> model.layers[0].output_shape, len(model.trainable_weights)
        ((2,), 2)
    """

    def __init__(
        self,
        graph_model: _GraphModelLike,
        output: str | None = None,
        trainable: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if output is None and len(graph_model.outputs) != 1:
            names = [o["name"] for o in graph_model.outputs]
            raise ValueError(f"the graph model has outputs {names}: name one with output=...")
        self.graph_model = graph_model
        self.output = output
        self.trainable = bool(trainable)
        self._reads: dict[str, Tensor] = {}

    def build(self, input_shape: Shape) -> None:
        if self.trainable:
            for ref, array in self.graph_model.host_weights.items():
                var = self.add_weight(
                    ref.split(":")[0],
                    array.shape,
                    lambda shape, rng, value=array: value.copy(),
                    trainable=array.dtype.kind == "f",
                )
                self._reads[ref] = var
        else:
            shared = self.graph_model.weights()
            self._reads = dict(shared)
            self.non_trainable_weights = list(shared.values())
        super().build(input_shape)

    def compute_output_shape(self, input_shape: Shape) -> Shape:
        return self.graph_model.output_shape(input_shape, self.output)

    def call(self, x: Tensor, training: bool) -> Tensor:
        out = self.graph_model.run(x, self.output, self._reads)
        assert isinstance(out, Tensor)
        return out

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "output": self.output, "trainable": self.trainable}
