"""The WebGL2 backend: the Backend interface over texture memory, rewrite rules, the draw queue
and step recording; start-up reads the context's capabilities and compiles the common programs."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ... import _js
from .. import Backend, OutSpec
from . import (
    blocks,
    dtypes,
    epilogues,
    first_step,
    kernels,
    multi_target,
    rewrites,
    shaders,
    wire,
)
from .draw_queue import DrawQueue
from .memory import TextureMemory
from .recorder import StepRecorder
from .recording import Recording
from .texture_layout import Layout, TextureTooLargeError, choose_layout
from .textures import Handle, Texture, TexturePool

# float16 storage: the smallest normal is 2^-14; an Adam second moment below it is lost, so the
# optimizers' epsilon is kept at least sqrt(2^-14) = 2^-7 (see optimizers.Adam).
HALF_SMALLEST_NORMAL = float(np.finfo(np.float16).tiny)
HALF_MIN_EPSILON = HALF_SMALLEST_NORMAL**0.5


# What a software renderer's WEBGL_debug_renderer_info string contains.
SOFTWARE_RENDERERS = ("SwiftShader", "llvmpipe", "softpipe", "Software Rasterizer")
# Renderer names a browser reports in place of the real GPU's: WebKit answers "Apple GPU" for
# every GPU, a software rasteriser (WebKitGTK on llvmpipe) included, and without
# WEBGL_debug_renderer_info only the browser's own name is given. Behind them the GPU may be
# hardware or software; WebKit offers no other tell (it even makes contexts that
# failIfMajorPerformanceCaveat asks it to refuse on software).
MASKED_RENDERERS = ("Apple GPU", "WebKit WebGL", "Mozilla")


class WebGL2Backend(Backend):
    """Fragment-shader kernels on float textures (float32, or float16 with compensated updates)."""

    name = kernels.NAME
    supports_replay = True
    # A recorded predict is one JS call: no Python per op (about 2 ms of a 64x64 CNN's 15).
    replays_inference = True

    def __init__(self, limits: dict[str, Any] | None = None) -> None:
        super().__init__(limits)
        self.queue = DrawQueue(self)
        self.memory = TextureMemory(self.queue)
        self.recorder = StepRecorder(self.memory, self.queue)
        self.probed: dict[str, Any] = {}
        self.draw_buffers = 1  # render targets one draw can write (block matmuls)
        self._on_lost: Any = None
        # The canvas of a lost backend whose context the browser restored: start() builds here.
        self.restored_canvas: Any = None

    @property
    def pool(self) -> TexturePool:
        return self.memory.pool

    @property
    def js_calls(self) -> int:
        """Python -> JS calls made (flushes, reads, warm-up, recordings)."""
        return self.queue.js_calls

    @property
    def steps_replayed(self) -> int:
        return self.recorder.steps_replayed

    # ---- life cycle ----

    async def start(self) -> None:
        bridge = await _js.load_bridge(__package__, "bridge.js")
        engine = self.queue.engine = bridge.createEngine(wire.protocol(), self.restored_canvas)
        self.restored_canvas = None
        self._on_lost = _js.create_proxy(self.lost_event, persistent=True)
        engine.onLost = self._on_lost
        self.probed = json.loads(engine.capabilities())
        self.queue.profile_timing = "gpu-timer-query" if self.probed["timer_query"] else "wall"
        if not self.probed["highp"]:
            raise RuntimeError(
                "webgl2: fragment shaders lack highp precision (float mantissa bits "
                f"{self.probed['highp_float_bits']}, int range bits {self.probed['highp_int_bits']})"
            )
        self.memory.max_side = min(
            int(self.probed["max_texture_size"]),
            int(self.limits.get("max_texture_size", self.probed["max_texture_size"])),
        )
        self.draw_buffers = min(
            int(self.probed["max_draw_buffers"]),
            int(self.limits.get("max_draw_buffers", self.probed["max_draw_buffers"])),
        )
        self.queue.draw_buffers = self.draw_buffers
        float32 = bool(self.probed["float32_render"]) and self.limits.get("float32_render", True)
        if not float32 and not self.probed["float16_render"]:
            raise RuntimeError("webgl2: neither float32 nor float16 textures are renderable")
        half = self.memory.half = not float32
        self.storage_format = "float16" if half else "float32"
        self.min_epsilon = HALF_MIN_EPSILON if half else 0.0
        self.memory.compensated = half and bool(self.limits.get("compensated_updates", True))

    async def prepare(self, after_loss: bool = False) -> None:
        if not after_loss:
            self.warm_draws()  # else linked with the rest of the warm-up, while idle
        self.schedule_background()

    def background(self) -> None:
        """Draws the first step's programs once (bridge.js drawWarm waits for their links, the
        GPU process then builds their pipelines while Python builds the step), then hands over
        the rest of the warm-up (~60 ms of making sources), which is linked while idle."""
        self.queue.call("drawWarm")
        self.warm_up()

    def close(self) -> None:
        """Releases the context at once (browsers cap live contexts); no runtime event."""
        self.queue.engine.onLost = None
        _js.destroy_proxy(self._on_lost)
        self._on_lost = None
        self.queue.call("loseContext")

    def software_renderer(self) -> str | None:
        renderer = str(self.probed.get("renderer") or "")
        return next((name for name in SOFTWARE_RENDERERS if name.lower() in renderer.lower()), None)

    def renderer_masked(self) -> bool:
        """Whether the browser hides the GPU's name (MASKED_RENDERERS): then nobody can tell
        whether it is a software renderer, and software_renderer() says None for want of one."""
        return str(self.probed.get("renderer") or "") in MASKED_RENDERERS

    def warm_draws(self) -> None:
        """Sends the programs a typical first training step draws (first_step.py) to be linked
        now and drawn once in background(), so that the GPU process builds their pipelines
        before the step needs them (nothing waits here)."""
        draws = [
            (key, channels, targets)
            for key, channels, targets in first_step.warm_draws(
                self.draw_buffers, self.memory.compensated
            )
            if key not in self.queue.known_programs
        ]
        half = self.memory.half
        sent = [[key, shaders.program_source(key), c, t, half] for key, c, t in draws]
        self.queue.call("warmDraws", json.dumps(sent))
        self.queue.known_programs.update(key for key, _, _ in draws)

    def warm_up(self) -> None:
        """Sends every other program a training step may need to be linked while the engine is
        idle (the GPU process links them in the background; nothing waits here)."""
        fused = shaders.fused_warmup_keys()
        first = first_step.warm_draws(self.draw_buffers, self.memory.compensated)
        keys = [key for key, _, _ in first]  # not sent yet after a loss (prepare's after_loss)
        keys += shaders.warmup_keys() + blocks.warmup_keys(self.draw_buffers) + fused
        if self.memory.compensated:
            keys += [f"binary:{op}+pair" for op in ("add", "sub")] + ["where+pair"]
            keys += [f"{key}+pair" for key in fused]
        else:  # float16 pair programs write their low part as a second target: never merged
            keys += multi_target.warmup_keys(self.draw_buffers)
        keys = [key for key in dict.fromkeys(keys) if key not in self.queue.known_programs]
        self.queue.call("compile", json.dumps({k: shaders.program_source(k) for k in keys}))
        self.queue.known_programs.update(keys)

    def capabilities(self) -> dict[str, Any]:
        caps = super().capabilities()
        half = self.memory.half
        caps.update(
            max_texture_size=self.memory.max_side,
            max_draw_buffers=self.draw_buffers,
            device_max_texture_size=self.probed.get("max_texture_size"),
            float32_render=not half,
            device_float32_render=self.probed.get("float32_render"),
            highp=self.probed.get("highp"),
            texture_formats="RGBA16F/R16F" if half else "RGBA32F/R32F",
            compensated_updates=self.memory.compensated,
            storage_format=self.storage_format,
            min_epsilon=self.min_epsilon,
            float16=(
                {
                    "smallest_normal": HALF_SMALLEST_NORMAL,
                    "epsilon": float(np.finfo(np.float16).eps),
                    "min_optimizer_epsilon": HALF_MIN_EPSILON,
                }
                if half
                else None
            ),
            parallel_compile=self.probed.get("parallel_compile"),
            timer_query=self.probed.get("timer_query"),
            renderer=self.probed.get("renderer"),
            software_renderer=self.software_renderer(),
            renderer_masked=self.renderer_masked(),
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

    def tensor_fits(self, shape: tuple[int, ...]) -> str | None:
        try:
            choose_layout(shape, self.memory.max_side)
        except TextureTooLargeError as err:
            return f"webgl2: {err}"
        return super().tensor_fits(shape)

    def upload(self, array: np.ndarray) -> Handle:
        return self.memory.upload(array)

    async def download(self, handle: Handle) -> np.ndarray:
        return await self.memory.download(handle)

    def free(self, handle: Handle) -> None:
        self.memory.free(handle)

    def run(self, op: str, inputs: list[Any], attrs: dict[str, Any], out: OutSpec) -> Handle:
        dtypes.check_result(op, out)
        fused = epilogues.fuse(self.memory, self.queue, op, inputs, attrs, out, self.forward_only)
        if fused is not None:
            return fused
        rewritten = rewrites.rewrite(self, op, inputs, attrs, out)
        if rewritten is not None:
            return rewritten
        key, uniforms = kernels.plan(op, attrs, out)
        key, uniforms = rewrites.vector_variant(
            self.memory.max_side, op, attrs, out, inputs, key, uniforms
        )
        if key.startswith("conv2d_backprop_filter4:") and not self.memory.half:
            split = rewrites.split_filter_gradient(self, key, inputs, out, uniforms)
            if split is not None:
                return split
        if key in rewrites.BLOCK_PROGRAMS:
            blocked = rewrites.blocked(self, key, inputs, out, uniforms)
            if blocked is not None:
                return blocked
        if key.partition(":")[0] == "depthwise_conv2d4":
            blocked = rewrites.depthwise_blocked(self, inputs, attrs, out, uniforms)
            if blocked is not None:
                return blocked
        if op == "random_uniform" and self.memory.half:
            kernels.check_half_draw(attrs["bits"], self.memory.compensated)
        carried = inputs[1:] if op == "where" else inputs
        pair = (
            self.memory.compensated
            and op in shaders.PAIR_OPS
            and out.dtype in rewrites.FLOAT_DTYPES
            and (op == "random_uniform" or any(h.lo is not None for h in carried))
        )
        if pair:
            key += "+pair"
        handle = self.memory.allocate(out.shape, out.dtype, pair)
        draw = self.queue.draw(key, handle, inputs, uniforms, op, pair)
        if key == "matmul":
            epilogues.remember_product(self.memory, draw, inputs, handle)
        return handle

    async def upload_image(self, bitmap: Any) -> Handle:
        """An ImageBitmap as a (1, H, W, 3) float32 tensor of bytes / 255: texImage2D puts it in
        an RGBA8 texture (bridge.js imageTexture, no copy through Python), one draw of
        glsl/image_rgb.frag drops alpha into the tensor's texture, and the frame's texture goes
        with the next flush."""
        if self.queue.recording is not None:
            raise RuntimeError("webgl2: frames cannot be uploaded while a step is recorded")
        height, width = int(bitmap.height), int(bitmap.width)
        frame_layout = Layout(width, height, 4, width * height * 4)
        frame_id = int(self.queue.call("imageTexture", bitmap))
        frame = Handle(Texture(frame_id, frame_layout, False), None, (height, width, 4), "float32")
        pair = self.memory.compensated
        handle = self.memory.allocate((1, height, width, 3), "float32", pair)
        self.queue.draw(
            "image_rgb+pair" if pair else "image_rgb", handle, [frame], [], "frame", pair
        )
        self.queue.commands.append([wire.DELETE, frame_id])
        return handle

    def flush(self) -> None:
        """Sends the queued commands to the GPU (one JS call)."""
        self.queue.flush()

    async def end_step(self) -> None:
        await self.queue.end_step()

    # ---- profiling: bridge.js times each draw while pib.profile runs ----

    async def collect_profile(self) -> None:
        await self.queue.collect_profile()

    def profile_details(self) -> dict[str, Any]:
        return {
            "timing": self.queue.profile_timing,
            "discarded_timer_results": self.queue.profile_discarded,
        }

    # ---- record and replay (replay.py drives this protocol; recorder.py does it) ----

    def begin_recording(self) -> None:
        self.recorder.begin()

    def abort_recording(self) -> None:
        self.recorder.abort()

    def finish_recording(
        self, inputs: list[Handle], state: list[tuple[Handle, Handle]], outputs: list[Handle]
    ) -> Recording:
        return self.recorder.finish(inputs, state, outputs)

    def replay(
        self, recording: Recording, arrays: list[np.ndarray], state_now: list[Handle]
    ) -> list[Handle]:
        return self.recorder.replay(recording, arrays, state_now)

    def drop_recording(self, recording: Recording) -> None:
        self.recorder.drop(recording)

    # ---- context loss (context.py records it; recovery.py rebuilds on the restored context) ----

    def lost_event(self) -> None:
        """bridge.js calls this when the browser reports webglcontextlost."""
        self.queue.context.record(self.queue.flushes)

    def is_lost(self) -> bool:
        return self.queue.context.recorded or bool(self.queue.engine.lost)

    def lose_device(self, restore: bool, restore_after_s: float) -> None:
        """WEBGL_lose_context.loseContext(); with restore, restoreContext() in a later task."""
        self.queue.call("loseContext", restore_after_s * 1000.0 if restore else -1)

    def lose_device_in_replay(self, after: int, restore: bool, restore_after_s: float) -> None:
        """loseContext() right after the `after`-th command the next replay runs."""
        self.queue.call("loseContextInReplay", after, restore_after_s * 1000.0 if restore else -1)

    async def recovered(self, timeout_s: float) -> WebGL2Backend | None:
        """Waits for webglcontextrestored, then starts a new backend on the same canvas: every
        program, texture and recording is made again there (the old ones died with the context)."""
        engine = self.queue.engine
        if not await engine.whenRestored(timeout_s * 1000.0):
            return None
        engine.detach()
        fresh = WebGL2Backend(self.limits)
        fresh.restored_canvas = engine.canvas
        await fresh.start()
        return fresh

    def detach(self) -> None:
        if self._on_lost is not None:
            self.queue.engine.detach()
            _js.destroy_proxy(self._on_lost)
            self._on_lost = None
