"""PyTorch 2.13 CPU as a second oracle: same initial weights and batches, per-step losses agree."""

import asyncio

import numpy as np
import torch

import py_in_browser as pib
from py_in_browser import layers, optimizers

STEPS = 20
BATCH = 16
TOLERANCE = 1e-5


class StepLosses(pib.Callback):
    wants_batch_logs = True

    def __init__(self) -> None:
        super().__init__()
        self.losses: list[float] = []

    def on_batch_end(self, batch: int, logs: dict) -> None:
        self.losses.append(logs["loss"])


def train_ours(model: pib.Sequential, x: np.ndarray, y: np.ndarray) -> list[float]:
    recorder = StepLosses()
    epochs = STEPS * BATCH // len(x)
    asyncio.run(
        model.fit(x, y, epochs=epochs, batch_size=BATCH, shuffle=False, callbacks=[recorder])
    )
    return recorder.losses


def train_torch(net: torch.nn.Module, opt: torch.optim.Optimizer, x: np.ndarray, y: np.ndarray):
    losses = []
    xt, yt = torch.from_numpy(x), torch.from_numpy(y).long()
    for step in range(STEPS):
        start = (step * BATCH) % len(x)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(
            net(xt[start : start + BATCH]), yt[start : start + BATCH]
        )
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_mlp_adam_matches_torch() -> None:
    rng = np.random.Generator(np.random.PCG64(7))
    x = rng.standard_normal((64, 10)).astype(np.float32)
    y = rng.integers(0, 3, 64).astype(np.int32)
    model = pib.Sequential(
        [layers.Dense(32, activation="relu", input_shape=(10,)), layers.Dense(3)]
    )
    model.compile(
        optimizer=optimizers.Adam(0.01, epsilon=1e-8),
        loss=pib.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    w1, b1, w2, b2 = asyncio.run(model.get_weights())
    hidden, head = torch.nn.Linear(10, 32), torch.nn.Linear(32, 3)
    net = torch.nn.Sequential(hidden, torch.nn.ReLU(), head)
    with torch.no_grad():
        for layer, (w, b) in zip((hidden, head), ((w1, b1), (w2, b2)), strict=True):
            layer.weight.copy_(torch.from_numpy(w.T.copy()))
            layer.bias.copy_(torch.from_numpy(b))
    opt = torch.optim.Adam(net.parameters(), lr=0.01, eps=1e-8)

    ours, theirs = train_ours(model, x, y), train_torch(net, opt, x, y)
    assert len(ours) == STEPS
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=TOLERANCE)
    assert ours[-1] < ours[0]


class NhwcCnn(torch.nn.Module):
    """conv -> relu -> max pool -> flatten (in NHWC order, as ours) -> dense."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3)
        self.dense = torch.nn.Linear(3 * 3 * 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(x.permute(0, 3, 1, 2)))
        h = torch.nn.functional.max_pool2d(h, 2).permute(0, 2, 3, 1)
        return self.dense(h.reshape(h.shape[0], -1))


def test_cnn_sgd_momentum_matches_torch() -> None:
    rng = np.random.Generator(np.random.PCG64(11))
    x = rng.standard_normal((32, 8, 8, 2)).astype(np.float32)
    y = rng.integers(0, 3, 32).astype(np.int32)
    model = pib.Sequential(
        [
            layers.Conv2D(4, 3, activation="relu", input_shape=(8, 8, 2)),
            layers.MaxPool2D(2),
            layers.Flatten(),
            layers.Dense(3),
        ]
    )
    model.compile(
        optimizer=optimizers.SGD(0.05, momentum=0.9),
        loss=pib.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    kernel, bias, dense_w, dense_b = asyncio.run(model.get_weights())
    net = NhwcCnn()
    with torch.no_grad():
        net.conv.weight.copy_(torch.from_numpy(kernel.transpose(3, 2, 0, 1).copy()))
        assert net.conv.bias is not None
        net.conv.bias.copy_(torch.from_numpy(bias))
        net.dense.weight.copy_(torch.from_numpy(dense_w.T.copy()))
        net.dense.bias.copy_(torch.from_numpy(dense_b))
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)

    ours, theirs = train_ours(model, x, y), train_torch(net, opt, x, y)
    assert len(ours) == STEPS
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=TOLERANCE)
    assert ours[-1] < ours[0]
