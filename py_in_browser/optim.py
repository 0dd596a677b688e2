"""Optimizers (SGD, RMSprop, Adam, AdamW) with Keras update rules, written in tensor ops.

The step counter lives on the device and every update can be gated by a boolean scalar, so a
GPU backend can replay a whole training step without host round trips; a gated-off step leaves
weights, slots and the counter untouched (this is how fit keeps the last good weights on NaN).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from functools import reduce
from typing import Any

import numpy as np

from . import functional as F
from .tensor import Tensor, Variable, full


class Optimizer:
    """Base class: per-variable slots, optional clipnorm / global_clipnorm, gated updates."""

    name = "optimizer"
    slot_names: tuple[str, ...] = ()

    def __init__(
        self,
        learning_rate: float,
        clipnorm: float | None = None,
        global_clipnorm: float | None = None,
    ) -> None:
        if not learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {learning_rate!r}")
        for label, value in (("clipnorm", clipnorm), ("global_clipnorm", global_clipnorm)):
            if value is not None and not value > 0:
                raise ValueError(f"{label} must be > 0, got {value!r}")
        self.learning_rate = float(learning_rate)
        self.clipnorm, self.global_clipnorm = clipnorm, global_clipnorm
        self.iterations: Variable | None = None
        self.slots: list[list[Variable]] = []
        self._built_for: list[int] = []
        self._applied = 0  # apply_gradients calls (host side; replayed steps do not count)
        self._clamp_noted: set[tuple[str, float]] = set()

    def build(self, variables: Sequence[Variable]) -> None:
        """Creates the step counter and zero slots for each variable (idempotent)."""
        if self._built_for == [id(v) for v in variables]:
            return
        self.dispose()
        self.iterations = Variable(0.0, trainable=False, name=f"{self.name}/iterations")
        self.slots = [
            [
                Variable(np.zeros(v.shape, v.dtype), trainable=False, name=f"{v.name}/{s}")
                for s in self.slot_names
            ]
            for v in variables
        ]
        self._built_for = [id(v) for v in variables]

    def variables(self) -> list[Variable]:
        """Optimizer state in checkpoint order: iterations, then each variable's slots."""
        if self.iterations is None:
            return []
        return [self.iterations, *(s for slots in self.slots for s in slots)]

    def dispose(self) -> None:
        for v in self.variables():
            v.dispose()
        self.iterations, self.slots, self._built_for = None, [], []

    def apply_gradients(
        self, grads_and_vars: Iterable[tuple[Tensor | None, Variable]], gate: Tensor | None = None
    ) -> None:
        """One update step; with a bool scalar `gate`, the step only takes effect where it is True."""
        pairs = list(grads_and_vars)
        variables = [v for _, v in pairs]
        self.build(variables)
        assert self.iterations is not None
        grads = self._clip([g for g, _ in pairs])
        self._applied += 1
        step = F.add(self.iterations, 1.0)
        shared = self._step_scalars(step)  # once per step, not once per variable
        for (var, slots), grad in zip(zip(variables, self.slots, strict=True), grads, strict=True):
            if grad is None:
                continue
            new_var, new_slots = self._update(var, grad, slots, shared)
            for target, value in zip((var, *slots), (new_var, *new_slots), strict=True):
                target.assign(value if gate is None else F.where(gate, value, target))
        self.iterations.assign(step if gate is None else F.where(gate, step, self.iterations))

    def _clip(self, grads: list[Tensor | None]) -> list[Tensor | None]:
        if self.clipnorm is not None:
            grads = [
                None if g is None else _scale_to_norm(g, F.norm(g), self.clipnorm) for g in grads
            ]
        if self.global_clipnorm is not None:
            present = [g for g in grads if g is not None]
            total = F.sqrt(reduce(F.add, [F.sum(F.square(g)) for g in present]))
            grads = [
                None if g is None else _scale_to_norm(g, total, self.global_clipnorm) for g in grads
            ]
        return grads

    def _step_scalars(self, step: Tensor) -> Any:
        """Device scalars every variable's update of this step uses (Adam's bias corrections),
        computed once per step: on a GPU each is a dispatch, so not one set per variable."""
        return step

    def _update(
        self, var: Tensor, grad: Tensor, slots: list[Variable], shared: Any
    ) -> tuple[Tensor, list[Tensor]]:
        raise NotImplementedError

    def _storage_epsilon(self, requested: float, squared: bool = False) -> float:
        """`requested`, raised to the active backend's `min_epsilon` (its square where epsilon is
        added under the square root) when the backend's storage cannot honour a smaller one;
        notes a raise once per optimizer and backend as an "epsilon_clamped" runtime event and a
        RuntimeWarning. Backends with float32 storage have min_epsilon 0: nothing changes."""
        from . import runtime  # late: runtime imports the backends, which import tensors

        backend = runtime.current_backend()
        floor = backend.min_epsilon**2 if squared else backend.min_epsilon
        if requested >= floor:
            return requested
        if (backend.name, floor) not in self._clamp_noted:
            self._clamp_noted.add((backend.name, floor))
            runtime.record_event(
                "epsilon_clamped",
                self._applied,
                optimizer=self.name,
                requested=requested,
                used=floor,
                backend=backend.name,
            )
            warnings.warn(
                f"{self.name}: epsilon {requested:g} is below what {backend.name}'s storage "
                f"({backend.storage_format}) can represent; using {floor:g}",
                RuntimeWarning,
                stacklevel=3,
            )
        return floor

    def get_config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "learning_rate": self.learning_rate,
            "clipnorm": self.clipnorm,
            "global_clipnorm": self.global_clipnorm,
        }


def _scale_to_norm(g: Tensor, norm: Tensor, limit: float) -> Tensor:
    return F.mul(g, F.div(limit, F.maximum(norm, limit)))


class SGD(Optimizer):
    """Keras SGD: m = momentum * m - lr * g; w += m (nesterov: w += momentum * m - lr * g)."""

    name = "sgd"

    def __init__(
        self, learning_rate: float = 0.01, momentum: float = 0.0, nesterov: bool = False, **kw: Any
    ) -> None:
        super().__init__(learning_rate, **kw)
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"momentum must be in [0, 1], got {momentum!r}")
        self.momentum, self.nesterov = float(momentum), nesterov
        self.slot_names = ("momentum",) if self.momentum > 0 else ()

    def _update(
        self, var: Tensor, grad: Tensor, slots: list[Variable], shared: Any
    ) -> tuple[Tensor, list[Tensor]]:
        lr = self.learning_rate
        if not slots:
            return F.sub(var, F.mul(grad, lr)), []
        m = F.add(F.mul(grad, -lr), F.mul(slots[0], self.momentum))
        delta = F.add(F.mul(grad, -lr), F.mul(m, self.momentum)) if self.nesterov else m
        return F.add(var, delta), [m]

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "momentum": self.momentum, "nesterov": self.nesterov}


class RMSprop(Optimizer):
    """Keras RMSprop: v = rho v + (1 - rho) g^2; w -= lr g / sqrt(v + eps).

    On float16 storage eps is raised to at least min_epsilon^2 (half's smallest normal): see Adam.
    """

    name = "rmsprop"
    slot_names = ("velocity",)

    def __init__(
        self, learning_rate: float = 0.001, rho: float = 0.9, epsilon: float = 1e-7, **kw: Any
    ) -> None:
        super().__init__(learning_rate, **kw)
        self.rho, self.epsilon = float(rho), float(epsilon)

    def _update(
        self, var: Tensor, grad: Tensor, slots: list[Variable], shared: Any
    ) -> tuple[Tensor, list[Tensor]]:
        v = F.add(F.mul(slots[0], self.rho), F.mul(F.square(grad), 1.0 - self.rho))
        eps = self._storage_epsilon(self.epsilon, squared=True)
        step_size = F.div(F.mul(grad, self.learning_rate), F.sqrt(F.add(v, eps)))
        return F.sub(var, step_size), [v]

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "rho": self.rho, "epsilon": self.epsilon}


class Adam(Optimizer):
    """Adam as in the paper's Algorithm 1 (and PyTorch, TF.js): w -= lr m_hat / (sqrt(v_hat) + eps).

    Keras folds the bias correction into the step size, which moves epsilon by sqrt(1 - b2^t);
    the paper's placement is used so that results match PyTorch step for step.

    Where the backend stores tensors as float16 (webgl2 without float32 render targets), the
    second moment v of a gradient below about 2^-7 falls under half's smallest normal (2^-14)
    and is lost, and the step lr * m / (sqrt(v) + eps) with the default eps = 1e-7 becomes huge:
    training diverges. There eps is raised to the backend's `min_epsilon` (2^-7 = sqrt(2^-14)),
    so a step whose v was lost is still at most about lr (TF.js raises it to 1e-4 for the same
    reason). The configured epsilon is kept in get_config; an "epsilon_clamped" runtime event
    and a RuntimeWarning say when this happens. float32 backends (cpu, webgpu, webgl2 on float32
    textures) have min_epsilon 0 and use epsilon as given.
    """

    name = "adam"
    slot_names = ("m", "v")

    def __init__(
        self,
        learning_rate: float = 0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        **kw: Any,
    ) -> None:
        super().__init__(learning_rate, **kw)
        self.beta_1, self.beta_2, self.epsilon = float(beta_1), float(beta_2), float(epsilon)

    def _update(
        self, var: Tensor, grad: Tensor, slots: list[Variable], shared: Any
    ) -> tuple[Tensor, list[Tensor]]:
        b1, b2 = self.beta_1, self.beta_2
        step_size, correction_2 = shared
        m = F.add(F.mul(slots[0], b1), F.mul(grad, 1.0 - b1))
        v = F.add(F.mul(slots[1], b2), F.mul(F.square(grad), 1.0 - b2))
        eps = self._storage_epsilon(self.epsilon)
        # lr * m_hat = m * (lr / (1 - b1^t)): one full-size op instead of a div and a mul.
        update = F.div(F.mul(m, step_size), F.add(F.sqrt(F.div(v, correction_2)), eps))
        return F.sub(var, update), [m, v]

    def _step_scalars(self, step: Tensor) -> tuple[Tensor, Tensor]:
        """lr / (1 - b1^t) and 1 - b2^t, the bias corrections, as device scalars."""
        correction_1 = F.sub(1.0, F.pow(full((), self.beta_1), step))
        correction_2 = F.sub(1.0, F.pow(full((), self.beta_2), step))
        return F.div(self.learning_rate, correction_1), correction_2

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "beta_1": self.beta_1,
            "beta_2": self.beta_2,
            "epsilon": self.epsilon,
        }


class AdamW(Adam):
    """Adam with decoupled weight decay applied before the Adam step: w -= lr * wd * w."""

    name = "adamw"

    def __init__(self, learning_rate: float = 0.001, weight_decay: float = 0.004, **kw: Any):
        super().__init__(learning_rate, **kw)
        self.weight_decay = float(weight_decay)

    def _update(
        self, var: Tensor, grad: Tensor, slots: list[Variable], shared: Any
    ) -> tuple[Tensor, list[Tensor]]:
        decayed = F.sub(var, F.mul(var, self.learning_rate * self.weight_decay))
        new_var, new_slots = super()._update(decayed, grad, slots, shared)
        return new_var, new_slots

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "weight_decay": self.weight_decay}


OPTIMIZERS: dict[str, Any] = {
    "sgd": SGD,
    "rmsprop": RMSprop,
    "adam": Adam,
    "adamw": AdamW,
}


def get(optimizer: Any) -> Optimizer:
    """An Optimizer instance, or a name resolved with Keras defaults."""
    if isinstance(optimizer, Optimizer):
        return optimizer
    if isinstance(optimizer, str) and optimizer.lower() in OPTIMIZERS:
        return OPTIMIZERS[optimizer.lower()]()
    raise ValueError(
        f"optimizer: unknown {optimizer!r}; expected an Optimizer or one of {sorted(OPTIMIZERS)}"
    )


def from_config(config: dict[str, Any]) -> Optimizer:
    options = {k: v for k, v in config.items() if k != "name"}
    return OPTIMIZERS[config["name"]](**options)


__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "RMSprop", "from_config", "get"]
