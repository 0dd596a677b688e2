"""A layer's bias and relu fused into the block kernels of its product (rewrites.blocked).

A Dense or Conv2D layer computes y = x @ w (or conv2d), then y + bias, then relu: three passes
over the output. Blocked products draw into several targets and interleave them into y (blocks.py);
here, when y + bias comes next (bias: one value per output column, broadcast over the rows), the
block draw is queued again with the bias added as it writes its targets, and their interleave
is y + bias; relu of an interleave's output is another interleave, with relu applied, and so is
relu6 (fusion.RELU6, TensorFlow's Relu6 as graph models run it). Depthwise convolutions drawn
as blocks (rewrites.depthwise_blocked) take their bias and activation the same way. The draws
made redundant are marked: dead_draws drops those whose results nothing reads at the next flush
or when a recording ends (y unread and freed: neither add's nor relu's gradient reads y). Where
something does read them, both run: the same numbers, one pass more. In a forward pass
(predict), a convolution's 2 x 2 max-pool joins its block draw too (pooled). A batch-1 product's
sum of split-K parts (rewrites.matmul_split_k) takes the bias and relu the same way (fuse_sum).
A small product drawn by the element kernel ("matmul": a few rows, as in an XOR MLP's layers)
takes y + z and then relu, sigmoid or tanh into that one draw (fuse_product): a layer in one
pass instead of three, which is most of a tiny model's forward pass; in the backward pass, the
gradient reaching a layer's activation takes that activation's gradient (a fused program).

The block targets (and partial sums) stay allocated while an interleave output that can still be fused lives
(TextureMemory.attach), and a fused draw re-reads its block draw's inputs only while the pool
has not handed their textures to another tensor (TexturePool.generation says).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ... import fusion
from .. import OutSpec
from . import kernels, shaders, wire
from .textures import Handle, TexturePool


@dataclass
class Blocked:
    """What drew an interleave output: its block draw (program key, inputs, uniforms), the block
    targets, the interleave's uniforms and label, and what is already fused in."""

    block: wire.Command
    interleave: wire.Command
    block_key: str
    inputs: list[Handle]
    uniforms: list[Any]
    targets: list[Handle]
    interleave_key: str
    interleave_uniforms: list[Any]
    label: str
    biased: bool
    relu: bool
    stamps: tuple[tuple[int, int], ...]  # (texture id, pool generation) of the block inputs
    bias: Handle | None = None  # the bias fused in (its stamp is among the stamps)
    relu6: bool = False  # relu6 applied by the interleave (then nothing more fuses in)
    residual: Handle | None = None  # a skip added in the block draw (its stamp likewise)


@dataclass
class Summed:
    """What drew a split product's sum of parts (rewrites.matmul_split_k): that draw, the
    partial sums it reads (kept with its output), its uniforms, and the bias fused in."""

    draw: wire.Command
    partial: Handle
    uniforms: list[Any]
    bias: Handle | None
    relu: bool
    stamps: tuple[tuple[int, int], ...]  # of the bias


@dataclass
class Product:
    """What drew a small product with the element kernel ("matmul" or "matmul:<epilogue>"):
    that draw, what it reads (a, b, then the addend fused in), its uniforms, its output shape,
    and the epilogue so far."""

    draw: wire.Command
    inputs: list[Handle]
    uniforms: list[Any]
    shape: tuple[int, ...]
    added: bool
    activation: str | None
    stamps: tuple[tuple[int, int], ...]  # of the inputs


def stamps(pool: TexturePool, handles: Sequence[Handle]) -> tuple[tuple[int, int], ...]:
    return tuple((h.texture.id, pool.generation(h.texture.id)) for h in handles)


def still_valid(pool: TexturePool, record: Blocked | Summed | Product) -> bool:
    """The block inputs still hold what the block draw read (same tensors, not pooled)."""
    return all(pool.generation(tex) == gen and not pool.is_free(tex) for tex, gen in record.stamps)


def is_column_bias(y: Handle, bias: Handle, out: OutSpec) -> bool:
    """bias is one value per output column broadcast over y's rows (a layer's bias), whole texels."""
    columns = out.shape[-1]
    layout = bias.texture.layout
    return (
        y.repeat == 1
        and bias.repeat == 1
        and bias.lo is None
        and tuple(y.shape) == tuple(out.shape)
        and layout.size == columns
        and layout.channels == 4
        and layout.width * 4 == columns
        and math.prod(out.shape) % columns == 0
    )


FUSABLE_OPS = ("add", "max_pool2d", "fused", *shaders.PRODUCT_ACTIVATIONS)


def dead_draws(
    commands: Sequence[wire.Command], droppable: set[int], observable: Callable[[int], bool]
) -> set[int]:
    """Indices of the droppable draws (by id() of their command) whose targets nothing reads:
    no later kept draw reads them before they are written again, and after the commands they
    are either written again or not observable (freed: no tensor holds them). A replay or a
    swap ends the analysis (everything before is kept)."""
    live: set[int] = set()  # textures whose current value a later kept command reads
    written: set[int] = set()  # textures fully written by a later kept command
    dead: set[int] = set()

    def needed(tex: int) -> bool:
        return tex in live or (tex not in written and observable(tex))

    for index in range(len(commands) - 1, -1, -1):
        command = commands[index]
        opcode = command[0]
        if opcode in (wire.REPLAY, wire.SWAP):
            break
        if opcode == wire.DRAW:
            targets = [command[wire.DRAW_TARGET], *command[wire.DRAW_MORE_TARGETS]]
            if id(command) in droppable and not any(needed(t) for t in targets):
                dead.add(index)
                continue
            live.difference_update(targets)
            written.update(targets)
            for tex, lo, *_ in command[wire.DRAW_INPUTS]:
                live.add(tex)
                if lo >= 0:
                    live.add(lo)
        elif opcode in (wire.UPLOAD, wire.DELETE):
            live.discard(command[1])
            written.add(command[1])
    return dead


def fuse(
    memory: Any,
    queue: Any,
    op: str,
    inputs: list[Handle],
    attrs: dict[str, Any],
    out: OutSpec,
    forward_only: bool,
) -> Handle | None:
    """y + bias or relu(y) as a fused draw where y is an interleave output still fusable
    (memory.blocked), and in a forward pass (`forward_only`, the backend's hint) a convolution's
    2 x 2 max-pool (see pooled); y + z and an activation for a small product (fuse_product);
    else None. `memory`, `queue`: the backend's TextureMemory and DrawQueue."""
    if memory.half or op not in FUSABLE_OPS or out.dtype != "float32":
        return None
    record = memory.blocked.get(inputs[0].texture.id)
    if record is None and op == "add" and len(inputs) == 2:
        # bias + y (TensorFlow's optimizer puts a residual block's bias first): float addition
        # commutes, bit for bit.
        inputs = inputs[::-1]
        record = memory.blocked.get(inputs[0].texture.id)
    if record is None:
        return None
    # relu or relu6 of a block's output interleaves its targets again (they live with the
    # output); the other epilogues draw again from what the first draw read, which must still
    # hold it (a depthwise block's packed filter goes with the unbiased output, for one).
    shares_targets = isinstance(record, Blocked) and op in ("relu", "fused")
    if not shares_targets and not still_valid(memory.pool, record):
        return None
    if isinstance(record, Product):
        return fuse_product(memory, queue, op, inputs, attrs, out, record)
    if op == "fused" and isinstance(record, Blocked):
        if len(inputs) != 1 or attrs["program"] != fusion.RELU6:
            return None  # of the fused programs, blocks apply TensorFlow's relu6 only
        op = "relu6"
    if op not in ("add", "relu", "relu6", "max_pool2d"):
        return None  # the block and split-sum epilogues know relu only
    if isinstance(record, Summed):
        return fuse_sum(memory, queue, op, inputs, out, record)
    if op == "max_pool2d":
        return pooled(memory, queue, record, attrs, out) if forward_only else None
    if record.relu or record.relu6:
        return None
    residual, bias = record.residual, record.bias
    if op == "add":
        if record.biased:
            return None
        if is_column_bias(inputs[0], inputs[1], out):
            bias = inputs[1]
        elif residual is None and is_skip(record, inputs[0], inputs[1], out):
            residual = inputs[1]
        else:
            return None
        epilogue = ".add" * (residual is not None) + ".bias" * (bias is not None)
        reads = [*record.inputs, *[h for h in (residual, bias) if h is not None]]
        targets = [memory.allocate(t.shape, t.dtype, False) for t in record.targets]
        block = queue.draw(
            f"{record.block_key}{epilogue}",
            targets[0],
            reads,
            record.uniforms,
            record.label,
            False,
            targets[1:],
        )
        key = record.interleave_key
    else:
        targets = record.targets
        for target in targets:
            memory.share(target)
        block = record.block
        key = f"{record.interleave_key}.{op}"
    handle = memory.allocate(out.shape, out.dtype, False)
    interleave = queue.draw(key, handle, targets, record.interleave_uniforms, record.label, False)
    queue.mark_droppable(record.interleave)  # y (add) or y + bias (relu): read only if needed
    if op == "add":
        queue.mark_droppable(record.block)
    memory.attach(
        handle,
        targets,
        Blocked(
            block=block,
            interleave=interleave,
            block_key=record.block_key,
            inputs=record.inputs,
            uniforms=record.uniforms,
            targets=targets,
            interleave_key=record.interleave_key,
            interleave_uniforms=record.interleave_uniforms,
            label=record.label,
            biased=bias is not None,
            relu=op == "relu",
            stamps=stamps(memory.pool, reads) if op == "add" else record.stamps,
            bias=bias,
            relu6=op == "relu6",
            residual=residual,
        ),
    )
    return handle


def is_skip(record: Blocked, y: Handle, skip: Handle, out: OutSpec) -> bool:
    """skip is a whole-texel tensor of a convolution's output shape, laid out as its output (a
    residual block's y + x, which the block draw can add texel by texel: blocks._block)."""
    ours, theirs = y.texture.layout, skip.texture.layout
    return (
        record.label == "conv2d"
        and skip.repeat == 1
        and skip.lo is None
        and tuple(skip.shape) == tuple(y.shape) == tuple(out.shape)
        and theirs.channels == 4 == ours.channels
        and theirs.size == ours.size == math.prod(out.shape)
    )


def pooled(
    memory: Any, queue: Any, record: Blocked, attrs: dict[str, Any], out: OutSpec
) -> Handle | None:
    """A convolution's relu(y + bias) (or y, y + bias), then its 2 x 2 max-pool of stride 2, as
    one block draw that pools what it computes (blocks.conv2d_source's ".maxpool") and an
    interleave of a quarter of the texels: the full-size interleave and the pool's pass go. Max
    commutes with adding a bias and with relu, so the numbers are the same. Only in a forward
    pass: where training reads y (relu's and the pool's gradients), the unpooled draws would
    run as well, and the convolution twice."""
    variant, _, shape = record.block_key.partition(":")[2].rpartition("_")
    # A pointwise block's pixels pooled are the general block's (same uniforms, same sums).
    variant = "vec" if variant in ("pw", "pwc") else variant
    if variant.startswith("pwt"):
        return None  # its inputs are another block's targets, which the general block cannot read
    rows, cols = (int(d) for d in shape.split("x"))
    _, oh, ow, co = out.in_shapes[0]
    plain = tuple(attrs["pool_size"]) == (2, 2) and tuple(attrs["strides"]) == (2, 2)
    plain = plain and all(tuple(p) == (0, 0) for p in attrs["pads"])
    if record.label != "conv2d" or record.relu6 or not plain or oh % 2 or ow % 2 or rows % 2:
        return None
    if record.residual is not None:
        return None  # blocks add a skip to unpooled texels only
    bias = [record.bias] if record.biased and record.bias is not None else []
    if record.biased and not bias:
        return None
    out_rows = rows // 2
    block = (math.prod(out.shape[:-1]) // out_rows, co // cols)
    targets = [memory.allocate(block, out.dtype, False) for _ in range(out_rows * cols)]
    key = f"conv2d_block:{variant}_{shape}.maxpool" + (".bias" if bias else "")
    uniforms = record.uniforms
    queue.draw(key, targets[0], [*record.inputs, *bias], uniforms, "conv2d", False, targets[1:])
    handle = memory.allocate(out.shape, out.dtype, False)
    interleave = f"block_interleave:{out_rows}x{cols}" + (".relu" if record.relu else "")
    cols4 = [("u_cols4", "i", [float(co // 4)])]
    queue.draw(interleave, handle, targets, cols4, "conv2d", False)
    for target in targets:
        memory.free(target)
    queue.mark_droppable(record.interleave)
    queue.mark_droppable(record.block)
    return handle


def fuse_sum(
    memory: Any, queue: Any, op: str, inputs: list[Handle], out: OutSpec, record: Summed
) -> Handle | None:
    """y + bias, then relu, for y a split product's sum of parts: the sum drawn again with them
    (sum_parts4:bias, sum_parts4:bias_relu or sum_parts4:relu), reading the same partial sums;
    the draw it replaces is dropped when unread, as with the blocks."""
    if op == "max_pool2d" or record.relu:
        return None
    bias = record.bias
    if op == "add":
        if bias is not None or not is_column_bias(inputs[0], inputs[1], out):
            return None
        bias = inputs[1]
    parts = (("bias", bias is not None), ("relu", op == "relu"))
    epilogue = "_".join(part for part, on in parts if on)
    handle = memory.allocate(out.shape, out.dtype, False)
    extra = [bias] if bias is not None else []
    key = f"sum_parts4:{epilogue}"
    draw = queue.draw(key, handle, [record.partial, *extra], record.uniforms, "matmul", False)
    queue.mark_droppable(record.draw)
    memory.share(record.partial)
    fused = Summed(
        draw, record.partial, record.uniforms, bias, op == "relu", stamps(memory.pool, extra)
    )
    memory.attach(handle, [record.partial], fused)
    return handle


def remember_product(memory: Any, draw: wire.Command, inputs: list[Handle], out: Handle) -> None:
    """Keeps how the element kernel drew the product `out` (its draw, `inputs`, uniforms), so
    that an add and an activation after it can join that draw (fuse_product)."""
    if memory.half or out.dtype != "float32":
        return
    uniforms = draw[wire.DRAW_UNIFORMS]
    reads = stamps(memory.pool, inputs)
    memory.attach(
        out, [], Product(draw, list(inputs), uniforms, tuple(out.shape), False, None, reads)
    )


def fuse_product(
    memory: Any,
    queue: Any,
    op: str,
    inputs: list[Handle],
    attrs: dict[str, Any],
    out: OutSpec,
    record: Product,
) -> Handle | None:
    """y + z, then relu, sigmoid or tanh, for y a small product: the product drawn again with
    them ("matmul:add", "matmul:add_relu", "matmul:relu", ...), reading what it read and z, the
    draw it replaces left out when unread, as with the blocks. z is any float32 tensor of y's
    shape: a layer's bias is a broadcast view, which the kernel reads periodically. Or a fused
    program f(y, z) compiled for this ("matmul:then_<token>": an activation's gradient). The
    numbers are the unfused draws': the same float32 operations in the same order."""
    y, shape = inputs[0], record.shape
    if record.activation is not None or y.repeat != 1 or tuple(y.shape) != shape:
        return None
    if tuple(out.shape) != shape or not _dense_addend(inputs, shape):
        return None
    uniforms = record.uniforms
    if op == "add" and not record.added:
        reads, added, activation = [*record.inputs, inputs[1]], True, None
        key = "matmul:add"
    elif op in shaders.PRODUCT_ACTIVATIONS:
        reads, added, activation = record.inputs, record.added, op
        key = f"matmul:add_{op}" if added else f"matmul:{op}"
    elif op == "fused" and not record.added and len(inputs) == 2:
        key = shaders.product_then_key(attrs["program"])
        if key not in queue.known_programs:
            return None  # compiled ahead for the registered programs only: no compile in a step
        reads, added, activation = [*record.inputs, inputs[1]], False, "then"
        uniforms = [*uniforms, *kernels.plan("fused", attrs, out)[1]]  # its constants, u_c
    else:
        return None
    handle = memory.allocate(out.shape, out.dtype, False)
    draw = queue.draw(key, handle, reads, uniforms, "matmul", False)
    queue.mark_droppable(record.draw)
    held = stamps(memory.pool, reads) if len(reads) > len(record.inputs) else record.stamps
    memory.attach(handle, [], Product(draw, reads, uniforms, shape, added, activation, held))
    return handle


def _dense_addend(inputs: list[Handle], shape: tuple[int, ...]) -> bool:
    """A second input, if any, of the product's shape with no float16 low part."""
    return len(inputs) < 2 or (inputs[1].lo is None and tuple(inputs[1].shape) == shape)
