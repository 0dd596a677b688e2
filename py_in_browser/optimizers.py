"""Optimizers (SGD, RMSprop, Adam, AdamW), each update rule written as fused programs.

Each class's docstring states its exact update and how it relates to Keras 3, PyTorch and TF.js:
SGD and RMSprop follow Keras; Adam and AdamW follow the Adam paper (as PyTorch and TF.js do) and
offer Keras's epsilon placement with ``epsilon_placement="keras"``. Constructor defaults are
Keras's, and a name given to ``Sequential.compile`` (``"adam"``) builds the class with them.

The step counter lives on the device and every update can be gated by a boolean scalar, so a
GPU backend can replay a whole training step without host round trips; a gated-off step leaves
weights, slots and the counter untouched (this is how fit keeps the last good weights on NaN).

Each new value (a weight, a slot) is ONE fused elementwise program over the old values, the
gradient, the step's scalars and the gate (fusion.py): one GPU dispatch per tensor instead of one
per op. A program that needs a slot's new value (Adam's weight update reads the new m and v)
recomputes it inline, which costs a few multiplies and saves a buffer round trip.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any

import numpy as np

from . import events, fusion, runtime
from . import functional as F
from .fusion import Value
from .tensor import Tensor, Variable


@dataclass(frozen=True)
class Rule:
    """How one tensor gets its new value each step: `fn` over the tensors named in `reads`
    ("var", "grad", a slot name, or a step scalar's name), run as one fused program."""

    fn: Callable[..., Value]
    reads: tuple[str, ...]


# Where Adam adds epsilon: to the bias-corrected sqrt(v_hat) as the paper, PyTorch and TF.js
# do, or to the uncorrected sqrt(v) with the correction folded into the step size, as Keras 3.
EPSILON_PLACEMENTS = ("paper", "keras")


def _advance(t: Value) -> Value:
    return t + 1.0


class Optimizer:
    """Base class: per-variable slots, optional clipnorm / global_clipnorm, gated updates.

    Before the update, ``clipnorm`` rescales each gradient g to g * min(1, clipnorm / ||g||),
    and ``global_clipnorm`` rescales all of them by min(1, global_clipnorm / sqrt(sum ||g||^2))
    (both as Keras). ``iterations`` counts the steps taken, on the device.

    Subclasses give their update as data: `_rules` (per variable: the variable's rule, then one
    per slot, all reading the OLD values) and `_step_rules` (device scalars computed once per
    step from the new step count, e.g. Adam's bias corrections).

    Example:
        >>> opt = pib.optimizers.SGD(learning_rate=0.1, clipnorm=1.0)
        >>> w = pib.Variable([0.0, 0.0])
        >>> opt.apply_gradients([(pib.tensor([3.0, 4.0]), w)])  # norm 5, clipped to 1
        >>> (await w.numpy()).round(4)
        array([-0.06, -0.08], dtype=float32)
        >>> await opt.iterations.item()
        1.0
    """

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
        """Frees the step counter and slots; the next apply_gradients starts from zero."""
        for v in self.variables():
            v.dispose()
        self.iterations, self.slots, self._built_for = None, [], []

    def apply_gradients(
        self, grads_and_vars: Iterable[tuple[Tensor | None, Variable]], gate: Tensor | None = None
    ) -> None:
        """One update step over (gradient, variable) pairs; a None gradient leaves its variable.

        With a bool scalar tensor `gate`, the step only takes effect where it is True: False
        leaves weights, slots and the step counter as they were (fit gates on a finite loss).
        """
        pairs = list(grads_and_vars)
        variables = [v for _, v in pairs]
        self.build(variables)
        assert self.iterations is not None
        grads = self._clip([g for g, _ in pairs])
        self._applied += 1
        rules = self._rules(runtime.current_backend().min_epsilon)
        # The step counter after this step, which the step rules also read: where the gate is
        # False it did not advance, but every update reading it is then discarded (gated).
        advanced = gated(_advance, [self.iterations], gate)
        # Once per step, not once per variable.
        shared = {name: F.fused(fn, advanced) for name, fn in self._step_rules().items()}
        for (var, slots), grad in zip(zip(variables, self.slots, strict=True), grads, strict=True):
            if grad is None:
                continue
            named = {
                "var": var,
                "grad": grad,
                **dict(zip(self.slot_names, slots, strict=True)),
                **shared,
            }
            new_values = [gated(r.fn, [named[n] for n in r.reads], gate) for r in rules]
            for target, value in zip((var, *slots), new_values, strict=True):
                target.assign(value)
        self.iterations.assign(advanced)

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

    def _rules(self, epsilon_floor: float) -> list[Rule]:
        """The variable's rule, then each slot's (slot_names order). `epsilon_floor`: the
        smallest epsilon the backend's storage honours (see _storage_epsilon)."""
        raise NotImplementedError

    def _step_rules(self) -> dict[str, Callable[[Value], Value]]:
        """Named device scalars every variable's rules may read, each a function of the step
        count t (1 on the first step). Computed once per step: on a GPU each is a dispatch."""
        return {}

    def _storage_epsilon(self, requested: float, floor: float) -> float:
        """`requested`, raised to `floor` (the active backend's `min_epsilon`, or its square
        where epsilon is added under the square root) when the backend's storage cannot honour
        a smaller one; notes a raise once per optimizer and backend as an "epsilon_clamped"
        runtime event and a RuntimeWarning. float32 storage has floor 0: nothing changes."""
        if requested >= floor:
            return requested
        backend = runtime.current_backend()
        if (backend.name, floor) not in self._clamp_noted:
            self._clamp_noted.add((backend.name, floor))
            events.record_event(
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
                stacklevel=4,
            )
        return floor

    def get_config(self) -> dict[str, Any]:
        """The constructor arguments by name, plus "name"; `from_config` rebuilds from it."""
        return {
            "name": self.name,
            "learning_rate": self.learning_rate,
            "clipnorm": self.clipnorm,
            "global_clipnorm": self.global_clipnorm,
        }


def _scale_to_norm(g: Tensor, norm: Tensor, limit: float) -> Tensor:
    return F.mul(g, F.div(limit, F.maximum(norm, limit)))


def _gate_rule(rule: Callable[..., Value]) -> Callable[..., Value]:
    """rule over all inputs but the last, or the first input (the value being replaced) where
    the last input, a bool scalar, is False."""
    return lambda *xs: fusion.where(xs[-1], rule(*xs[:-1]), xs[0])


def gated(rule: Callable[..., Value], inputs: Sequence[Tensor], gate: Tensor | None) -> Tensor:
    """One fused program computing rule(*inputs), kept at inputs[0] where `gate` is False."""
    if gate is None:
        return F.fused(rule, *inputs)
    return F.fused(_gate_rule(rule), *inputs, gate)


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, Keras's rule.

    Without momentum: w -= learning_rate * g. With momentum (0 < momentum <= 1), a velocity
    slot m (zero at first)::

        m = momentum * m - learning_rate * g
        w += m                                      (nesterov=False)
        w += momentum * m - learning_rate * g       (nesterov=True, with the new m)

    While the learning rate is constant this is PyTorch's SGD with dampening 0 (its buffer is
    -m / learning_rate) and TF.js's momentum optimizer.

    Example:
        >>> w = pib.Variable([1.0])
        >>> opt = pib.optimizers.SGD(learning_rate=0.1, momentum=0.9)
        >>> for _ in range(2):
        ...     opt.apply_gradients([(pib.tensor([1.0]), w)])
        >>> await w.numpy()  # 1 - 0.1, then - (0.9 * 0.1 + 0.1)
        array([0.71], dtype=float32)
    """

    name = "sgd"

    def __init__(
        self, learning_rate: float = 0.01, momentum: float = 0.0, nesterov: bool = False, **kw: Any
    ) -> None:
        super().__init__(learning_rate, **kw)
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"momentum must be in [0, 1], got {momentum!r}")
        self.momentum, self.nesterov = float(momentum), nesterov
        self.slot_names = ("momentum",) if self.momentum > 0 else ()

    def _rules(self, epsilon_floor: float) -> list[Rule]:
        lr, momentum, nesterov = self.learning_rate, self.momentum, self.nesterov
        if not self.slot_names:
            return [Rule(lambda w, g: w - g * lr, ("var", "grad"))]

        def new_m(m: Value, g: Value) -> Value:
            return g * -lr + m * momentum

        def new_w(w: Value, m: Value, g: Value) -> Value:
            m_now = new_m(m, g)
            return w + (g * -lr + m_now * momentum if nesterov else m_now)

        return [Rule(new_w, ("var", "momentum", "grad")), Rule(new_m, ("momentum", "grad"))]

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "momentum": self.momentum, "nesterov": self.nesterov}


class RMSprop(Optimizer):
    """RMSprop, Keras's rule (also TF.js's): epsilon goes inside the square root::

        v = rho * v + (1 - rho) * g^2
        w -= learning_rate * g / sqrt(v + epsilon)

    PyTorch's ``torch.optim.RMSprop`` adds epsilon outside instead, g / (sqrt(v) + epsilon), and
    defaults to rho (its ``alpha``) 0.99 and epsilon 1e-8; the two agree to about
    epsilon / (2 v) relative wherever v is well above epsilon. No option switches the placement:
    a port from PyTorch sets rho and epsilon and keeps that small difference. Defaults are
    Keras's: learning_rate 0.001, rho 0.9, epsilon 1e-7 (no momentum, not centered).

    On float16 storage eps is raised to at least min_epsilon^2 (half's smallest normal): see Adam.

    Example:
        >>> w = pib.Variable([1.0])
        >>> opt = pib.optimizers.RMSprop(learning_rate=0.01)
        >>> opt.apply_gradients([(pib.tensor([2.0]), w)])
        >>> (await w.numpy()).round(5)  # 1 - 0.01 * 2 / sqrt(0.1 * 4)
        array([0.96838], dtype=float32)
    """

    name = "rmsprop"
    slot_names = ("velocity",)

    def __init__(
        self, learning_rate: float = 0.001, rho: float = 0.9, epsilon: float = 1e-7, **kw: Any
    ) -> None:
        super().__init__(learning_rate, **kw)
        self.rho, self.epsilon = float(rho), float(epsilon)

    def _rules(self, epsilon_floor: float) -> list[Rule]:
        rho, lr = self.rho, self.learning_rate
        eps = self._storage_epsilon(self.epsilon, epsilon_floor**2)

        def new_v(v: Value, g: Value) -> Value:
            return v * rho + g * g * (1.0 - rho)

        def new_w(w: Value, v: Value, g: Value) -> Value:
            return w - g * lr / fusion.sqrt(new_v(v, g) + eps)

        return [Rule(new_w, ("var", "velocity", "grad")), Rule(new_v, ("velocity", "grad"))]

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "rho": self.rho, "epsilon": self.epsilon}


class Adam(Optimizer):
    r"""Adam with the paper's update (Kingma & Ba, Algorithm 1), as PyTorch and TF.js do.

    Per step t (1 on the first step), with gradient g::

        m = beta_1 * m + (1 - beta_1) * g
        v = beta_2 * v + (1 - beta_2) * g^2
        m_hat = m / (1 - beta_1^t);  v_hat = v / (1 - beta_2^t)
        w -= learning_rate * m_hat / (sqrt(v_hat) + epsilon)

    That is the default, ``epsilon_placement="paper"``, so results match PyTorch's
    ``torch.optim.Adam`` step for step. Keras 3 instead folds the bias corrections into the
    step size and adds epsilon to the uncorrected sqrt(v)::

        lr_t = learning_rate * sqrt(1 - beta_2^t) / (1 - beta_1^t)
        w -= lr_t * m / (sqrt(v) + epsilon)

    which equals the paper's form with epsilon scaled by 1 / sqrt(1 - beta_2^t). The gap grows
    as gradients shrink toward epsilon: with the defaults and gradients near 1e-3, weights
    differ by about 1e-4 after 20 steps. Pass ``epsilon_placement="keras"`` to get Keras's
    numbers when porting a Keras script. The other defaults are Keras's
    (learning_rate 0.001, beta_1 0.9, beta_2 0.999, epsilon 1e-7; PyTorch's epsilon is 1e-8).

    Args:
        learning_rate: step size (> 0).
        beta_1: decay of the first-moment average m.
        beta_2: decay of the second-moment average v.
        epsilon: added to the denominator, where ``epsilon_placement`` says.
        epsilon_placement: ``"paper"`` (default; PyTorch, TF.js) or ``"keras"`` (Keras 3).
        clipnorm: each gradient is rescaled to at most this L2 norm before the update.
        global_clipnorm: all gradients together are rescaled to at most this joint L2 norm.

    Where the backend stores tensors as float16 (webgl2 without float32 render targets), the
    second moment v of a gradient below about 2^-7 falls under half's smallest normal (2^-14)
    and is lost, and the step lr * m / (sqrt(v) + eps) with the default eps = 1e-7 becomes huge:
    training diverges. There eps is raised to the backend's ``min_epsilon`` (2^-7 = sqrt(2^-14)),
    so a step whose v was lost is still at most about lr (TF.js raises it to 1e-4 for the same
    reason). The configured epsilon is kept in get_config; an "epsilon_clamped" runtime event
    and a RuntimeWarning say when this happens. float32 backends (cpu, webgpu, webgl2 on float32
    textures) have min_epsilon 0 and use epsilon as given.

    Example:
        >>> w = pib.Variable([1.0, -1.0])
        >>> opt = pib.optimizers.Adam(learning_rate=0.1)
        >>> opt.apply_gradients([(pib.tensor([0.5, -2.0]), w)])
        >>> (await w.numpy()).round(4)  # the first step moves each weight by about lr
        array([ 0.9, -0.9], dtype=float32)
        >>> keras_style = pib.optimizers.Adam(0.1, epsilon_placement="keras")
    """

    name = "adam"
    slot_names = ("m", "v")

    def __init__(
        self,
        learning_rate: float = 0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        epsilon_placement: str = "paper",
        **kw: Any,
    ) -> None:
        super().__init__(learning_rate, **kw)
        if epsilon_placement not in EPSILON_PLACEMENTS:
            raise ValueError(
                f"epsilon_placement must be one of {EPSILON_PLACEMENTS}, got {epsilon_placement!r}"
            )
        self.beta_1, self.beta_2, self.epsilon = float(beta_1), float(beta_2), float(epsilon)
        self.epsilon_placement = epsilon_placement

    def _rules(self, epsilon_floor: float) -> list[Rule]:
        b1, b2 = self.beta_1, self.beta_2
        eps = self._storage_epsilon(self.epsilon, epsilon_floor)
        decayed = self._decayed

        def new_m(m: Value, g: Value) -> Value:
            return m * b1 + g * (1.0 - b1)

        def new_v(v: Value, g: Value) -> Value:
            return v * b2 + g * g * (1.0 - b2)

        def new_w(w: Value, m: Value, v: Value, g: Value, step_size: Value, c2: Value) -> Value:
            # lr * m_hat = m * (lr / (1 - b1^t)): the correction is one scalar per step.
            return decayed(w) - new_m(m, g) * step_size / (fusion.sqrt(new_v(v, g) / c2) + eps)

        def new_w_keras(w: Value, m: Value, v: Value, g: Value, keras_step: Value) -> Value:
            return decayed(w) - new_m(m, g) * keras_step / (fusion.sqrt(new_v(v, g)) + eps)

        weight_rule = (
            Rule(new_w_keras, ("var", "m", "v", "grad", "keras_step_size"))
            if self.epsilon_placement == "keras"
            else Rule(new_w, ("var", "m", "v", "grad", "step_size", "correction_2"))
        )
        return [weight_rule, Rule(new_m, ("m", "grad")), Rule(new_v, ("v", "grad"))]

    def _decayed(self, w: Value) -> Value:
        """The weight the Adam step starts from (AdamW decays it first)."""
        return w

    def _step_rules(self) -> dict[str, Callable[[Value], Value]]:
        """The bias corrections: lr / (1 - b1^t) and 1 - b2^t (paper), or Keras's single
        lr * sqrt(1 - b2^t) / (1 - b1^t)."""
        b1, b2, lr = self.beta_1, self.beta_2, self.learning_rate
        if self.epsilon_placement == "keras":
            return {
                "keras_step_size": lambda t: (
                    fusion.sqrt(1.0 - fusion.pow(b2, t)) * lr / (1.0 - fusion.pow(b1, t))
                )
            }
        return {
            "step_size": lambda t: lr / (1.0 - fusion.pow(b1, t)),
            "correction_2": lambda t: 1.0 - fusion.pow(b2, t),
        }

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "beta_1": self.beta_1,
            "beta_2": self.beta_2,
            "epsilon": self.epsilon,
            "epsilon_placement": self.epsilon_placement,
        }


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter), applied before the Adam step::

        w -= learning_rate * weight_decay * w
        w -= <Adam's step, as Adam with the same epsilon_placement>

    as Keras 3 and PyTorch's ``torch.optim.AdamW`` do (PyTorch's default weight_decay is 0.01,
    Keras's 0.004, used here). Every other argument is Adam's.

    Example:
        >>> w = pib.Variable([1.0])
        >>> opt = pib.optimizers.AdamW(learning_rate=0.1, weight_decay=0.5)
        >>> opt.apply_gradients([(pib.tensor([0.0]), w)])  # no gradient: decay only
        >>> await w.numpy()
        array([0.95], dtype=float32)
    """

    name = "adamw"

    def __init__(self, learning_rate: float = 0.001, weight_decay: float = 0.004, **kw: Any):
        super().__init__(learning_rate, **kw)
        self.weight_decay = float(weight_decay)

    def _decayed(self, w: Value) -> Value:
        return w - w * (self.learning_rate * self.weight_decay)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "weight_decay": self.weight_decay}


OPTIMIZERS: dict[str, Any] = {
    "sgd": SGD,
    "rmsprop": RMSprop,
    "adam": Adam,
    "adamw": AdamW,
}


def get(optimizer: Any) -> Optimizer:
    """An Optimizer instance as is, or a new one from its name ("sgd", "rmsprop", "adam",
    "adamw"; any case) with the class defaults.

    Example:
        >>> pib.optimizers.get("Adam").get_config()["learning_rate"]
        0.001
    """
    if isinstance(optimizer, Optimizer):
        return optimizer
    if isinstance(optimizer, str) and optimizer.lower() in OPTIMIZERS:
        return OPTIMIZERS[optimizer.lower()]()
    raise ValueError(
        f"optimizer: unknown {optimizer!r}; expected an Optimizer or one of {sorted(OPTIMIZERS)}"
    )


def from_config(config: dict[str, Any]) -> Optimizer:
    """A new optimizer of the kind and settings `get_config` returned (its slots start empty).

    Example:
        >>> opt = pib.optimizers.Adam(0.01, epsilon_placement="keras")
        >>> copy = pib.optimizers.from_config(opt.get_config())
        >>> copy.epsilon_placement, copy.learning_rate
        ('keras', 0.01)
    """
    options = {k: v for k, v in config.items() if k != "name"}
    return OPTIMIZERS[config["name"]](**options)


def _register_common_programs() -> None:
    """Tells the GPU backends which fused programs training runs every step (each optimizer
    kind with its defaults; constants are not part of a compiled kernel, so any setting of the
    same kind reuses them), so they compile them at start-up instead of in the first step."""
    default_adam = Adam()  # the typical model's optimizer (fusion.typical_programs)
    for optimizer in (
        SGD(),
        SGD(momentum=0.9),
        SGD(momentum=0.9, nesterov=True),
        RMSprop(),
        default_adam,
        AdamW(),
        Adam(epsilon_placement="keras"),
        AdamW(epsilon_placement="keras"),
    ):
        scalars = set(optimizer._step_rules())
        typical = optimizer is default_adam
        # A variable's rules run back to back over its shape, as do the step rules over ().
        updates = []
        for rule in optimizer._rules(epsilon_floor=0.0):
            kinds = tuple("scalar" if n in scalars else "full" for n in rule.reads)
            program = fusion.trace(_gate_rule(rule.fn), len(kinds) + 1)
            fusion.register_common(program, (*kinds, "gate"), typical=typical)
            updates.append((program, (*rule.reads, "gate")))
        step_updates = []
        for fn in optimizer._step_rules().values():
            program = fusion.trace(fn, 1)
            fusion.register_common(program, ("scalar",), typical=typical)
            step_updates.append((program, ("step",)))
        for group in (updates, step_updates):
            if len(group) > 1:
                fusion.register_common_group(group)
    fusion.register_common(fusion.trace(_gate_rule(_advance), 2), ("scalar", "gate"), typical=True)
    fusion.register_common(fusion.trace(_advance, 1), ("scalar",))  # no gate: a custom loop


_register_common_programs()

__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "RMSprop", "from_config", "get"]
