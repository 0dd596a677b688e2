"""The programs the first training step of a typical model draws, with the render targets each
draws into: init hands them to bridge.js warmDraws, which links them and draws each once into
1x1 targets of that format, so the first step finds them ready.

Why draws and not only links: on SwiftShader (a GPU emulated on the CPU) linking a program
costs ~3 ms but its first draw 15-90 ms, because the GPU process builds the program's pipeline
for the render targets' formats then. Drawn ahead, that work runs in the GPU process while
Python builds the first step. The GPU runs one context's commands in order, so a program warmed
here that the step does not draw delays the step: only what a typical first step uses is here
(a convolutional or dense classifier with relu, max pooling, softmax cross-entropy on class
labels and the default Adam: fusion.typical_programs); the rest of the warm-up is linked while
idle. The formats are the typical step's; a program drawn into another format later pays that
format's part (~10 ms) at its first draw there.
"""

from __future__ import annotations

from ... import fusion
from . import blocks, shaders

RGBA, R = 4, 1
# Kernels by first use in the step: forward, loss, backward, the step's loss sum and finite
# check. Scalars (the loss, the step counter) live in one-element R textures.
_FORWARD = ["conv2d_block:c3k3_{shape}.bias", "block_interleave:aligned_{shape}.relu", "pool4:max"]
_FORWARD += ["conv2d_block:vec_{shape}.bias", "copy4", "matmul_block:nn_{shape}.bias"]
_FORWARD += ["binary4:mul", "matmul4:nn_aligned", "binary4:add+periodic"]  # + the logits layer
_LOSS = [("rows", R), ("binary:equal", RGBA), ("reduce:max_axis", R), ("reduce:sum_axis", R)]
_BACKWARD = ["sum_rows4", "matmul4:nt_aligned", "transpose4", "matmul_block:nt_{shape}"]
_BACKWARD += ["block_interleave:aligned_{shape}", "matmul_block:tn_{shape}"]
_BACKWARD += ["pool4:max_grad_disjoint"]
_BACKWARD += ["flip_filter", "conv2d_block:vec_{shape}", "patches4", "matmul_block:nn_{shape}"]
_BACKWARD += ["sum_parts4"]
_STEP = [("binary4:equal", R)]


def _fused(program: fusion.Program, kinds: tuple[str, ...]) -> tuple[str, int]:
    """The key and target channels a typical step draws a registered program with: over
    scalars it writes a one-element R texture; an input broadcast along rows is read element
    by element (the element form); otherwise whole texels (the vector form)."""
    token = shaders.fused_token(program, len(kinds))
    if all(kind in ("scalar", "gate") for kind in kinds):
        return f"fused4:{token}", R
    if "rows" in kinds:
        return f"fused:{token}", RGBA
    return f"fused4:{token}", RGBA


def warm_draws(draw_buffers: int, compensated: bool) -> list[tuple[str, int, int]]:
    """(program key, channels of each target, render targets) in first-use order. With
    compensated float16 storage the ops that write a low part (shaders.PAIR_OPS) are left to
    their first use: their programs and targets depend on the inputs."""
    rows, cols = blocks.best_shape(draw_buffers)
    shape, block_targets = f"{rows}x{cols}", rows * cols

    def kernel(template: str, channels: int = RGBA) -> tuple[str, int, int]:
        key = template.format(shape=shape)
        targets = block_targets if key.startswith(("matmul_block:", "conv2d_block:")) else 1
        return key, channels, targets

    draws = [kernel(key) for key in _FORWARD]
    draws += [kernel(key, channels) for key, channels in _LOSS]
    draws += [kernel(key) for key in _BACKWARD]
    draws += [kernel(key, channels) for key, channels in _STEP]
    draws += [(*_fused(program, kinds), 1) for program, kinds in fusion.typical_programs()]
    return [draw for draw in draws if not (compensated and _writes_low_part(draw[0]))]


def _writes_low_part(key: str) -> bool:
    kind, _, arg = key.split("+")[0].partition(":")
    base = kind.removesuffix("4")
    return base in shaders.PAIR_OPS or (base == "binary" and arg in shaders.PAIR_OPS)
