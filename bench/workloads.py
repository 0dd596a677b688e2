"""The benchmark's data: workloads as layer specs both sides build from, backend pairs, budgets."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from py_in_browser.interop.graph_model import HAND_NODES

# (our backend, TF.js backend, jax-js backend or None): the harness runs every pair (a triple when
# jax-js has the matching backend) and shows a missing side as unavailable. jax-js's own "cpu"
# device is a plain JavaScript interpreter, not a counterpart of TF.js's cpu backend: no third side.
PAIRS: list[tuple[str, str, str | None]] = [
    ("webgpu", "webgpu", "webgpu"),
    ("webgl2", "webgl", "webgl"),
    ("cpu", "wasm", "wasm"),
    ("cpu", "cpu", None),
]

SYNC_EVERY_STEP = 1
SYNC_EVERY_TEN = 10


@dataclass(frozen=True)
class Workload:
    """One unit of work, described as data so ours (Python) and theirs (TF.js) build the same thing.

    kind: "train" (one optimizer step per sample), "infer" (predict + argmax + read back the class),
    "graph" (a pretrained TF.js graph model at `model_url` run to its tensor `output`, read back)
    or "matmul" (one n x n @ n x n product). `budget_s` caps one side's time on it, warm-up included.
    `jaxjs_unavailable`: why jax-js cannot run it at all (shown as its unavailable side).
    """

    name: str
    title: str
    kind: str
    budget_s: float
    input_shape: list[int] = field(default_factory=list)
    layers: list[dict[str, Any]] = field(default_factory=list)
    loss: str = ""
    optimizer: dict[str, Any] = field(default_factory=dict)
    batch: int = 1
    classes: int = 0
    matmul_n: int = 0
    seed: int = 0
    model_url: str = ""
    output: str = ""
    jaxjs_unavailable: str = ""

    def spec(self) -> dict[str, Any]:
        """What the page's two sides receive (JSON)."""
        return asdict(self)

    @property
    def sync_modes(self) -> list[int]:
        # Inference reads its answer back by definition: there is nothing to leave unsynced.
        infers = self.kind in ("infer", "graph")
        return [SYNC_EVERY_STEP] if infers else [SYNC_EVERY_STEP, SYNC_EVERY_TEN]

    @property
    def flops_per_step(self) -> float | None:
        """Floating-point operations of one matmul (2 n^3), to report GFLOP/s instead of ms."""
        return 2.0 * self.matmul_n**3 if self.kind == "matmul" else None


def _cnn_layers(dense_units: int = 64, classes: int = 4) -> list[dict[str, Any]]:
    return [
        {"type": "conv2d", "filters": 16, "kernel": 3, "padding": "same", "activation": "relu"},
        {"type": "maxpool", "size": 2},
        {"type": "conv2d", "filters": 32, "kernel": 3, "padding": "same", "activation": "relu"},
        {"type": "maxpool", "size": 2},
        {"type": "flatten"},
        {"type": "dense", "units": dense_units, "activation": "relu"},
        {"type": "dense", "units": classes, "activation": "linear"},
    ]


ADAM = {"name": "adam", "learning_rate": 1e-3}

W1 = Workload(
    name="W1",
    title="xor mlp (2-4-1, mse, SGD, batch 4)",
    kind="train",
    budget_s=20,
    input_shape=[2],
    layers=[
        {"type": "dense", "units": 4, "activation": "relu"},
        {"type": "dense", "units": 1, "activation": "sigmoid"},
    ],
    loss="mse",
    optimizer={"name": "sgd", "learning_rate": 0.1},
    batch=4,
    seed=1,
)
W2 = Workload(
    name="W2",
    title="mlp 784-128-10 (softmax xent, Adam, batch 64)",
    kind="train",
    budget_s=40,
    input_shape=[784],
    layers=[
        {"type": "dense", "units": 128, "activation": "relu"},
        {"type": "dense", "units": 10, "activation": "linear"},
    ],
    loss="softmax_cross_entropy",
    optimizer=ADAM,
    batch=64,
    classes=10,
    seed=2,
)
W3 = Workload(
    name="W3",
    title="cnn 64x64x3 (2 conv + 2 dense, Adam, batch 32)",
    kind="train",
    budget_s=140,
    input_shape=[64, 64, 3],
    layers=_cnn_layers(),
    loss="softmax_cross_entropy",
    optimizer=ADAM,
    batch=32,
    classes=4,
    seed=3,
)
W3S = Workload(
    name="W3s",
    title="cnn 32x32x3 (W3 shrunk, batch 8)",
    kind="train",
    budget_s=40,
    input_shape=[32, 32, 3],
    layers=_cnn_layers(),
    loss="softmax_cross_entropy",
    optimizer=ADAM,
    batch=8,
    classes=4,
    seed=3,
)
W4 = Workload(
    name="W4",
    title="matmul 1024x1024 @ 1024x1024",
    kind="matmul",
    budget_s=80,
    matmul_n=1024,
    seed=4,
)
INFER_W3 = Workload(
    name="I3",
    title="inference: W3 batch 1, predict + argmax + read back",
    kind="infer",
    budget_s=25,
    input_shape=[64, 64, 3],
    layers=_cnn_layers(),
    batch=1,
    classes=4,
    seed=5,
)
INFER_W3S = Workload(
    name="I3s",
    title="inference: W3s batch 1, predict + argmax + read back",
    kind="infer",
    budget_s=15,
    input_shape=[32, 32, 3],
    layers=_cnn_layers(),
    batch=1,
    classes=4,
    seed=5,
)
# Issue 26's backbone, served same-origin after `py-in-browser setup`, per camera frame: one
# 224x224 RGB crop in [0, 1] to the embedding a classifier head trains on.
HAND = Workload(
    name="H1",
    title="hand model (handlandmark-lite) batch 1 224x224x3 to its embedding + read back",
    kind="graph",
    budget_s=40,
    input_shape=[224, 224, 3],
    batch=1,
    seed=6,
    model_url="/models/handlandmark-lite/model.json",
    output=HAND_NODES["embedding"],
    jaxjs_unavailable="jax-js cannot load TF.js graph models",
)

FULL = [W1, W2, W3, W3S, W4, INFER_W3, HAND]
QUICK = [W1, W3S, INFER_W3S]
# What jax-js runs (issue 29's set): W3 is left to W3s, which stands for it at a size that fits
# jax-js's slowest backends in the budget.
JAXJS = {"W1", "W2", "W3s", "W4", "I3", "I3s"}
# Start-up also times the first finished training step of this workload (shader compilation),
# in both modes: issue 15's target names W3s (first step after ready <= 1 s on every backend).
FIRST_STEP = W3S
ALL_BY_NAME = {workload.name: workload for workload in [*FULL, INFER_W3S]}
