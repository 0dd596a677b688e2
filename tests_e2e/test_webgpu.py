"""The WebGPU backend in real Chromium (SwiftShader): ops, training parity with cpu, replay, memory,
profiling and clear errors. Shapes stay tiny: WebGPU here is a software GPU on two cores."""

from __future__ import annotations

import asyncio
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from tests_e2e.engine_page import EnginePage, PythonError
from tests_e2e.first_step_model import W3S_FIRST_STEP, indented
from tests_e2e.non_finite_steps import check_bad_step_keeps_the_last_good_weights
from tests_e2e.op_oracle import LONG_SUMS, assert_op_table_matches, assert_special_values_match

STEPS = 20
LOSS_TOLERANCE = 1e-3

# Defines `per_step_losses(name)` in either interpreter: the loss of each of the first 20 steps,
# from the same seeds (hence the same initial weights) on whatever backend is active.
PER_STEP_LOSSES = """
async def per_step_losses(name):
    import py_in_browser as pib
    from py_in_browser import layers, optimizers
    from py_in_browser.testing import workloads

    if name == "xor":
        x, y = workloads.xor_data()
        model, epochs, batch = workloads.xor_model(seed=1), 20, 4
    elif name == "mlp":  # 150 samples in batches of 32: four full batches and a partial one
        x, y = workloads.blobs(samples=150, seed=0)
        model = pib.Sequential(
            [layers.Dense(16, activation="relu", input_shape=(4,)), layers.Dense(3, activation="softmax")],
            seed=0,
        )
        model.compile(optimizer=optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
        epochs, batch = 4, 32
    else:
        x, y = workloads.synthetic_images(40, size=16, seed=0)
        model, epochs, batch = workloads.small_cnn(size=16, seed=0), 4, 8
    losses = []
    record = pib.LambdaCallback(on_batch_end=lambda step, logs: losses.append(logs["loss"]))
    await model.fit(x, y, epochs=epochs, batch_size=batch, seed=0, callbacks=[record])
    return losses[:20]
"""


@pytest.fixture(scope="module")
def page_query() -> str:
    return "?backend=webgpu"


def cpu_losses(name: str) -> list[float]:
    """The cpu backend in CPython (equal to cpu in Pyodide within 1e-5, see test_engine_parity)."""
    namespace: dict[str, Any] = {}
    exec(PER_STEP_LOSSES, namespace)
    # Playwright's sync API owns this thread's event loop, so CPython runs on its own thread.
    with ThreadPoolExecutor(1) as pool:
        losses: list[float] = pool.submit(asyncio.run, namespace["per_step_losses"](name)).result()
    return losses


def test_webgpu_is_active_with_its_limits(engine_page: EnginePage) -> None:
    caps = engine_page.run("pib.capabilities()")
    assert engine_page.run("pib.get_backend()") == "webgpu"
    assert caps["max_storage_buffer_binding_size"] >= 1 << 20
    assert caps["max_compute_workgroups_per_dimension"] >= 65535
    assert caps["supports_replay"] is True


def test_a_small_cnns_first_step_uses_only_kernels_compiled_at_ready(
    engine_page: EnginePage,
) -> None:
    """The warm-up asks for warmup.first_step_kernels all at once once ready, and those are
    every kernel the benchmark's W3s model dispatches in its first step (32x32 RGB, two relu
    convolutions with max pooling, two dense layers, softmax cross-entropy on class labels,
    Adam, train_on_batch on device tensors): none is left to compile while the step waits, and
    none is compiled in vain (the step waits for the slowest of them)."""
    outside_first_step = engine_page.run(
        """
from py_in_browser import layers, runtime
from py_in_browser.backends.webgpu import warmup
backend = runtime.current_backend()
used = set()
define = backend._pipeline_id
backend._pipeline_id = lambda key, wgsl, background=False: used.add(key) or define(key, wgsl, background)
try:
"""
        + indented(W3S_FIRST_STEP, 4)
        + """finally:
    del backend._pipeline_id
first_step = {key for key, _ in warmup.first_step_kernels(backend.device_limits)}
[sorted(first_step - used), sorted(used - first_step)]
"""
    )
    assert outside_first_step == [[], []]


def test_a_command_list_waiting_for_kernels_runs_in_parts_in_order(
    engine_page: EnginePage,
) -> None:
    """A command list whose later kernels are still compiling sends its start at once and the
    rest as they compile (bridge.js flushWhenCompiled, how a first step overlaps compiling):
    the parts run in order and give numpy's numbers, and the list keeps one serial, the count
    Python frees buffers by."""
    got = engine_page.run(
        """
import json
from py_in_browser import fusion, runtime
backend = runtime.current_backend()
def counts():
    return json.loads(backend.engine.stats()), backend.submitted
await backend.flush_async()
x = pib.tensor(np.linspace(-2, 2, 64, dtype=np.float32).reshape(8, 8))
y = x * 3.0
# Programs no other test runs: fresh kernels, still compiling when the list is flushed.
z = pib.fused(lambda v: fusion.erf(v * 0.5) * fusion.tanh(v) + 0.25, y)
w = pib.fused(lambda v, u: fusion.sigmoid(v - u) * fusion.sqrt(u * u + 1.0), z, y)
(js_before, py_before) = counts()
await backend.flush_async()
(js_after, py_after) = counts()
result = (await w.numpy()).tolist()
[result, js_after["early_parts"] - js_before["early_parts"],
 js_after["submitted"] - js_before["submitted"], py_after - py_before]
"""
    )
    result, early_parts, js_serials, py_serials = got
    y = np.linspace(-2, 2, 64).reshape(8, 8) * 3.0
    z = np.array([[math.erf(v * 0.5) for v in row] for row in y]) * np.tanh(y) + 0.25
    expected = 1 / (1 + np.exp(-(z - y))) * np.sqrt(y * y + 1.0)
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-6)
    assert early_parts >= 1
    assert js_serials == py_serials == 1


def test_reads_wait_for_a_list_still_going_out_in_parts(engine_page: EnginePage) -> None:
    """Reads gathered while a list waits for a kernel to compile (checkpoint.save reads every
    weight so) see that list's buffers and data: the tensor made after the uncompiled dispatch
    was read before bridge.js had created its buffer ("copyBufferToBuffer parameter 1 is not of
    type GPUBuffer", seen as a Pretrained layer's first fit corrupting the Dense weights)."""
    got = engine_page.run(
        """
import asyncio, json
from py_in_browser import fusion, runtime
backend = runtime.current_backend()
await backend.flush_async()
before = json.loads(backend.engine.stats())["early_parts"]
x = pib.tensor(np.linspace(-1, 1, 12, dtype=np.float32))
# A program no other test runs: its kernel is still compiling when the list goes out.
y = pib.fused(lambda v: fusion.exp(v * 0.75) * fusion.sigmoid(v + 0.5) - 0.125, x)
late = pib.tensor([1.5, -2.0, 3.25])  # created (CREATE, WRITE) after that dispatch
got = await asyncio.gather(y.numpy(), late.numpy(), x.numpy())
[[a.tolist() for a in got], json.loads(backend.engine.stats())["early_parts"] - before]
"""
    )
    (y, late, x), early_parts = got
    v = np.linspace(-1, 1, 12)
    expected = np.exp(v * 0.75) / (1 + np.exp(-(v + 0.5))) - 0.125
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    assert late == [1.5, -2.0, 3.25]
    np.testing.assert_allclose(x, v, rtol=1e-6)
    assert early_parts >= 1  # the list did go out in parts while the reads were asked for


def test_op_table_matches_numpy(engine_page: EnginePage) -> None:
    worst = assert_op_table_matches(engine_page, rtol=1e-4)
    print("worst relative error per case:", {k: f"{v:.1e}" for k, v in worst.items()})


def test_special_values_flow_as_in_numpy(engine_page: EnginePage) -> None:
    assert_special_values_match(engine_page)


def test_long_sums_keep_float32_accuracy(engine_page: EnginePage) -> None:
    errors = engine_page.run(LONG_SUMS)
    print("webgpu long-sum relative errors:", errors)
    assert errors["sum"] < 1e-6 and errors["variance"] < 1e-6, errors


def test_int32_beyond_float_precision_stays_exact(engine_page: EnginePage) -> None:
    got = engine_page.run(
        "i = pib.tensor([2**24 + 1, -(2**24) - 1], dtype='int32')\n"
        "(await (i + pib.tensor([2, 0], dtype='int32')).numpy()).tolist()"
    )
    assert got == [2**24 + 3, -(2**24) - 1]


def test_bool_and_int32_round_trip(engine_page: EnginePage) -> None:
    got = engine_page.run(
        "b = pib.tensor([[True, False], [False, True]], dtype='bool')\n"
        "i = pib.tensor([-3, 0, 2**31 - 1], dtype='int32')\n"
        "[(await b.numpy()).tolist(), str((await b.numpy()).dtype), (await i.numpy()).tolist()]"
    )
    assert got == [[[True, False], [False, True]], "bool", [-3, 0, 2**31 - 1]]


@pytest.mark.parametrize("name", ["xor", "mlp", "cnn"])
def test_per_step_losses_match_cpu(engine_page: EnginePage, name: str) -> None:
    expected = cpu_losses(name)
    engine_page.run(PER_STEP_LOSSES)
    got = engine_page.run(
        "before = pib.memory()['steps_replayed']\n"
        f"losses = await per_step_losses({name!r})\n"
        "[losses, pib.memory()['steps_replayed'] - before]"
    )
    losses, replayed = got
    assert len(losses) == STEPS
    np.testing.assert_allclose(losses, expected, rtol=0, atol=LOSS_TOLERANCE)
    # Each batch shape is recorded twice (the second recording verifies the first), then replayed.
    assert replayed >= STEPS - 4, replayed
    print(f"{name}: worst |webgpu - cpu| = {np.max(np.abs(np.subtract(losses, expected))):.1e}")


XOR_FIT = """
import gc
from py_in_browser.testing import workloads
x, y = workloads.xor_data()
x, y = np.tile(x, (50, 1)), np.tile(y, (50, 1))  # 50 steps of batch 4 per epoch
model = workloads.xor_model(seed=1)
async def fit_steps(epochs):
    # Replay's own calls: recovery checkpoints (a readback every 50 steps by default) are
    # counted by tests_e2e/test_recovery.py, so they are off here.
    await model.fit(x, y, epochs=epochs, batch_size=4, shuffle=False, recovery_every=None)
    gc.collect()  # models of earlier tests (cycles) go now, not between two of these counts
    return pib.memory()
"""


def test_replayed_steps_cost_constant_js_calls_and_leak_nothing(engine_page: EnginePage) -> None:
    engine_page.run(XOR_FIT)
    warm = engine_page.run("await fit_steps(1)")
    short = engine_page.run("await fit_steps(1)")
    long = engine_page.run("await fit_steps(4)")
    # Per step one flush carries the whole replayed step; a fence every 4 steps; 3 reads an epoch.
    calls_per_step = (long["js_calls"] - short["js_calls"]) / 200
    words_per_step = (long["words_sent"] - short["words_sent"]) / 200
    assert calls_per_step <= 1.5, calls_per_step
    # The recordings outlive each fit (the model's Trainer keeps them): every step replays.
    assert long["steps_replayed"] - short["steps_replayed"] == 200
    for key in ("num_tensors", "num_bytes", "gpu_bytes_in_use"):
        assert long[key] == short[key] == warm[key], key
    # Idle pool buffers (left by earlier tests) may be trimmed meanwhile, never added.
    for key in ("gpu_buffers", "gpu_bytes_allocated", "js_buffers", "js_param_buffers"):
        assert long[key] <= short[key], key
    assert long["js_buffers"] == long["gpu_buffers"]
    assert long["js_bind_groups"] <= short["js_bind_groups"] + 64
    assert long["js_pipelines"] == short["js_pipelines"]
    print(f"per replayed step: {calls_per_step:.2f} js calls, {words_per_step:.0f} words; {long}")


def test_disposing_a_big_workload_returns_gpu_buffers_to_their_baseline(
    engine_page: EnginePage,
) -> None:
    """Pool buffers a finished workload leaves idle are destroyed (with the bind groups naming
    them) after a few flushes, so the live GPU buffer and bind group counts come back down."""
    settle = (
        "import gc\n"
        "gc.collect()  # models of earlier tests (cycles via their History) go now, not mid-test\n"
        "for _ in range(12):\n"
        "    with pib.tidy():\n"
        "        await (pib.ones((3,)) + 1.0).numpy()\n"
        "pib.memory()"
    )
    baseline = engine_page.run(settle)
    peak = engine_page.run(
        "with pib.tidy():\n"
        "    xs = [pib.tensor(np.full((64, 16 + k), k, np.float32)) for k in range(150)]\n"
        "    ys = [pib.relu(x @ pib.transpose(x)) + 1.0 for x in xs]\n"
        "    total = float((await pib.sum(ys[-1]).numpy()))\n"
        "pib.memory()"
    )
    after = engine_page.run(settle)
    assert peak["js_buffers"] >= baseline["js_buffers"] + 300, (baseline, peak)
    assert after["js_buffers"] <= baseline["js_buffers"] + 8, (baseline, after)
    assert after["js_buffers"] == after["gpu_buffers"]
    assert after["js_bind_groups"] <= baseline["js_bind_groups"] + 16, (baseline, after)
    assert after["num_tensors"] == baseline["num_tensors"]


def test_eager_steps_give_the_replayed_losses(engine_page: EnginePage) -> None:
    engine_page.run(PER_STEP_LOSSES)
    replayed = engine_page.run("await per_step_losses('mlp')")
    eager, replays = engine_page.run(
        "from py_in_browser import replay\n"
        "before = pib.memory()['steps_replayed']\n"
        "replay.ENABLED = False\n"
        "try:\n"
        "    losses = await per_step_losses('mlp')\n"
        "finally:\n"
        "    replay.ENABLED = True\n"
        "[losses, pib.memory()['steps_replayed'] - before]"
    )
    assert replays == 0
    np.testing.assert_allclose(eager, replayed, rtol=0, atol=1e-6)


FORWARD_PASSES = """
from py_in_browser import layers, replay
rng = np.random.default_rng(8)
model = pib.Sequential([
    layers.Conv2D(8, 3, activation="relu", padding="same", input_shape=(8, 8, 3)),
    layers.MaxPool2D(2), layers.Flatten(), layers.Dense(4, activation="softmax")], seed=8)
x = pib.tensor(rng.uniform(-1, 1, (2, 8, 8, 3)).astype(np.float32))
host = rng.uniform(-1, 1, (2, 8, 8, 3)).astype(np.float32)

async def passes():
    view = pib.broadcast_to(pib.tensor(np.float32(0.5)), (2, 8, 8, 3))  # a strided view
    predicted = [await (await model.predict(v)).numpy() for v in (x, host, view)]
    ranked = await pib.data.top_k(model, x, k=2)
    return predicted, ranked

async def counted(calls):
    from py_in_browser.runtime import current_backend
    backend = current_backend()
    await (await model.predict(x)).numpy()  # nothing of earlier calls left in the open list
    before = (backend.js_calls, backend.words_sent, backend.steps_replayed)
    for _ in range(calls):
        (await model.predict(x)).dispose()
    await backend.flush_async()  # what eager calls left in the open list goes out too
    return [(backend.js_calls - before[0]) / calls, (backend.words_sent - before[1]) / calls,
            backend.steps_replayed - before[2]]
"""


def test_forward_passes_replay_with_the_eager_bits_in_one_js_call(engine_page: EnginePage) -> None:
    """predict (a device tensor, a host array, a broadcast view) and top_k record their passes
    and replay them from the third call of a signature: the same bits as eager passes with
    replay off, one JS call each (the replay: the guard no longer waits for a fence, its
    results carry their lineage) and a command list of a few words instead of every dispatch."""
    engine_page.run(FORWARD_PASSES)
    eager, eager_cost = engine_page.run(
        "replay.ENABLED = False\n"
        "try:\n"
        "    got = [await passes(), await counted(10)]\n"
        "finally:\n"
        "    replay.ENABLED = True\n"
        "got"
    )
    replayed = engine_page.run(
        "before = pib.memory()['steps_replayed']\n"
        "runs = [await passes() for _ in range(4)]\n"
        "[runs, pib.memory()['steps_replayed'] - before]"
    )
    runs, replays = replayed
    # 16 calls of three signatures (a device tensor, its broadcast-view twin, a host array; top_k
    # on the device tensor): two recordings each (the second verifies the first), then replays.
    assert replays == 16 - 2 * 3, replays
    for predicted, ranked in runs:
        for got, want in zip(predicted, eager[0], strict=True):
            assert np.array_equal(np.array(got), np.array(want))  # bit for bit
        assert ranked == eager[1]
    calls, words, replays = engine_page.run("await counted(10)")
    assert replays == 10
    # The replay's flush, and one last flush over the ten calls: no fence (lineage.py).
    assert calls <= 1.2, calls
    assert eager_cost[2] == 0 and words < eager_cost[1] / 4, (words, eager_cost)
    print(f"per predict: replayed {calls:.1f} js calls {words:.0f} words; eager {eager_cost}")


@pytest.mark.parametrize("injected", ["inf", "nan"])
def test_a_non_finite_replayed_step_keeps_the_last_good_weights(
    engine_page: EnginePage, injected: str
) -> None:
    check_bad_step_keeps_the_last_good_weights(engine_page, injected)


def test_profile_reports_gpu_kernel_times_and_traffic(engine_page: EnginePage) -> None:
    report = engine_page.run(
        "async def work():\n"
        "    with pib.tidy():\n"
        "        a = pib.tensor(np.ones((32, 32), np.float32))\n"
        "        await pib.relu(a @ a).numpy()\n"
        "await pib.profile(work)"
    )
    names = {k["name"] for k in report["kernels"]}
    assert {"matmul", "relu"} <= names, names
    assert all(k["calls"] >= 1 and k["ms"] >= 0 for k in report["kernels"])
    assert report["bytes_uploaded"] == report["bytes_downloaded"] == 32 * 32 * 4
    assert report["wall_ms"] > 0
    # Our Chromium's SwiftShader adapter has timestamp-query, so these are GPU times.
    assert report["timing"] == "gpu-timestamp-query"
    assert report["kernel_ms"] == pytest.approx(sum(k["ms"] for k in report["kernels"]), rel=1e-6)
    print("profile:", report)


def test_float64_is_a_clear_type_error(engine_page: EnginePage) -> None:
    with pytest.raises(PythonError, match="webgpu has no float64"):
        engine_page.run("pib.tensor(np.zeros(3), dtype='float64')")


def test_a_tensor_beyond_the_binding_limit_is_a_clear_error(engine_page: EnginePage) -> None:
    # A binding limit under the engine's max_tensor_bytes cap (limits.py), which refuses bigger
    # tensors before any backend sees them.
    engine_page.run("await pib.init('webgpu', limits={'max_storage_buffer_binding_size': 1 << 26})")
    limit = engine_page.run("pib.capabilities()['max_storage_buffer_binding_size']")
    assert limit == 1 << 26
    with pytest.raises(PythonError, match=r"max_?[sS]torage_?[bB]uffer_?[bB]inding_?[sS]ize"):
        engine_page.run(f"pib.ones(({limit // 4 + 1},))")
    assert engine_page.run("(await (pib.ones((2,)) * 3.0).numpy()).tolist()") == [3.0, 3.0]


def test_a_synchronous_read_says_to_await(engine_page: EnginePage) -> None:
    got = engine_page.run(
        "from py_in_browser import _js\n"
        "from py_in_browser.runtime import current_backend\n"
        "t = pib.tensor([1.0, 2.0])\n"
        "try:\n"
        "    result = current_backend().read_now(t._handle()).tolist()\n"
        "except RuntimeError as exc:\n"
        "    result = str(exc)\n"
        "[_js.can_run_sync(), result]"
    )
    can_block, result = got
    assert result == [1.0, 2.0] if can_block else "await t.numpy()" in result


def test_a_predict_over_several_batches_replays_each_batchs_own_rows(
    engine_page: EnginePage,
) -> None:
    """One predict call of three batches records twice and replays once without a read between
    them: each batch's rows are its own, bit for bit as with replay off (the replay's input copy
    once overtook the second recording's first run, which then gave the third batch's rows)."""
    engine_page.run(FORWARD_PASSES)
    same = engine_page.run(
        """
many = rng.uniform(-1, 1, (6, 8, 8, 3)).astype(np.float32)
replay.ENABLED = False
try:
    eager = await (await model.predict(many, batch_size=2)).numpy()
finally:
    replay.ENABLED = True
replayed = await (await model.predict(many, batch_size=2)).numpy()
bool(np.array_equal(eager, replayed)) and not np.array_equal(eager[2:4], eager[4:6])
"""
    )
    assert same is True


def test_a_write_after_a_dispatch_in_one_command_list_waits_for_it(
    engine_page: EnginePage,
) -> None:
    """A buffer written again after a dispatch read it, with both in one command list: the
    dispatch sees the first contents. queue.writeBuffer takes effect when bridge.js calls it, ahead
    of the list's encoder, so a list whose write follows GPU work is submitted in two parts (a
    replay's input write did overtake a recording's first run: a predict of three batches gave
    the second batch the third's rows)."""
    got = engine_page.run(
        """
from py_in_browser.runtime import current_backend
backend = current_backend()
t = pib.tensor([1.0, 2.0])
first = pib.exp(t)
backend.commands.write(t._handle().id, np.float32([3.0, 4.0]).tobytes())
second = pib.exp(t)
[(await first.numpy()).tolist(), (await second.numpy()).tolist()]
"""
    )
    np.testing.assert_allclose(got, np.exp([[1.0, 2.0], [3.0, 4.0]]), rtol=1e-6)


def test_passes_recorded_on_a_lost_device_are_dropped_and_recorded_again(
    engine_page: EnginePage,
) -> None:
    """A device lost after predict and a graph model replayed their passes: the next calls run
    on the successor backend, recorded there anew (never a replay naming the lost buffers), with
    the same bits."""
    engine_page.run(FORWARD_PASSES)  # a model of its own: no recordings yet
    outcome = engine_page.run(
        """
from py_in_browser.runtime import current_backend
from py_in_browser.testing import graph_models, recovery_calls
gm = await pib.load_graph_model(graph_models.tiny_graph_model())
row = np.ones((2, 3), np.float32)

async def calls():
    predicted = [await (await model.predict(host)).numpy() for _ in range(3)]
    graph = [await (await gm(row, output="h")).numpy() for _ in range(3)]
    return predicted + graph

lost = current_backend()
at_start = lost.steps_replayed  # fit's replayed steps of earlier tests
first = await calls()
replayed_there = lost.steps_replayed - at_start
await recovery_calls.lose_reported()
again = await calls()
successor = current_backend()
replayers = list(model._trainer._forward_replayers.values())
[successor is not lost, lost.retired, replayed_there, successor.steps_replayed,
 all(r.backend is successor for r in replayers),
 all(np.array_equal(a, b) for a, b in zip(first, again))]
"""
    )
    # Per call site: two recordings verify each other, the third call replays.
    assert outcome == [True, True, 2, 2, True, True], outcome


def test_a_lost_device_rejects_reads_and_is_an_event(engine_page: EnginePage) -> None:
    """Last in the module: it destroys the page's device."""
    message = engine_page.run(
        "from py_in_browser.runtime import current_backend\n"
        "t = pib.tensor([1.0])\n"
        "current_backend().lose_device(restore=False, restore_after_s=0.0)\n"
        "import asyncio\n"
        "await asyncio.sleep(0.1)\n"
        "try:\n"
        "    await (t + t).numpy()\n"
        "    err = None\n"
        "except Exception as exc:\n"
        "    err = str(exc)\n"
        "err"
    )
    assert message is not None and "device was lost" in message
    events = engine_page.run("pib.runtime_events()")
    assert any(e["type"] == "device_lost" for e in events), events
