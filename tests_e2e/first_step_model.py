"""The benchmark's W3s model and its first training step as page code (32x32 RGB, two relu
convolutions with max pooling, two dense layers, softmax cross-entropy on class labels, Adam,
train_on_batch on device tensors): the GPU backends' tests check that everything it needs was
prepared once ready."""

from __future__ import annotations

import textwrap

W3S_FIRST_STEP = """\
from py_in_browser import layers
model = pib.Sequential([
    layers.Conv2D(16, 3, activation="relu", padding="same", input_shape=(32, 32, 3)),
    layers.MaxPool2D(2),
    layers.Conv2D(32, 3, activation="relu", padding="same"),
    layers.MaxPool2D(2),
    layers.Flatten(),
    layers.Dense(64, activation="relu"),
    layers.Dense(4),
])
model.compile("adam", pib.losses.SparseCategoricalCrossentropy(from_logits=True))
rng = np.random.default_rng(0)
x = pib.tensor(rng.uniform(-1, 1, (8, 32, 32, 3)).astype(np.float32))
loss = await model.train_on_batch(x, pib.tensor(np.arange(8) % 4, dtype="int32"))
await loss.numpy()
"""


def indented(code: str, spaces: int) -> str:
    """`code` indented to sit inside a block of page code."""
    return textwrap.indent(code, " " * spaces)
