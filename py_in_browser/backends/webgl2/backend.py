"""The WebGL2 backend: records draws into command lists that bridge.js runs in one call each."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import _js, events
from .. import Backend, OutSpec
from . import blocks, dtypes, kernels, shaders
from .recording import Recording, RecordingBuilder, replay_program, signature, texture_ids
from .texture_layout import Layout, choose_layout
from .textures import Command, Texture, TexturePool

# A step's draws normally go in one flush; very long recordings are cut so JSON stays small.
FLUSH_AT_COMMANDS = 4096
# Units 2k and 2k+1 hold input k and its low part; 16 units are guaranteed by WebGL2.
MAX_INPUTS_PER_DRAW = 8
FLOAT_DTYPES = ("float32", "float64")
# float16 storage: the smallest normal is 2^-14; an Adam second moment below it is lost, so the
# optimizers' epsilon is kept at least sqrt(2^-14) = 2^-7 (see optimizers.Adam).
HALF_SMALLEST_NORMAL = float(np.finfo(np.float16).tiny)
HALF_MIN_EPSILON = HALF_SMALLEST_NORMAL**0.5
# (1, K) @ (K, N) products with K at least this are cut into K slices (see _matmul_split_k).
SPLIT_K_AT = 2048
# Whole-texel products and convolutions of at least this many multiply-adds run as blocks (see
# blocks.py): below it the extra interleave draw and targets cost more than they save.
BLOCKS_AT = 2**20
# Products of at least this many multiply-adds whose dimensions are not whole texels are padded
# to whole texels (see _matmul_padded); below it the pad and slice draws cost more.
PAD_MATMUL_AT = 2**15
# Whole-texel kernels that have a block form: (block program, its variant, profile label).
BLOCK_PROGRAMS = {
    "matmul4:nn_aligned": ("matmul_block", "nn", "matmul"),
    "matmul4:nt_aligned": ("matmul_block", "nt", "matmul"),
    "conv2d4:vec": ("conv2d_block", "vec", "conv2d"),
    "conv2d4:scalar": ("conv2d_block", "scalar", "conv2d"),
}
# Reductions of at least this many values into at most this many outputs run in two passes.
SPLIT_REDUCTION_AT = 2048
SPLIT_REDUCTION_OUTPUTS = 1024
# Expands of one element and same-layout reshapes share their source's texture (see _alias);
# False draws a copy for each (for comparisons).
ALIAS_VIEWS = True
# What a profile calls the draws a replay adds: copies of the state in and of the outputs out.
REPLAY_COPY_LABEL = "replay_copy"


@dataclass(eq=False)
class Handle:
    """A tensor on the GPU: its texture, the float16 rounding error texture (compensated
    storage, or None), and the logical shape and dtype needed to read it back."""

    texture: Texture
    lo: Texture | None
    shape: tuple[int, ...]
    dtype: str
    # Element i of the tensor is element (i // repeat) % size of the texture: an expand along
    # trailing dims ((64, 1) -> (64, 10)) read in place (see _periodic_view and element()).
    repeat: int = 1


class WebGLContextLostError(RuntimeError):
    """The browser dropped the WebGL context; tensors on it are gone."""


class WebGL2Backend(Backend):
    """Fragment-shader kernels on float textures (float32, or float16 with compensated updates)."""

    name = "webgl2"
    supports_replay = True

    def __init__(self, limits: dict[str, Any] | None = None) -> None:
        super().__init__(limits)
        self._engine: Any = None
        self._commands: list[Command] = []
        self._staging: list[np.ndarray] = []
        self._staged = 0
        self._new_programs: dict[str, str] = {}
        self._known_programs: set[str] = set()
        self.pool = TexturePool(self._commands)
        self.probed: dict[str, Any] = {}
        self.max_side = 0
        self.draw_buffers = 1  # render targets one draw can write (block matmuls)
        self.half = False
        self.compensated = False
        self.js_calls = 0  # Python -> JS calls made (flushes, reads, warm-up)
        self.flushes = 0
        self.steps_replayed = 0
        self._recording: RecordingBuilder | None = None
        self._freed_while_recording: list[Texture] = []
        self._retained: dict[int, int] = {}  # texture id -> recordings naming it
        self._deferred: dict[int, Texture] = {}  # freed, but a recording still names it
        self._shared: dict[int, int] = {}  # texture id -> handles on it beyond the first
        self._recordings = 0
        self._profiling = False  # draws flushed since pib.profile began are timed in bridge.js
        self.profile_timing = "gpu-timer-query" if self.probed.get("timer_query") else "wall"
        self.profile_discarded = 0  # timer results dropped for GPU_DISJOINT_EXT, last profile
        self._lost_recorded = False
        self._on_lost: Any = None

    # ---- life cycle ----

    async def start(self) -> None:
        bridge = await _js.load_bridge(__package__, "bridge.js")
        self._engine = bridge.createEngine()
        self._on_lost = _js.create_proxy(self._lost_event)
        self._engine.onLost = self._on_lost
        self.probed = json.loads(self._engine.capabilities())
        self.profile_timing = "gpu-timer-query" if self.probed["timer_query"] else "wall"
        if not self.probed["highp"]:
            raise RuntimeError(
                "webgl2: fragment shaders lack highp precision (float mantissa bits "
                f"{self.probed['highp_float_bits']}, int range bits {self.probed['highp_int_bits']})"
            )
        self.max_side = min(
            int(self.probed["max_texture_size"]),
            int(self.limits.get("max_texture_size", self.probed["max_texture_size"])),
        )
        self.draw_buffers = min(
            int(self.probed["max_draw_buffers"]),
            int(self.limits.get("max_draw_buffers", self.probed["max_draw_buffers"])),
        )
        float32 = bool(self.probed["float32_render"]) and self.limits.get("float32_render", True)
        if not float32 and not self.probed["float16_render"]:
            raise RuntimeError("webgl2: neither float32 nor float16 textures are renderable")
        self.half = not float32
        self.storage_format = "float16" if self.half else "float32"
        self.min_epsilon = HALF_MIN_EPSILON if self.half else 0.0
        self.compensated = self.half and bool(self.limits.get("compensated_updates", True))
        await self.warm_up()

    async def warm_up(self) -> None:
        """Compiles every program a training step needs before the first step runs."""
        fused = shaders.fused_warmup_keys()
        keys = shaders.warmup_keys() + blocks.warmup_keys(self.draw_buffers) + fused
        if self.compensated:
            keys += [f"binary:{op}+pair" for op in ("add", "sub")] + ["where+pair"]
            keys += [f"{key}+pair" for key in fused]
        self.js_calls += 1
        await self._engine.compile(json.dumps({k: shaders.program_source(k) for k in keys}))
        self._known_programs.update(keys)

    def capabilities(self) -> dict[str, Any]:
        caps = super().capabilities()
        caps.update(
            max_texture_size=self.max_side,
            max_draw_buffers=self.draw_buffers,
            device_max_texture_size=self.probed.get("max_texture_size"),
            float32_render=not self.half,
            device_float32_render=self.probed.get("float32_render"),
            highp=self.probed.get("highp"),
            texture_formats="RGBA16F/R16F" if self.half else "RGBA32F/R32F",
            compensated_updates=self.compensated,
            storage_format=self.storage_format,
            min_epsilon=self.min_epsilon,
            float16=(
                {
                    "smallest_normal": HALF_SMALLEST_NORMAL,
                    "epsilon": float(np.finfo(np.float16).eps),
                    "min_optimizer_epsilon": HALF_MIN_EPSILON,
                }
                if self.half
                else None
            ),
            parallel_compile=self.probed.get("parallel_compile"),
            timer_query=self.probed.get("timer_query"),
            renderer=self.probed.get("renderer"),
        )
        return caps

    def memory_stats(self) -> dict[str, Any]:
        """Texture pool figures for pib.memory(): live textures (in use or pooled) and bytes,
        plus the Python->JS call and replayed-step counters (as webgpu reports them)."""
        return {
            "textures": self.pool.live_textures,
            "gpu_bytes": self.pool.gpu_bytes,
            "pooled_bytes": self.pool.pooled_bytes,
            "js_calls": self.js_calls,
            "steps_replayed": self.steps_replayed,
        }

    # ---- tensors ----

    def _allocate(self, shape: tuple[int, ...], dtype: str, with_lo: bool) -> Handle:
        layout = choose_layout(shape, self.max_side)  # refuses oversized tensors before drawing
        lo = self.pool.acquire(layout, self.half) if with_lo else None
        return Handle(self.pool.acquire(layout, self.half), lo, shape, dtype)

    def _stage(self, texture: Texture, values: np.ndarray) -> None:
        layout = texture.layout
        padded = np.zeros(layout.texels * layout.channels, dtype=np.float32)
        padded[: values.size] = values.reshape(-1)
        self._commands.append(["upload", texture.id, self._staged])
        self._staging.append(padded)
        self._staged += padded.size
        self.bytes_uploaded += padded.nbytes
        if self._recording is not None:
            self._recording.order.append(("upload", len(self._recording.uploads)))
            self._recording.uploads.append((texture.id, padded))

    def _stage_array(self, handle: Handle, array: np.ndarray) -> None:
        values = np.asarray(array, dtype=np.float32)
        if handle.lo is None:
            self._stage(handle.texture, values)
        else:
            # Compensated float16: the half-rounded value and exactly what rounding lost.
            hi = values.astype(np.float16).astype(np.float32)
            self._stage(handle.texture, hi)
            self._stage(handle.lo, dtypes.rounding_loss(values, hi))

    def upload(self, array: np.ndarray) -> Handle:
        dtypes.check_upload(array, self.half)
        is_float = array.dtype.kind == "f"
        handle = self._allocate(
            tuple(array.shape), _dtype_name(array), self.compensated and is_float
        )
        self._stage_array(handle, array)
        self._maybe_flush()
        return handle

    def free(self, handle: Handle) -> None:
        """Pools the handle's textures, except those a recording may name: while recording they
        wait for finish_recording, and one a live recording names waits for drop_recording (a
        replay writes and reads it again, so no other tensor may get it meanwhile)."""
        for texture in (handle.texture, handle.lo):
            if texture is None:
                continue
            others = self._shared.get(texture.id, 0)  # other handles on this texture
            if others:
                if others == 1:
                    del self._shared[texture.id]
                else:
                    self._shared[texture.id] = others - 1
                continue
            if self._recording is not None:
                self._freed_while_recording.append(texture)
            elif texture.id in self._retained:
                self._deferred[texture.id] = texture
            else:
                self.pool.release(texture)

    def run(self, op: str, inputs: list[Any], attrs: dict[str, Any], out: OutSpec) -> Handle:
        dtypes.check_result(op, out)
        if op == "concat" and len(inputs) > MAX_INPUTS_PER_DRAW:
            return self._concat_in_groups(inputs, attrs, out)
        if op == "matmul" and self._transpose_first(attrs, out, inputs):
            return self._matmul_transposed_a(inputs, attrs, out)
        if op == "matmul":
            split = self._matmul_split_k(inputs, attrs, out) or self._matmul_padded(
                inputs, attrs, out
            )
            if split is not None:
                return split
        if op in ("reduce_sum", "reduce_max") and out.dtype in FLOAT_DTYPES:
            split = self._split_reduction(op, inputs, attrs, out)
            if split is not None:
                return split
        if op in ("expand", "reshape") and ALIAS_VIEWS:
            alias = self._alias(op, inputs[0], out)
            if alias is not None:
                return alias
        key, uniforms = kernels.plan(op, attrs, out)
        key, uniforms = self._vector_variant(op, attrs, out, inputs, key, uniforms)
        if key in BLOCK_PROGRAMS:
            blocked = self._blocked(key, inputs, out, uniforms)
            if blocked is not None:
                return blocked
        carried = inputs[1:] if op == "where" else inputs
        pair = (
            self.compensated
            and op in shaders.PAIR_OPS
            and out.dtype in FLOAT_DTYPES
            and any(h.lo is not None for h in carried)
        )
        if pair:
            key += "+pair"
        handle = self._allocate(out.shape, out.dtype, pair)
        self._draw(key, handle, inputs, uniforms, op, pair)
        return handle

    def _split_reduction(
        self, op: str, inputs: list[Handle], attrs: dict[str, Any], out: OutSpec
    ) -> Handle | None:
        """A long reduction over few outputs in two passes: each output element's reduced
        indices are cut into about sqrt(n) chunks reduced in parallel (one fragment each), then
        the chunks are reduced. One fragment walking all n indices alone left the GPU idle (a
        conv bias gradient sums 8192 values per channel)."""
        shape = out.in_shapes[0]
        count = math.prod(shape[a] for a in attrs["axes"])
        kept = math.prod(shape) // max(count, 1)
        if count < SPLIT_REDUCTION_AT or kept > SPLIT_REDUCTION_OUTPUTS:
            return None
        chunk = math.isqrt(count - 1) + 1
        parts = -(-count // chunk)
        key, uniforms = kernels.plan(op, attrs, out)
        uniforms = [u for u in uniforms if u[0] not in ("u_parts", "u_chunk")]
        uniforms += [kernels.ints("u_parts", [parts]), kernels.ints("u_chunk", [chunk])]
        partial = self._allocate((kept, parts), out.dtype, False)
        self._draw(key, partial, inputs, uniforms, op, pair=False)
        spec = OutSpec(out.shape, out.dtype, ((kept, parts),), (out.dtype,))
        result = self.run(op, [partial], {**attrs, "axes": (1,)}, spec)
        self.free(partial)
        return result

    def _alias(self, op: str, source: Handle, out: OutSpec) -> Handle | None:
        """The result as another handle on source's texture(s), with no draw, where that reads
        the same: an expand of one element (kernels read a one-element texture at every index:
        element() and x<k>v in shaders.py), or a reshape whose natural layout is source's
        texture layout. Textures shared this way are counted, so free() pools them once."""
        layout = source.texture.layout
        repeat = 1
        if op == "expand":
            periodic = _periodic_view(source.shape, out.shape, layout.size)
            if periodic is None or source.repeat != 1:
                return None
            choose_layout(out.shape, self.max_side)  # what reads it densely must hold it
            repeat = periodic
        elif source.repeat != 1 or choose_layout(out.shape, self.max_side) != layout:
            return None
        for texture in (source.texture, source.lo):
            if texture is not None:
                self._shared[texture.id] = self._shared.get(texture.id, 0) + 1
        return Handle(source.texture, source.lo, out.shape, out.dtype, repeat)

    def _draw(
        self,
        key: str,
        handle: Handle,
        inputs: list[Handle],
        uniforms: list[kernels.Uniform],
        label: str,
        pair: bool,
        more_targets: Sequence[Handle] = (),
    ) -> None:
        """Queues one draw of program `key` into handle's texture(s), and into more_targets'
        (render targets 1, 2, ... after handle's low part, if any) for block kernels."""
        if key not in self._known_programs:
            self._new_programs[key] = shaders.program_source(key)
            self._known_programs.add(key)
        extra = [handle.lo] if handle.lo else []
        extra += [h.texture for h in more_targets]
        draw = [
            "draw",
            key,
            handle.texture.id,
            [t.id for t in extra],
            handle.texture.layout.size,
            [
                [h.texture.id, h.lo.id if h.lo and pair else -1, h.texture.layout.size, h.repeat]
                for h in inputs
            ],
            [list(u) for u in uniforms],
            label,  # the label a profile reports this draw under (also when replayed)
        ]
        self._start_profile_if_asked()
        self._commands.append(draw)
        if self._recording is not None:
            self._recording.order.append(("draw", len(self._recording.draws)))
            self._recording.draws.append(draw)
        self._maybe_flush()

    def _vector_variant(
        self,
        op: str,
        attrs: dict[str, Any],
        out: OutSpec,
        inputs: list[Handle],
        key: str,
        uniforms: list[kernels.Uniform],
    ) -> tuple[str, list[kernels.Uniform]]:
        """The whole-texel kernel for this call where the textures allow one (see
        kernels.vector_plan and shaders.VECTOR_KERNELS), else the element kernel planned."""
        layout = choose_layout(out.shape, self.max_side)
        ins = [h.texture.layout for h in inputs]
        if any(h.repeat != 1 for h in inputs):
            return key, uniforms  # a trailing broadcast view: element kernels read it in place
        if op in kernels.VECTOR_OPS:
            if any(h.texture.layout.size != math.prod(h.shape) for h in inputs):
                return key, uniforms  # a broadcast view: element kernels read it periodically
            all_rgba = all(item.channels == 4 for item in [layout, *ins])
            aligned = all(
                item.width * 4 == shape[-1] for item, shape in zip(ins, out.in_shapes, strict=True)
            )
            vector = kernels.vector_plan(op, attrs, out, all_rgba, aligned)
            return vector if vector is not None else (key, uniforms)
        kind, _, arg = key.partition(":")
        same = (layout.width, layout.height, layout.channels)
        if kind in shaders.ELEMENTWISE_KINDS and all(
            (item.width, item.height, item.channels) == same
            or item.size == 1
            or (  # a broadcast view repeating whole texels (see shaders._inputs)
                item.channels == 4 == layout.channels
                and item.size % 4 == 0
                and layout.size % item.size == 0
            )
            for item in ins
        ):
            # Elementwise uniforms (a fused program's constants) serve both forms.
            return (f"{kind}4:{arg}" if arg else f"{kind}4"), uniforms
        if op == "reshape" and ins[0].channels == layout.channels and ins[0].size == layout.size:
            return "copy4", []
        return key, uniforms

    def _transpose_first(self, attrs: dict[str, Any], out: OutSpec, inputs: list[Handle]) -> bool:
        """a^T @ b with whole-texel operands: the vector kernel would fetch a texel of a for
        every element it uses, so transposing a once (a quarter of the fetches of the product
        per output column block) and running the plain product is cheaper."""
        if not attrs["transpose_a"] or attrs["transpose_b"]:
            return False
        a = out.in_shapes[0]
        k, m, n = a[-2], a[-1], out.shape[-1]
        rgba = all(h.texture.layout.channels == 4 for h in inputs)
        rgba = rgba and all(h.texture.layout.size == math.prod(h.shape) for h in inputs)
        out_rgba = choose_layout(out.shape, self.max_side).channels == 4
        return rgba and out_rgba and min(k, m, n) > 0 and not (k % 4 or m % 4 or n % 4)

    def _matmul_split_k(
        self, inputs: list[Handle], attrs: dict[str, Any], out: OutSpec
    ) -> Handle | None:
        """A row vector times a tall matrix (a batch-1 Dense layer: (1, K) @ (K, N), K large)
        has N / 4 output texels, each a K-long loop: the GPU sat nearly idle. Cut K into P
        slices, a batched product (P, 1, K/P) @ (P, K/P, N) on the same textures (the same
        flat elements), then a sum over the slices."""
        if attrs["transpose_a"] or attrs["transpose_b"] or len(out.shape) != 2:
            return None
        (m, k), (_, n) = out.in_shapes
        rgba = all(h.texture.layout.channels == 4 for h in inputs)
        rgba = rgba and all(h.texture.layout.size == math.prod(h.shape) for h in inputs)
        if m != 1 or k < SPLIT_K_AT or n % 4 or not rgba:
            return None
        parts = next((p for p in (64, 32, 16, 8) if k % (4 * p) == 0 and k // p >= 64), 0)
        if not parts:
            return None
        rows = k // parts
        a = Handle(inputs[0].texture, None, (parts, 1, rows), out.in_dtypes[0])
        b = Handle(inputs[1].texture, None, (parts, rows, n), out.in_dtypes[1])
        spec = OutSpec((parts, 1, n), out.dtype, (a.shape, b.shape), out.in_dtypes)
        key, uniforms = kernels.plan("matmul", attrs, spec)
        key, uniforms = self._vector_variant("matmul", attrs, spec, [a, b], key, uniforms)
        partial = self._allocate(spec.shape, out.dtype, False)
        self._draw(key, partial, [a, b], uniforms, "matmul", pair=False)
        total = OutSpec((1, 1, n), out.dtype, (spec.shape,), (out.dtype,))
        summed = self.run("reduce_sum", [partial], {"axes": (0,), "keepdims": True}, total)
        self.free(partial)
        return Handle(summed.texture, summed.lo, out.shape, out.dtype)

    def _blocked(
        self, key: str, inputs: list[Handle], out: OutSpec, uniforms: list[kernels.Uniform]
    ) -> Handle | None:
        """A large product or convolution as blocks (blocks.py): one draw into rows * cols
        targets, then one interleaving them into the output."""
        program, variant, label = BLOCK_PROGRAMS[key]
        rows, columns = out.shape[-2], out.shape[-1]  # matmul: M, N; conv2d: OW, CO
        a, b = out.in_shapes
        inner = a[-1] if label == "matmul" else math.prod(b[:-1])  # K; KH * KW * CI
        shape = blocks.shape_for(rows, columns, self.draw_buffers)
        if shape is None or math.prod(out.shape) * inner < BLOCKS_AT:
            return None
        block_rows, cols = shape
        block = (math.prod(out.shape[:-1]) // block_rows, columns // cols)
        # The matmul block kernel addresses its targets by texture row and column.
        aligned = choose_layout(block, self.max_side).width * 4 * cols == columns
        if label == "matmul" and not aligned:
            return None
        targets = [self._allocate(block, out.dtype, False) for _ in range(block_rows * cols)]
        key = f"{program}:{variant}_{block_rows}x{cols}"
        self._draw(key, targets[0], inputs, uniforms, label, False, targets[1:])
        handle = self._allocate(out.shape, out.dtype, False)
        interleave = f"block_interleave:{block_rows}x{cols}"
        cols4 = [kernels.ints("u_cols4", [columns // 4])]
        self._draw(interleave, handle, targets, cols4, label, False)
        for target in targets:
            self.free(target)
        return handle

    def _matmul_padded(
        self, inputs: list[Handle], attrs: dict[str, Any], out: OutSpec
    ) -> Handle | None:
        """A product whose inner, column (or, with a transposed, row) count is not a multiple
        of 4 runs on the element kernel, two element reads per multiply-add (a W2 logits layer
        of 10 units took 10x the time per multiply-add of a whole-texel product). Zero-padding
        those dims to multiples of 4 (zeros add nothing to the sums), the whole-texel product,
        then a slice of the result is cheaper from PAD_MATMUL_AT multiply-adds on."""
        ta, tb = attrs["transpose_a"], attrs["transpose_b"]
        a = out.in_shapes[0]
        m, n = out.shape[-2], out.shape[-1]
        k = a[-2] if ta else a[-1]
        dense = all(h.texture.layout.size == math.prod(h.shape) for h in inputs)
        up = {d: -d % 4 for d in (m, n, k)}  # padding to the next multiple of 4
        needed = up[k] or up[n] or (ta and up[m])
        if (ta and tb) or not dense or not needed or math.prod(out.shape) * k < PAD_MATMUL_AT:
            return None
        pads_a = (up[k], up[m]) if ta else (0, up[k])  # (rows, columns) of a as stored
        pads_b = (up[n], up[k]) if tb else (up[k], up[n])
        padded = [
            self._pad_matrix(h, pad, dtype)
            for h, pad, dtype in zip(inputs, (pads_a, pads_b), out.in_dtypes, strict=True)
        ]
        rows = m + (up[m] if ta else 0)
        shape = (*out.shape[:-2], rows, n + up[n])
        spec = OutSpec(shape, out.dtype, tuple(h.shape for h in padded), out.in_dtypes)
        product = self.run("matmul", padded, attrs, spec)
        for handle in padded:
            if handle not in inputs:
                self.free(handle)
        if shape == out.shape:
            return product
        begin = {"begin": (0,) * len(shape)}
        result = self.run(
            "slice", [product], begin, OutSpec(out.shape, out.dtype, (shape,), (out.dtype,))
        )
        self.free(product)
        return result

    def _pad_matrix(self, handle: Handle, pads: tuple[int, int], dtype: str) -> Handle:
        """The matrix (batch) `handle` with pads[0] zero rows and pads[1] zero columns added."""
        if pads == (0, 0):
            return handle
        *batch, rows, cols = handle.shape
        shape = (*batch, rows + pads[0], cols + pads[1])
        paddings = [(0, 0)] * len(batch) + [(0, pads[0]), (0, pads[1])]
        spec = OutSpec(shape, dtype, (handle.shape,), (dtype,))
        return self.run("pad", [handle], {"paddings": paddings, "value": 0.0}, spec)

    def _matmul_transposed_a(
        self, inputs: list[Handle], attrs: dict[str, Any], out: OutSpec
    ) -> Handle:
        a = out.in_shapes[0]
        rows, cols = a[-1], a[-2]
        shape = (*a[:-2], rows, cols)
        transposed = self._allocate(shape, out.in_dtypes[0], False)
        self._draw(
            "transpose4",
            transposed,
            [inputs[0]],
            [kernels.ints("u_rows", [rows]), kernels.ints("u_cols", [cols])],
            "matmul",
            pair=False,
        )
        spec = OutSpec(out.shape, out.dtype, (shape, out.in_shapes[1]), out.in_dtypes)
        result = self.run("matmul", [transposed, inputs[1]], {**attrs, "transpose_a": False}, spec)
        self.free(transposed)
        return result

    def _concat_in_groups(self, inputs: list[Any], attrs: dict[str, Any], out: OutSpec) -> Handle:
        """Concat of more inputs than a draw can sample: concatenate groups, then the groups."""
        axis = attrs["axis"]
        parts: list[Handle] = []
        for start in range(0, len(inputs), MAX_INPUTS_PER_DRAW):
            group = inputs[start : start + MAX_INPUTS_PER_DRAW]
            shapes = out.in_shapes[start : start + MAX_INPUTS_PER_DRAW]
            shape = list(shapes[0])
            shape[axis] = sum(s[axis] for s in shapes)
            spec = OutSpec(tuple(shape), out.dtype, tuple(shapes), out.in_dtypes[: len(group)])
            parts.append(self.run("concat", group, attrs, spec))
        spec = OutSpec(
            out.shape, out.dtype, tuple(p.shape for p in parts), (out.dtype,) * len(parts)
        )
        result = self.run("concat", parts, attrs, spec)
        for part in parts:
            self.free(part)
        return result

    # ---- record and replay (replay.py drives this protocol) ----

    def begin_recording(self) -> None:
        self._recording = RecordingBuilder()

    def _end_recording(self, keep: set[int]) -> None:
        self._recording = None
        freed, self._freed_while_recording = self._freed_while_recording, []
        for texture in freed:
            if texture.id in keep:
                self._deferred[texture.id] = texture
            else:
                self.pool.release(texture)

    def abort_recording(self) -> None:
        self._end_recording(set())

    def finish_recording(
        self, inputs: list[Handle], state: list[tuple[Handle, Handle]], outputs: list[Handle]
    ) -> Recording:
        """Hands the captured step to bridge.js (one call); its textures stay reserved for it."""
        builder = self._recording
        assert builder is not None, "finish_recording without begin_recording"
        ids = texture_ids(builder)
        for tex_id in ids:
            self._retained[tex_id] = self._retained.get(tex_id, 0) + 1
        self._end_recording(ids)
        self._recordings += 1
        commands, constants = replay_program(builder, inputs)
        self.flush()  # the eager step's own commands first
        self.js_calls += 1
        self._engine.record(self._recordings, commands, constants)
        return Recording(
            id=self._recordings,
            inputs=tuple(inputs),
            state_in=tuple(before for before, _ in state),
            outputs=tuple(outputs),
            textures=frozenset(ids),
            signature=signature(builder, inputs, state),
        )

    def replay(
        self, recording: Recording, arrays: list[np.ndarray], state_now: list[Handle]
    ) -> list[Handle]:
        """Copies the state in, runs the recorded step on new inputs, copies the outputs out:
        queued with the rest, so with end_step's flush a replayed step is one JS call."""
        for now, recorded in zip(state_now, recording.state_in, strict=True):
            if now.texture.id != recorded.texture.id:
                self._copy(now, recorded)
        for handle, array in zip(recording.inputs, arrays, strict=True):
            if tuple(array.shape) != handle.shape:
                raise ValueError(f"replay: input of shape {array.shape}, recorded {handle.shape}")
            self._stage_array(handle, array)  # the batch goes into the recorded input textures
        self._start_profile_if_asked()
        self._commands.append(["replay", recording.id])
        self.steps_replayed += 1
        outputs = []
        for source in recording.outputs:
            target = self._allocate(source.shape, source.dtype, source.lo is not None)
            self._copy(source, target)
            outputs.append(target)
        return outputs

    def _copy(self, source: Handle, target: Handle) -> None:
        """A draw copying source's elements into target (replay state in, outputs out). A
        broadcast scalar (one-element texture for a bigger shape) fills the target."""
        size, out_size = source.texture.layout.size, target.texture.layout.size
        if out_size == 1 and size != 1:
            raise RuntimeError("webgl2: a replay cannot copy a tensor into a broadcast scalar")
        _, uniforms = kernels.plan(
            "reshape", {"shape": (size,)}, OutSpec((size,), "float32", ((size,),), ("float32",))
        )
        for src, dst in ((source.texture, target.texture), (source.lo, target.lo)):
            if src is not None and dst is not None:
                same = src.layout.channels == dst.layout.channels and size == out_size
                key = "fill4" if size == 1 else "copy4" if same else "strided"
                self._commands.append(
                    [
                        "draw",
                        key,
                        dst.id,
                        [],
                        out_size,
                        [[src.id, -1, size]],
                        uniforms,
                        REPLAY_COPY_LABEL,
                    ]
                )

    def drop_recording(self, recording: Recording) -> None:
        self.js_calls += 1
        self._engine.dropRecording(recording.id)
        for tex_id in recording.textures:
            self._retained[tex_id] -= 1
            if self._retained[tex_id] == 0:
                del self._retained[tex_id]
                texture = self._deferred.pop(tex_id, None)
                if texture is not None:
                    self.pool.release(texture)

    # ---- talking to JS: one call per flush ----

    def _payload(self) -> tuple[str, np.ndarray]:
        if self.profile_log is None:
            self._profiling = False  # a profiled function that raised never reached collect
        payload = json.dumps(
            {"programs": self._new_programs, "commands": self._commands, "profile": self._profiling}
        )
        staging = np.concatenate(self._staging) if self._staging else np.zeros(1, np.float32)
        self._new_programs = {}
        self._commands.clear()
        self._staging.clear()
        self._staged = 0
        self.flushes += 1
        return payload, staging

    def _maybe_flush(self) -> None:
        if len(self._commands) >= FLUSH_AT_COMMANDS:
            self.flush()

    def flush(self) -> None:
        """Sends the recorded commands to the GPU (one JS call)."""
        if not self._commands and not self._new_programs:
            return
        payload, staging = self._payload()
        self.js_calls += 1
        if self._engine.run(payload, staging) == "lost":
            self._context_lost()

    # ---- profiling: bridge.js times each draw while pib.profile runs ----

    def _start_profile_if_asked(self) -> None:
        """On the first draw under pib.profile: send what was queued before it untimed, so the
        profile holds only the profiled function's draws."""
        if self.profile_log is not None and not self._profiling:
            self.flush()
            self._profiling = True

    async def collect_profile(self) -> None:
        """Adds the draws' times (GPU timer queries, or wall time around each draw) by label:
        the primitive's name, also inside a replayed step, or REPLAY_COPY_LABEL for the copies a
        replay makes of its state and outputs."""
        if not self._profiling:
            return
        self.flush()
        self._profiling = False
        self.js_calls += 1
        report = json.loads(await self._engine.takeProfile())
        self.profile_timing = str(report["timing"])
        self.profile_discarded = int(report["discarded"])
        if self.profile_log is not None:
            for label, ms in report["rows"]:
                self.profile_log.setdefault(str(label), []).append(float(ms))

    def profile_details(self) -> dict[str, Any]:
        return {"timing": self.profile_timing, "discarded_timer_results": self.profile_discarded}

    async def end_step(self) -> None:
        """After each train step: send the step's draws, then apply back-pressure (bridge.js
        sets a fence every few flushes; this waits, without reading data, while the GPU is more
        than two fences behind)."""
        payload, staging = self._payload()
        self.js_calls += 1
        try:
            status = await self._engine.step(payload, staging, 2)
        except Exception:
            if self._engine.lost:
                self._context_lost()
            raise
        if status == "lost":
            self._context_lost()

    async def download(self, handle: Handle) -> np.ndarray:
        textures = [handle.texture] if handle.lo is None else [handle.texture, handle.lo]
        payload, staging = self._payload()
        self.js_calls += 1
        try:
            data = await self._engine.read(payload, staging, json.dumps([t.id for t in textures]))
        except Exception as exc:
            if self._engine.lost:
                self._context_lost()
            raise RuntimeError(f"webgl2: reading a tensor back failed: {exc}") from exc
        flat = _js.typed_array_to_numpy(data, "float32", (int(data.length),))
        self.bytes_downloaded += flat.nbytes
        values = np.full(handle.texture.layout.size, -0.0, np.float32)  # -0 + x keeps x's zero sign
        offset = 0
        for texture in textures:
            values += _unpack(flat[offset : offset + texture.layout.texels * 4], texture.layout)
            offset += texture.layout.texels * 4
        # A broadcast view reads as the kernels read it: each element `repeat` times, cyclically.
        values = np.resize(np.repeat(values, handle.repeat), math.prod(handle.shape))
        return _to_dtype(values.reshape(handle.shape), handle.dtype)

    # ---- context loss: a clear error and a runtime event; recovery is a later issue ----

    def _lost_event(self) -> None:
        """bridge.js calls this when the browser reports webglcontextlost."""
        if not self._lost_recorded:
            self._lost_recorded = True
            events.record_event("context_lost", self.flushes, backend=self.name)

    def _context_lost(self) -> None:
        self._lost_event()
        raise WebGLContextLostError(
            "webgl2: the WebGL context was lost; tensors on it are gone (recovery is not "
            "implemented yet: re-run pib.init and reload weights)"
        )

    def lose_context(self) -> None:
        """Debug hook: makes the browser really drop this backend's WebGL context."""
        self.js_calls += 1
        self._engine.loseContext()


def _periodic_view(source: tuple[int, ...], shape: tuple[int, ...], elements: int) -> int | None:
    """Whether expanding `source` (held in a texture of `elements` elements) to `shape` reads
    element i of the result as element (i // repeat) % elements of the source, and that repeat:
    size-1 dims broadcast before its own (a bias over a batch: repeat 1) and after them (a
    per-row value over columns, (64, 1) -> (64, 10): repeat 10). None when another dim is
    broadcast in between."""
    if elements == 1:
        return 1
    aligned = (1,) * (len(shape) - len(source)) + tuple(source)
    dims = list(zip(aligned, shape, strict=True))
    while dims and dims[0][0] == 1:
        dims.pop(0)
    repeat = 1
    while dims and dims[-1][0] == 1:
        repeat *= dims.pop()[1]
    if any(s != n for s, n in dims) or math.prod(s for s, _ in dims) != elements:
        return None
    return repeat


def _dtype_name(array: np.ndarray) -> str:
    kind = array.dtype.kind
    return "bool" if kind == "b" else "int32" if kind in "iu" else str(array.dtype)


def _unpack(rgba: np.ndarray, layout: Layout) -> np.ndarray:
    """Logical elements from RGBA texels read back (R layouts use the first channel only)."""
    texels = rgba.reshape(layout.texels, 4)[:, : layout.channels]
    return texels.reshape(-1)[: layout.size]


def _to_dtype(values: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bool":
        return values != 0
    if dtype == "int32":
        return np.rint(values).astype(np.int32)
    return values.astype(dtype)
