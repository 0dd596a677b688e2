"""The WebGL2 backend's pure parts in CPython: texture layouts within MAX_TEXTURE_SIZE, the
texture pool, recording signatures, and the Python side of a backend driven by a fake bridge
(refusal before drawing, profile labels, context loss)."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
from typing import Any

import numpy as np
import pytest

from py_in_browser import runtime
from py_in_browser.backends import OutSpec
from py_in_browser.backends.webgl2 import blocks, first_step, kernels, shaders, wire
from py_in_browser.backends.webgl2.backend import WebGL2Backend
from py_in_browser.backends.webgl2.context import WebGLContextLostError
from py_in_browser.backends.webgl2.recorder import REPLAY_COPY_LABEL
from py_in_browser.backends.webgl2.recording import RecordingBuilder, replay_program, signature
from py_in_browser.backends.webgl2.texture_layout import (
    PACK_MIN_ELEMENTS,
    Layout,
    TextureTooLargeError,
    choose_layout,
)
from py_in_browser.backends.webgl2.textures import POOL_BYTES, Handle, TexturePool

# ---- layouts -------------------------------------------------------------------------------------


def test_the_innermost_dimension_is_the_texture_width_when_legal() -> None:
    assert choose_layout((3, 301), 4096) == Layout(301, 3, 1, 903)  # R: 903 < PACK_MIN_ELEMENTS
    assert choose_layout((64, 256), 4096) == Layout(64, 64, 4, 64 * 256)  # RGBA: 256 / 4 texels


def test_an_inner_dimension_that_is_a_multiple_of_four_is_rgba_at_any_size() -> None:
    # Texels of 4 elements of one row: what the vector matmul and convolution kernels read.
    assert choose_layout((3, 300), 4096) == Layout(75, 3, 4, 900)
    assert choose_layout((3, 3, 3, 16), 4096) == Layout(4, 27, 4, 432)
    assert choose_layout((2, 10), 4096).channels == 1


def test_a_width_beyond_max_texture_size_falls_back_to_a_squarish_layout() -> None:
    assert choose_layout((3, 301), 64) == Layout(31, 30, 1, 903)
    # A tall column: the innermost width (1) is legal but 5000 / 4 rows are not.
    assert choose_layout((5000, 1), 64) == Layout(36, 35, 4, 5000)


def test_an_inner_dimension_that_is_not_a_multiple_of_four_is_packed_squarishly() -> None:
    layout = choose_layout((2, 1026), 4096)
    assert (layout.channels, layout.width, layout.height) == (4, 23, 23)  # 513 texels


def test_rgba_packing_starts_at_the_threshold() -> None:
    assert choose_layout((PACK_MIN_ELEMENTS - 1,), 4096).channels == 1  # 1023: not aligned
    assert choose_layout((PACK_MIN_ELEMENTS,), 4096).channels == 4


def test_a_small_tensor_is_packed_when_one_channel_would_not_fit() -> None:
    assert choose_layout((1000,), 16) == Layout(16, 16, 4, 1000)  # 1000 R texels > 16 * 16


def test_scalars_and_empty_tensors_get_one_texel() -> None:
    assert choose_layout((), 64) == Layout(1, 1, 1, 1)
    assert choose_layout((0, 5), 64) == Layout(1, 1, 1, 0)


@pytest.mark.parametrize("max_side", [16, 64, 4096])
def test_every_layout_holds_its_tensor_within_the_limit(max_side: int) -> None:
    dims = (1, 2, 3, 4, 7, 16, 33, 100, 255, 1000)
    for shape in itertools.chain(
        ((n,) for n in dims), itertools.product(dims, dims), ((2, 3, 5, 7),)
    ):
        size = math.prod(shape)
        try:
            layout = choose_layout(shape, max_side)
        except TextureTooLargeError:
            assert size > max_side * max_side * 4
            continue
        assert layout.size == size
        assert 1 <= layout.width <= max_side and 1 <= layout.height <= max_side
        assert layout.texels * layout.channels >= size
        # No more than one partly used row of texels.
        assert (layout.height - 1) * layout.width * layout.channels < max(size, 1)


def test_a_tensor_that_cannot_fit_is_refused_with_the_limit_in_the_message() -> None:
    with pytest.raises(TextureTooLargeError, match=r"\(200, 100\).*MAX_TEXTURE_SIZE 64"):
        choose_layout((200, 100), 64)  # 5000 RGBA texels > 64 * 64
    choose_layout((128, 128), 64)  # exactly 64 * 64 RGBA texels still fits


# ---- texture pool --------------------------------------------------------------------------------


def test_pooled_textures_are_reused_by_physical_shape_and_format() -> None:
    commands: list[list[object]] = []
    pool = TexturePool(commands)
    a = pool.acquire(Layout(8, 8, 4, 256), half=False)
    pool.release(a)
    b = pool.acquire(Layout(8, 8, 4, 250), half=False)  # same texture, another logical size
    assert b.id == a.id and b.layout.size == 250
    assert pool.acquire(Layout(8, 8, 4, 256), half=True).id != a.id  # float16: another format
    assert pool.acquire(Layout(8, 8, 1, 64), half=False).id != a.id  # R: another format
    assert [c[0] for c in commands] == ["texture"] * 3
    assert pool.live_textures == 3


def test_the_pool_deletes_what_would_exceed_its_byte_budget() -> None:
    commands: list[list[object]] = []
    pool = TexturePool(commands)
    side = 2048  # RGBA32F: 64 MiB, the whole budget
    big = [pool.acquire(Layout(side, side, 4, side * side * 4), half=False) for _ in range(2)]
    pool.release(big[0])
    assert pool.pooled_bytes == POOL_BYTES
    pool.release(big[1])
    assert commands[-1] == ["delete", big[1].id]
    assert pool.live_textures == 1 and pool.gpu_bytes == POOL_BYTES


# ---- a backend on a fake bridge ------------------------------------------------------------------


class FakeEngine:
    """Stands in for bridge.js's Engine: keeps the payloads; profile rows are one ms per draw."""

    def __init__(self) -> None:
        self.payloads: list[dict[str, Any]] = []
        self.lost = False
        self.timed: list[str] = []

    def record(self, recording_id: int, commands: str, constants: np.ndarray) -> None:
        pass

    def run(self, payload: str, staging: np.ndarray) -> str:
        if self.lost:
            return "lost"
        decoded = json.loads(payload)
        self.payloads.append(decoded)
        if decoded["profile"]:
            self.timed += [c[7] for c in decoded["commands"] if c[0] == "draw"]
        return "ok"

    async def takeProfile(self) -> str:
        rows = [[label, 1.0] for label in self.timed]
        self.timed = []
        return json.dumps({"timing": "wall", "rows": rows, "discarded": 0})

    async def read(self, payload: str, staging: np.ndarray, ids: str) -> Any:
        self.run(payload, staging)
        raise RuntimeError("WebGL context lost while a read was pending")


def fake_backend(max_side: int = 4096) -> tuple[WebGL2Backend, FakeEngine]:
    backend = WebGL2Backend({"max_texture_size": max_side})
    engine = FakeEngine()
    backend.queue.engine = engine
    backend.memory.max_side = max_side
    return backend, engine


def spec(shape: tuple[int, ...], *inputs: tuple[int, ...]) -> OutSpec:
    return OutSpec(shape, "float32", inputs, ("float32",) * len(inputs))


def test_a_result_too_large_is_refused_before_anything_is_queued() -> None:
    backend, engine = fake_backend(max_side=64)
    with pytest.raises(TextureTooLargeError, match="MAX_TEXTURE_SIZE 64"):
        backend.upload(np.zeros((200, 100), np.float32))
    one = backend.upload(np.ones((1,), np.float32))
    queued = len(backend.queue.commands)
    with pytest.raises(TextureTooLargeError):
        backend.run("expand", [one], {"shape": (200, 100)}, spec((200, 100), (1,)))
    assert len(backend.queue.commands) == queued  # no texture, no draw
    assert backend.pool.live_textures == 1
    assert engine.payloads == []


def test_broadcast_scalars_and_same_layout_reshapes_share_their_texture() -> None:
    backend, _ = fake_backend()
    one = backend.upload(np.ones((1,), np.float32))
    matrix = backend.upload(np.ones((8, 16), np.float32))
    queued = len(backend.queue.commands)
    wide = backend.run("expand", [one], {"shape": (8, 16)}, spec((8, 16), (1,)))
    same = backend.run("reshape", [matrix], {"shape": (2, 4, 16)}, spec((2, 4, 16), (8, 16)))
    assert len(backend.queue.commands) == queued  # no texture, no draw
    assert wide.texture.id == one.texture.id and same.texture.id == matrix.texture.id
    # A bias over a batch (new leading dims) is read periodically from its own texture too.
    bias = backend.upload(np.ones((16,), np.float32))
    queued = len(backend.queue.commands)
    batch = backend.run("expand", [bias], {"shape": (8, 16)}, spec((8, 16), (16,)))
    assert len(backend.queue.commands) == queued and batch.texture.id == bias.texture.id
    # Another layout (innermost 8, not 16) is a copy into its own texture.
    other = backend.run("reshape", [matrix], {"shape": (16, 8)}, spec((16, 8), (8, 16)))
    assert other.texture.id != matrix.texture.id
    live = backend.pool.live_textures
    for handle in (one, wide, matrix, same):
        backend.free(handle)
    assert backend.pool.live_textures == live
    pooled = backend.pool.pooled_bytes
    assert pooled == one.texture.nbytes + matrix.texture.nbytes  # each pooled once


def test_trailing_broadcasts_are_read_in_place_with_a_repeat() -> None:
    """A per-row value over columns ((64, 1) -> (64, 10), softmax's max and sum) is a view with
    repeat 10: no draw, element kernels only, and read back as numpy broadcasts it."""
    backend, _ = fake_backend()
    column = backend.upload(np.arange(6, dtype=np.float32).reshape(6, 1))
    queued = len(backend.queue.commands)
    rows = backend.run("expand", [column], {"shape": (6, 10)}, spec((6, 10), (6, 1)))
    assert len(backend.queue.commands) == queued and rows.texture.id == column.texture.id
    assert rows.repeat == 10
    both = backend.upload(np.ones((1, 6, 1), np.float32))
    tiled = backend.run("expand", [both], {"shape": (2, 6, 3)}, spec((2, 6, 3), (1, 6, 1)))
    assert (tiled.texture.id, tiled.repeat) == (both.texture.id, 3)
    middle = backend.upload(np.ones((6, 1, 4), np.float32))  # a broadcast between two dims
    copied = backend.run("expand", [middle], {"shape": (6, 2, 4)}, spec((6, 2, 4), (6, 1, 4)))
    assert copied.texture.id != middle.texture.id and copied.repeat == 1
    matrix = backend.upload(np.ones((6, 10), np.float32))
    backend.run("add", [matrix, rows], {}, spec((6, 10), (6, 10), (6, 10)))
    draw: list[Any] = [c for c in backend.queue.commands if c[0] == "draw"][-1]
    assert not str(draw[1]).startswith("binary4:")  # whole-texel kernels cannot read a repeat
    assert draw[5][1] == [column.texture.id, -1, 6, 10]


def test_draws_carry_their_primitive_as_the_profile_label() -> None:
    backend, engine = fake_backend()
    a = backend.upload(np.ones((4, 4), np.float32))
    backend.run("relu", [a], {}, spec((4, 4), (4, 4)))  # queued before profiling: not timed
    backend.profile_log = {}
    b = backend.run("exp", [a], {}, spec((4, 4), (4, 4)))
    backend.run("add", [a, b], {}, spec((4, 4), (4, 4), (4, 4)))
    asyncio.run(backend.collect_profile())
    assert backend.profile_log == {"exp": [1.0], "add": [1.0]}
    assert [p["profile"] for p in engine.payloads] == [False, True]
    assert backend.profile_details() == {"timing": "wall", "discarded_timer_results": 0}
    backend.profile_log = None
    backend.run("exp", [a], {}, spec((4, 4), (4, 4)))
    backend.flush()
    assert engine.payloads[-1]["profile"] is False


def test_a_replay_hands_out_an_output_by_a_swap_and_labels_the_copies_it_must_make() -> None:
    """An output the step writes before reading it goes to the caller by exchanging textures;
    one with another role (here an input too) is copied out by a draw labelled as a copy."""
    backend, _ = fake_backend()
    x = backend.upload(np.ones((2, 2), np.float32))
    backend.begin_recording()
    out = backend.run("exp", [x], {}, spec((2, 2), (2, 2)))
    recording = backend.finish_recording([x], [], [out, x])
    assert recording.movable == (True, False)
    backend.flush()
    result, _ = backend.replay(recording, [np.zeros((2, 2), np.float32)], [])
    swaps = [c for c in backend.queue.commands if c[0] == wire.SWAP]
    assert swaps == [[wire.SWAP, out.texture.id, result.texture.id]]
    draws = [c for c in backend.queue.commands if c[0] == "draw"]
    assert [d[7] for d in draws] == [REPLAY_COPY_LABEL]
    (step,) = json.loads(recording.signature)
    assert step[0] == "unary4:exp" and len(step) == 6  # the label follows the program: not kept


def test_signatures_ignore_texture_ids_but_see_constants() -> None:
    def record(first_id: int, constant: float) -> str:
        builder = RecordingBuilder()
        data = np.full(4, constant, np.float32)
        builder.uploads.append((first_id, data))
        builder.order.append(("upload", 0))
        builder.draws.append(
            ["draw", "unary:exp", first_id + 1, [], 4, [[first_id, -1, 4]], [], "exp"]
        )
        builder.order.append(("draw", 0))
        return signature(builder, [], [])

    assert record(5, 1.0) == record(50, 1.0)
    assert record(5, 1.0) != record(5, 2.0)


def test_replay_programs_leave_out_the_batch_and_the_constants_their_textures_keep() -> None:
    backend, _ = fake_backend()
    x = backend.upload(np.ones((2, 2), np.float32))
    builder = RecordingBuilder()
    # 99: a constant nothing else writes (kept in its texture); 98: overwritten by a draw
    # later in the step; 97: a state texture (a replay swaps it): both uploaded at every replay.
    builder.uploads += [
        (x.texture.id, np.ones(4, np.float32)),
        (99, np.full(4, 3.0, np.float32)),
        (98, np.full(4, 5.0, np.float32)),
        (97, np.full(4, 7.0, np.float32)),
    ]
    builder.order += [("upload", k) for k in range(4)]
    draw = ["draw", "unary:exp", 98, [], 4, [[99, -1, 4, 1]], [], "exp"]
    builder.draws.append(draw)
    builder.order.append(("draw", 0))
    commands, constants = replay_program(builder, [x], {x.texture.id, 97})
    assert json.loads(commands) == [["upload", 98, 0], ["upload", 97, 4], draw]
    np.testing.assert_array_equal(constants, np.repeat([5.0, 7.0], 4).astype(np.float32))


def test_context_loss_is_a_clear_error_and_one_runtime_event() -> None:
    backend, engine = fake_backend()
    a = backend.upload(np.ones((2,), np.float32))
    before = len(runtime.runtime_events())
    engine.lost = True
    backend.lost_event()  # what bridge.js's webglcontextlost listener calls
    with pytest.raises(WebGLContextLostError, match="context was lost"):
        asyncio.run(backend.download(a))
    with pytest.raises(WebGLContextLostError):
        backend.run("exp", [a], {}, spec((2,), (2,)))
        backend.flush()
    events = runtime.runtime_events()[before:]
    assert [e["type"] for e in events] == ["context_lost"]
    assert events[0]["backend"] == "webgl2"


def test_every_warm_up_program_has_a_fragment_shader() -> None:
    block_keys = blocks.warmup_keys(8) + blocks.warmup_keys(4)
    drawn_ahead = [key for n in (8, 4) for key, _, _ in first_step.warm_draws(n, False)]
    for key in shaders.warmup_keys() + block_keys + drawn_ahead:
        source = shaders.program_source(key)
        assert source.startswith("#version 300 es") and "precision highp float" in source


def test_programs_drawn_ahead_have_as_many_targets_as_outputs() -> None:
    """bridge.js warmDraw draws into that many 1x1 targets; with compensated float16 storage
    the programs that would write a low part are left to their first use."""
    for key, channels, targets in first_step.warm_draws(4, False):
        outputs = shaders.program_source(key).count("layout(location = ")
        assert targets == outputs and channels in (1, 4) and (targets == 1 or channels == 4), key
    keys = [key for key, _, _ in first_step.warm_draws(8, True)]
    assert "pool4:max" in keys and not [k for k in keys if k.startswith(("fused", "where"))]
    assert "binary4:add" not in keys and "binary4:mul" in keys


# ---- fused programs -------------------------------------------------------------------------------


def _program(fn: Any, count: int) -> Any:
    from py_in_browser import fusion

    return fusion.trace(fn, count)


def test_fused_programs_are_keyed_by_structure_with_bit_exact_constants_in_a_uniform() -> None:
    from py_in_browser import fusion

    def plan(c: float) -> tuple[str, list[Any]]:
        program = _program(lambda x, s: fusion.exp(x * c) + s, 2)
        spec = OutSpec((4,), "float32", ((4,), ()), ("float32", "float32"))
        return kernels.plan("fused", {"program": program}, spec)

    (key, uniforms), (other, _) = plan(0.1), plan(0.2)
    assert key == other  # one compiled program for any constant (an optimizer's learning rate)
    assert uniforms == [kernels.ints("u_c", [0x3DCCCCCD])]  # float32(0.1), bit for bit
    assert plan(1e300)[1] == [kernels.ints("u_c", [0x7F800000])]  # float32 overflow: inf
    assert plan(-0.0)[1] != plan(0.0)[1]
    source = shaders.program_source(key.replace("fused:", "fused4:"))
    assert "uniform int u_c[1];" in source and "intBitsToFloat(u_c[0])" in source
    assert "float op_exp(float a) { return exp_f32(a); }" in source  # the single-op table's entry


def test_the_optimizers_update_programs_are_warmed_up() -> None:
    """Their keys do not depend on settings, so start() compiles what training will draw."""
    from py_in_browser import fusion, optimizers

    keys = set(shaders.fused_warmup_keys())
    for optimizer in (optimizers.Adam(0.05, beta_1=0.8), optimizers.SGD(0.3, momentum=0.5)):
        for rule in optimizer._rules(epsilon_floor=0.0):
            scalars = set(optimizer._step_rules())
            shapes = [() if n in scalars else (8, 16) for n in rule.reads] + [()]
            program = fusion.trace(optimizers._gate_rule(rule.fn), len(shapes))
            dtypes = ["float32"] * (len(shapes) - 1) + ["bool"]
            spec = OutSpec((8, 16), "float32", tuple(shapes), tuple(dtypes))
            key, _ = kernels.plan("fused", {"program": program}, spec)
            assert key in keys and key.replace("fused:", "fused4:") in keys


def test_fused_draws_are_whole_texel_where_layouts_allow_and_pairs_on_compensated_storage() -> None:
    from py_in_browser import fusion

    backend, _ = fake_backend()
    program = _program(lambda w, g, lr, on: fusion.where(on, w - g * lr, w), 4)
    attrs = {"program": program}

    def draw(shape: tuple[int, ...], *inputs: Any) -> tuple[str, Any]:
        dtypes = tuple("bool" if h.dtype == "bool" else "float32" for h in inputs)
        out = OutSpec(shape, "float32", tuple(h.shape for h in inputs), dtypes)
        result = backend.run("fused", list(inputs), attrs, out)
        return str([c for c in backend.queue.commands if c[0] == "draw"][-1][1]), result

    lr, on = backend.upload(np.array(0.5, np.float32)), backend.upload(np.array(True))
    w, g = (backend.upload(np.ones((8, 16), np.float32)) for _ in range(2))
    key, out = draw((8, 16), w, g, lr, on)
    assert key.startswith("fused4:") and out.lo is None
    # A bias broadcast over a batch with a period of 5 elements: no whole texels, element form.
    bias = backend.upload(np.ones((5,), np.float32))
    wide = backend.run("expand", [bias], {"shape": (3, 5)}, spec((3, 5), (5,)))
    w = backend.upload(np.ones((3, 5), np.float32))
    key, _ = draw((3, 5), w, wide, lr, on)
    assert key.startswith("fused:")
    # float16 storage: an input with a low part makes the result a compensated pair.
    backend.memory.compensated = backend.memory.half = True
    w = backend.upload(np.ones((8, 16), np.float32))
    g = backend.upload(np.ones((8, 16), np.float32))
    key, out = draw((8, 16), w, g, lr, on)
    assert key.endswith("+pair") and out.lo is not None
    assert "#define PAIR_OUTPUT" in shaders.program_source(key)


def test_block_shapes_tile_the_output_within_the_draw_buffers() -> None:
    assert blocks.shape_for(1024, 1024, 8) == (4, 2)
    assert blocks.shape_for(1024, 1024, 4) == (4, 1)  # the WebGL2 minimum
    assert blocks.shape_for(64, 12, 8) == (4, 1)  # 12 columns: 3 texels, not pairs
    assert blocks.shape_for(6, 16, 8) is None  # rows not a multiple of 4
    source = shaders.program_source("matmul_block:nt_4x2")
    assert "layout(location = 7) out vec4 o_7;" in source and "o_8" not in source


# ---- optimizers on float16 storage ---------------------------------------------------------------


@pytest.fixture
def half_storage_cpu() -> Any:
    """The cpu backend posing as float16 storage (what webgl2 reports without float32 targets)."""
    from py_in_browser.backends.webgl2.backend import HALF_MIN_EPSILON

    previous = runtime._state["backend"]
    backend = runtime.current_backend().__class__(None)
    backend.storage_format, backend.min_epsilon = "float16", HALF_MIN_EPSILON
    runtime._state["backend"] = backend
    yield backend
    runtime._state["backend"] = previous


def _one_step(optimizer: Any, grad: float) -> float:
    from py_in_browser.tensor import Variable, tensor

    var = Variable(np.array([1.0], np.float32))
    optimizer.apply_gradients([(tensor(np.array([grad], np.float32)), var)])
    return float(asyncio.run(var.numpy())[0])


def test_adam_keeps_epsilon_where_storage_is_float32() -> None:
    import py_in_browser as pib

    got = _one_step(pib.optimizers.Adam(0.1), 1e-4)
    assert got == pytest.approx(1.0 - 0.1 * 1e-4 / (1e-4 + 1e-7), rel=1e-6)


def test_adam_and_rmsprop_raise_epsilon_to_what_float16_storage_represents(
    half_storage_cpu: Any,
) -> None:
    import py_in_browser as pib

    before = len(runtime.runtime_events())
    adam = pib.optimizers.Adam(0.1)
    with pytest.warns(RuntimeWarning, match="epsilon 1e-07 .*float16.*0.0078125"):
        got = _one_step(adam, 1e-4)
    assert got == pytest.approx(1.0 - 0.1 * 1e-4 / (1e-4 + 2.0**-7), rel=1e-6)
    assert adam.get_config()["epsilon"] == 1e-7
    with pytest.warns(RuntimeWarning, match="6.10352e-05"):
        got = _one_step(pib.optimizers.RMSprop(0.1), 1e-4)
    v = 0.1 * 1e-8
    assert got == pytest.approx(1.0 - 0.1 * 1e-4 / math.sqrt(v + 2.0**-14), rel=1e-6)
    events = [e for e in runtime.runtime_events()[before:] if e["type"] == "epsilon_clamped"]
    assert [(e["optimizer"], e["used"]) for e in events] == [
        ("adam", 2.0**-7),
        ("rmsprop", 2.0**-14),
    ]
    # A larger epsilon than the floor is left alone, silently.
    assert _one_step(pib.optimizers.Adam(0.1, epsilon=0.1), 1e-4) == pytest.approx(
        1.0 - 0.1 * 1e-4 / (1e-4 + 0.1), rel=1e-6
    )


# ---- bridge.js's draw timer on a fake GL (no browser here exposes EXT_disjoint_timer_query) ------

TIMER_SCRIPT = """
const source = await (await import("node:fs/promises")).readFile(process.argv[2], "utf8");
const { DrawTimer } = await import("data:text/javascript," + encodeURIComponent(source));
globalThis.performance ??= { now: () => Date.now() };
function fakeGl(disjointAfterProfile) {
  const gl = { QUERY_RESULT_AVAILABLE: 1, QUERY_RESULT: 2, polls: 0, disjoint: true, live: 0 };
  gl.createQuery = () => { gl.live++; return { ns: 1e6 * gl.live, polls: 0 }; };
  gl.beginQuery = () => {}; gl.endQuery = () => {}; gl.flush = () => {}; gl.finish = () => {};
  gl.deleteQuery = () => { gl.live--; };
  // Results show up after two polls, as on a real GPU that is still busy.
  gl.getQueryParameter = (q, what) => what === 1 ? ++q.polls > 2 : q.ns;
  gl.getParameter = () => { const d = gl.disjoint; gl.disjoint = disjointAfterProfile; return d; };
  return gl;
}
const ext = { TIME_ELAPSED_EXT: 10, GPU_DISJOINT_EXT: 11 };
const out = {};
for (const disjoint of [false, true]) {
  const gl = fakeGl(disjoint);
  const timer = new DrawTimer(gl, ext);
  timer.start();  // clears the stale disjoint flag set before profiling
  let draws = 0;
  for (const label of ["matmul", "relu"]) timer.time(label, () => draws++);
  out[disjoint] = { ...JSON.parse(await timer.take(() => false)), draws, live: gl.live };
}
console.log(JSON.stringify(out));
"""


def test_the_timer_query_path_reports_gpu_ms_and_discards_disjoint_results(tmp_path: Any) -> None:
    import shutil
    import subprocess
    from pathlib import Path

    node = shutil.which("node")
    assert node is not None, "node is part of the set-up (npm fetches the runtime); install Node.js"
    script = tmp_path / "timer.mjs"
    script.write_text(TIMER_SCRIPT)
    bridge = Path(shaders.__file__).with_name("bridge.js")
    done = subprocess.run(
        [node, str(script), str(bridge)], capture_output=True, text=True, timeout=60, check=True
    )
    out = json.loads(done.stdout)
    assert out["false"] == {
        "timing": "gpu-timer-query",
        "rows": [["matmul", 1.0], ["relu", 2.0]],
        "discarded": 0,
        "draws": 2,
        "live": 0,
    }
    assert out["true"]["rows"] == [] and out["true"]["discarded"] == 2
    assert out["true"]["draws"] == 2 and out["true"]["live"] == 0


def test_a_replay_swaps_the_state_its_last_replay_left_instead_of_copying() -> None:
    """A variable in the textures the last replay wrote comes back into the recorded state by
    exchanging ids (no draw); one anywhere else is copied in by a draw."""
    backend, _ = fake_backend()
    w = backend.upload(np.ones((2, 2), np.float32))
    x = backend.upload(np.ones((2, 2), np.float32))
    backend.begin_recording()
    new_w = backend.run("add", [w, x], {}, spec((2, 2), (2, 2), (2, 2)))
    loss = backend.run("exp", [new_w], {}, spec((2, 2), (2, 2)))
    recording = backend.finish_recording([x], [(w, new_w)], [loss])
    assert recording.swappable == (True,)
    backend.flush()
    backend.replay(recording, [np.zeros((2, 2), np.float32)], [new_w])
    swaps = [c for c in backend.queue.commands if c[0] == wire.SWAP]
    assert swaps[0] == [wire.SWAP, w.texture.id, new_w.texture.id]
    assert len(swaps) == 2  # the state in, then the loss out (no draw for either)
    assert not [c for c in backend.queue.commands if c[0] == "draw"]
    backend.flush()
    elsewhere = backend.upload(np.ones((2, 2), np.float32))
    backend.replay(recording, [np.zeros((2, 2), np.float32)], [elsewhere])
    assert [c[1] for c in backend.queue.commands if c[0] == wire.SWAP] == [loss.texture.id]
    assert len([c for c in backend.queue.commands if c[0] == "draw"]) == 1  # the state in


# ---- fewer passes per dense training step ----------------------------------------------------------


def _adam_inputs(backend: WebGL2Backend, shape: tuple[int, ...]) -> dict[str, Handle]:
    inputs = {
        "var": backend.upload(np.ones(shape, np.float32)),
        "m": backend.upload(np.zeros(shape, np.float32)),
        "v": backend.upload(np.zeros(shape, np.float32)),
        "grad": backend.upload(np.ones(shape, np.float32)),
        "step_size": backend.upload(np.array(0.01, np.float32)),
        "correction_2": backend.upload(np.array(0.001, np.float32)),
        "gate": backend.upload(np.array(True)),
    }
    backend.flush()
    return inputs


def _adam_draws(backend: WebGL2Backend, names: dict[str, Handle]) -> list[Handle]:
    """One variable's Adam update as training draws it: the gated rules w, m, v back to back."""
    from py_in_browser import fusion, optimizers

    shape = names["var"].shape
    results = []
    for rule in optimizers.Adam()._rules(epsilon_floor=0.0):
        inputs = [names[n] for n in (*rule.reads, "gate")]
        program = fusion.trace(optimizers._gate_rule(rule.fn), len(inputs))
        dtypes = tuple("bool" if h.dtype == "bool" else "float32" for h in inputs)
        out = OutSpec(shape, "float32", tuple(h.shape for h in inputs), dtypes)
        results.append(backend.run("fused", inputs, {"program": program}, out))
    return results


def _sent_draws(backend: WebGL2Backend, engine: FakeEngine) -> list[Any]:
    backend.flush()
    return [c for c in engine.payloads[-1]["commands"] if c[0] == wire.DRAW]


def test_an_optimizers_rules_for_one_variable_draw_as_one_multi_target_pass() -> None:
    from py_in_browser.backends.webgl2 import multi_target

    backend, engine = fake_backend()
    backend.draw_buffers = backend.queue.draw_buffers = 8
    backend.queue.known_programs.update(multi_target.warmup_keys(8))
    inputs = _adam_inputs(backend, (8, 16))
    for handle in _adam_draws(backend, inputs):  # the first step makes its textures between
        backend.free(handle)
    backend.flush()
    w, m, v = _adam_draws(backend, inputs)  # later steps find them pooled
    (draw,) = _sent_draws(backend, engine)
    assert draw[wire.DRAW_KEY] in multi_target.warmup_keys(8)
    assert [draw[wire.DRAW_TARGET], *draw[wire.DRAW_MORE_TARGETS]] == [
        h.texture.id for h in (w, m, v)
    ]
    assert len(draw[wire.DRAW_INPUTS]) == 7  # w, m, v, g, two scalars, the gate: each read once
    assert [u[0] for u in draw[wire.DRAW_UNIFORMS]] == ["u_c0", "u_c1", "u_c2"]
    source = shaders.program_source(draw[wire.DRAW_KEY])
    assert "layout(location = 2) out vec4 o_2;" in source and "o_3" not in source
    # w's rule recomputes the new m (3 steps) and v (4 steps) the other two rules write: the
    # pass computes them once, 16 steps instead of 14 + 4 + 5.
    assert source.count("  float s") == 16
    # A device with 2 draw buffers: no compiled pass fits, so the three draws stay.
    backend.queue.draw_buffers = 2
    for handle in (w, m, v):
        backend.free(handle)
    _adam_draws(backend, inputs)
    assert len(_sent_draws(backend, engine)) == 3


def test_merged_keys_number_the_constants_by_value() -> None:
    """Equal constants share a number across the merged programs (a step computed once reads
    one of them); any values with the same pattern share the compiled program."""
    from py_in_browser.backends.webgl2 import multi_target

    key = multi_target.merged_key([("a", ["w", "g"], [0.9, 0.1]), ("b", ["m", "g"], [0.1])])
    assert key == "fused_multi4:a@0.1;b@2.1|0.1;1"
    same_pattern = multi_target.merged_key(
        [("a", ["w", "g"], [0.8, 0.2]), ("b", ["m", "g"], [0.2])]
    )
    assert same_pattern == key
    other = multi_target.merged_key([("a", ["w", "g"], [0.9, 0.1]), ("b", ["m", "g"], [0.9])])
    assert other == "fused_multi4:a@0.1;b@2.1|0.1;0"


def test_whole_texel_kernels_read_a_period_of_texels_only_in_periodic_programs() -> None:
    """An input repeating a period of whole texels (a bias over a batch) needs an integer
    division and modulo per fetch, which SwiftShader pays on every fetch of a program that can
    take that path: same-layout and one-element inputs get programs without it."""
    backend, _ = fake_backend()
    matrix = backend.upload(np.ones((8, 16), np.float32))
    one = backend.upload(np.ones((1,), np.float32))
    bias = backend.upload(np.ones((16,), np.float32))
    batch = backend.run("expand", [bias], {"shape": (8, 16)}, spec((8, 16), (16,)))
    scalar = backend.run("expand", [one], {"shape": (8, 16)}, spec((8, 16), (1,)))

    def key(*inputs: Handle) -> str:
        backend.run("add", list(inputs), {}, spec((8, 16), (8, 16), (8, 16)))
        return str([c for c in backend.queue.commands if c[0] == wire.DRAW][-1][wire.DRAW_KEY])

    assert key(matrix, matrix) == key(matrix, scalar) == "binary4:add"
    assert key(matrix, batch) == "binary4:add+periodic"
    assert "% (n / 4)" in shaders.program_source("binary4:add+periodic")
    assert "% (n / 4)" not in shaders.program_source("binary4:add")


def test_fused_draws_merge_only_into_programs_the_warm_up_compiled() -> None:
    backend, engine = fake_backend()
    backend.draw_buffers = backend.queue.draw_buffers = 8
    inputs = _adam_inputs(backend, (8, 16))
    for handle in _adam_draws(backend, inputs):
        backend.free(handle)
    backend.flush()
    _adam_draws(backend, inputs)  # nothing warmed up: compiling in a step costs more
    assert len(_sent_draws(backend, engine)) == 3


def test_a_bias_gradient_sums_whole_texels_over_the_rows() -> None:
    plan = kernels.sum_rows_plan({"axes": (0,)}, spec((128,), (64, 128)))
    assert plan == ("sum_rows4", [kernels.ints("u_rows", [64]), kernels.ints("u_cols4", [32])])
    assert kernels.sum_rows_plan({"axes": (1,)}, spec((64,), (64, 128))) is None
    assert kernels.sum_rows_plan({"axes": (0,)}, spec((10,), (64, 10))) is None
    backend, _ = fake_backend()
    grads = backend.upload(np.ones((64, 128), np.float32))
    backend.run("reduce_sum", [grads], {"axes": (0,)}, spec((128,), (64, 128)))
    assert backend.queue.commands[-1][wire.DRAW_KEY] == "sum_rows4"
    assert "#define TEXEL_KERNEL" in shaders.program_source("sum_rows4")


def test_a_large_transposed_product_reads_a_in_place_in_blocks() -> None:
    backend, _ = fake_backend()
    backend.draw_buffers = 8
    x = backend.upload(np.ones((64, 784), np.float32))
    g = backend.upload(np.ones((64, 128), np.float32))
    attrs = {"transpose_a": True, "transpose_b": False}
    backend.run("matmul", [x, g], attrs, spec((784, 128), (64, 784), (64, 128)))
    keys = [c[wire.DRAW_KEY] for c in backend.queue.commands if c[0] == wire.DRAW]
    # no transpose4 of x; output and targets one matrix row per texture row: no divisions
    assert keys == ["matmul_block:tn_4x2", "block_interleave:aligned_4x2"]
    assert "texelFetch(u_x0, ivec2(m4, kab + 4 * k + 3), 0)" in shaders.program_source(keys[0])


def test_a_replay_copies_a_batch_tensor_in_only_when_it_is_another() -> None:
    """State the step only reads (a batch given as tensors) keeps the last tensor copied in:
    the same tensor again needs no copy; another tensor, or one made since in its texture, does.
    (Here the state is an output too, so the replay cannot lend it the caller's texture instead.)"""
    backend, _ = fake_backend()
    x = backend.upload(np.ones((2, 4), np.float32))
    backend.begin_recording()
    loss = backend.run("exp", [x], {}, spec((2, 4), (2, 4)))
    recording = backend.finish_recording([], [(x, x)], [loss, x])
    backend.flush()
    assert recording.lendable == (False,)

    def copies(batch: Handle) -> int:
        backend.replay(recording, [], [batch])
        draws = [c for c in backend.queue.commands if c[0] == wire.DRAW]
        backend.flush()
        return len(draws) - 1  # x is copied out every time (the loss is swapped out)

    batch = backend.upload(np.zeros((2, 4), np.float32))
    assert [copies(batch), copies(batch)] == [1, 0]
    other = backend.upload(np.zeros((2, 4), np.float32))
    assert [copies(other), copies(batch)] == [1, 1]
    backend.free(batch)
    again = backend.upload(np.zeros((2, 4), np.float32))  # the same texture, handed out again
    assert again.texture.id == batch.texture.id and copies(again) == 1


def test_a_tensor_padded_for_one_product_is_not_padded_again_while_it_lives() -> None:
    """A logits layer of 10 units: its weight is padded to 12 columns for the forward product
    and again for the backward one, the logits' gradient for two products: one pad each."""
    backend, _ = fake_backend()
    h = backend.upload(np.ones((64, 128), np.float32))
    w = backend.upload(np.ones((128, 10), np.float32))
    nn = {"transpose_a": False, "transpose_b": False}
    logits = backend.run("matmul", [h, w], nn, spec((64, 10), (64, 128), (128, 10)))
    nt = {"transpose_a": False, "transpose_b": True}
    backend.run("matmul", [logits, w], nt, spec((64, 128), (64, 10), (128, 10)))
    tn = {"transpose_a": True, "transpose_b": False}
    backend.run("matmul", [h, logits], tn, spec((128, 10), (64, 128), (64, 10)))
    labels = [c[wire.DRAW_LABEL] for c in backend.queue.commands if c[0] == wire.DRAW]
    assert labels.count("pad") == 2  # w once, the logits once
    kept = backend.memory.padded[w.texture.id]
    (padded,) = kept.values()
    backend.free(w)  # the copy goes with it
    assert w.texture.id not in backend.memory.padded
    assert backend.memory.pool.is_free(padded.texture.id)


def test_slices_and_pads_of_the_last_dim_of_rows_take_the_rows_kernel() -> None:
    pad = {"paddings": ((0, 0), (0, 2)), "value": 0.0}
    key, uniforms = kernels.plan("pad", pad, spec((128, 12), (128, 10)))
    assert (key, uniforms[0]) == ("rows", kernels.ints("u_rows", [12, 10, 0, 10]))
    key, uniforms = kernels.plan("slice", {"begin": (0, 1)}, spec((64, 10), (64, 12)))
    assert (key, uniforms[0]) == ("rows", kernels.ints("u_rows", [10, 12, 1, 12]))
    rows_padded = {"paddings": ((1, 0), (0, 2)), "value": 0.0}
    assert kernels.plan("pad", rows_padded, spec((129, 12), (128, 10)))[0] == "strided"
    assert "float value(int i)" in shaders.program_source("rows")


def test_reductions_over_one_axis_take_the_loop_free_program() -> None:
    rows = kernels.plan("reduce_max", {"axes": (1,)}, spec((64,), (64, 10)))[0]
    whole = kernels.plan("reduce_sum", {"axes": (0, 1)}, spec((), (64, 10)))[0]
    assert (rows, whole) == ("reduce:max_axis", "reduce:sum_axis")
    assert kernels.plan("reduce_sum", {"axes": (0, 2)}, spec((5,), (4, 5, 6)))[0] == "reduce:sum"
    assert "#define ONE_AXIS" in shaders.program_source("reduce:sum_axis")
