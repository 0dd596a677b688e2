"""Caps on model and training sizes, shared by the engine, the page and the server.

One table of numbers (`Limits`), checked the same way everywhere: the engine before it allocates,
the page before it asks for a training permit, the server before it stores a model or signs a
permit. Exceeding a cap raises LimitExceededError (a ValueError) whose message names the cap, the
value and the limit, so a user knows which knob to turn.

Pure Python with no imports from the package: it sits at the bottom of the engine's layers, and
the server imports it without loading any backend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

MIB = 1024 * 1024


class LimitExceededError(ValueError):
    """A size or count over one of the shared caps; `cap` is the Limits field that was exceeded.

    Example:
        >>> try:
        ...     pib.zeros((100_000, 100_000))
        ... except pib.LimitExceededError as err:
        ...     print(err.cap)
        max_tensor_bytes
    """

    def __init__(self, cap: str, value: int, limit: int, what: str) -> None:
        super().__init__(f"{what} is {value:,}, over the cap {cap}={limit:,}")
        self.cap, self.value, self.limit = cap, value, limit


@dataclass(frozen=True)
class Limits:
    """The caps. Defaults suit a webcam gesture trainer on a laptop GPU; servers may lower them."""

    max_batch_size: int = 1024
    # Epochs alone are cheap on small data (XOR trains for 1000); the server's daily budget of
    # examples processed (samples x epochs) bounds the total work.
    max_epochs: int = 10_000
    max_params: int = 4_000_000
    max_layers: int = 64
    # One example's elements (e.g. 128 x 128 x 3) and the longest side of an image-like input.
    max_input_elements: int = 256 * 256 * 4
    max_input_side: int = 1024
    max_samples: int = 100_000
    # Samples one class of the gesture trainer keeps (recorded or uploaded); the page reads it from
    # GET /api/training/policy and says when a class reaches it.
    max_samples_per_class: int = 5_000
    # Training data held in memory (float32 inputs and targets together).
    max_dataset_bytes: int = 512 * MIB
    # A saved model: float32 weights of max_params plus room for its description.
    max_model_file_bytes: int = 4 * 4_000_000 + MIB
    # What the engine lets Python allocate (pib.tensor, zeros, op results): one tensor (a whole
    # dataset may be one), and all live tensors together, so page code cannot allocate unbounded.
    max_tensor_bytes: int = 512 * MIB
    max_live_tensor_bytes: int = 2048 * MIB

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


DEFAULT_LIMITS = Limits()


def check_cap(cap: str, value: int, limits: Limits, what: str) -> None:
    """Raises LimitExceededError when `value` is over the field `cap` of `limits`."""
    limit = getattr(limits, cap)
    if value > limit:
        raise LimitExceededError(cap, value, limit, what)


@dataclass(frozen=True)
class ModelSummary:
    """What the caps need to know about a model: input shape (no batch axis), sizes."""

    input_shape: tuple[int, ...]
    param_count: int
    layer_count: int

    @classmethod
    def of(cls, model: Any) -> ModelSummary:
        """From a built Sequential (anything with input_shape, layers and count_params())."""
        return cls(tuple(model.input_shape or ()), model.count_params(), len(model.layers))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelSummary:
        return cls(tuple(data["input_shape"]), int(data["param_count"]), int(data["layer_count"]))


@dataclass(frozen=True)
class TrainingConfig:
    """One fit call as the caps see it: the model, how many examples, epochs and batch size.
    `streamed`: the examples come batch by batch from where they are stored (the gesture
    trainer), so only a batch of them is in memory at once."""

    model: ModelSummary
    samples: int
    epochs: int
    batch_size: int
    streamed: bool = False

    @property
    def dataset_bytes(self) -> int:
        """float32 inputs in memory (targets are small next to them and are not counted): all
        the examples, or one batch of them when streamed."""
        held = min(self.batch_size, self.samples) if self.streamed else self.samples
        return 4 * held * math.prod(self.model.input_shape)

    @property
    def work(self) -> int:
        """Examples processed: the unit of the server's daily training budget."""
        return self.samples * self.epochs


def validate_input_shape(shape: Sequence[int], limits: Limits = DEFAULT_LIMITS) -> None:
    if not shape or any(not isinstance(side, int) or side < 1 for side in shape):
        raise ValueError(f"input shape must be positive ints, got {tuple(shape)}")
    check_cap("max_input_side", max(shape), limits, f"the input side in {tuple(shape)}")
    check_cap(
        "max_input_elements", math.prod(shape), limits, f"elements per example {tuple(shape)}"
    )


def validate_model(summary: ModelSummary, limits: Limits = DEFAULT_LIMITS) -> None:
    """Raises LimitExceededError naming the first cap the model is over."""
    validate_input_shape(summary.input_shape, limits)
    check_cap("max_params", summary.param_count, limits, "the parameter count")
    check_cap("max_layers", summary.layer_count, limits, "the layer count")
    check_cap("max_model_file_bytes", 4 * summary.param_count, limits, "the weights' bytes")


def check_allocation(
    shape: Sequence[int], itemsize: int, live_bytes: int, limits: Limits = DEFAULT_LIMITS
) -> None:
    """The engine's check before it allocates a tensor of `shape`: its bytes and the live bytes
    with it, against max_tensor_bytes and max_live_tensor_bytes."""
    nbytes = itemsize * math.prod(shape)
    check_cap("max_tensor_bytes", nbytes, limits, f"the bytes of a tensor of shape {tuple(shape)}")
    check_cap(
        "max_live_tensor_bytes",
        live_bytes + nbytes,
        limits,
        f"live tensor bytes with a new tensor of shape {tuple(shape)}",
    )


def validate_training(config: TrainingConfig, limits: Limits = DEFAULT_LIMITS) -> None:
    """The model's caps, then epochs, batch size, samples and dataset bytes."""
    validate_model(config.model, limits)
    for value, name in (
        (config.samples, "samples"),
        (config.epochs, "epochs"),
        (config.batch_size, "batch_size"),
    ):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    check_cap("max_epochs", config.epochs, limits, "epochs")
    check_cap("max_batch_size", config.batch_size, limits, "the batch size")
    check_cap("max_samples", config.samples, limits, "the number of samples")
    check_cap("max_dataset_bytes", config.dataset_bytes, limits, "the dataset's bytes in memory")
