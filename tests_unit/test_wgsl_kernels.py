"""The webgpu WGSL kernels run natively with wgpu-py (lavapipe) against numpy and the cpu backend."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

import py_in_browser as pib
from py_in_browser import fusion, ops, runtime
from py_in_browser.backends import BACKENDS, Backend, OutSpec, register_backend
from py_in_browser.backends.cpu import CpuBackend
from py_in_browser.backends.webgpu import (
    codegen,
    filter_grad,
    fused,
    fused_runs,
    kernels,
    linalg,
    warmup,
)
from py_in_browser.backends.webgpu.plan import DeviceLimits, Dispatch
from py_in_browser.testing import workloads
from py_in_browser.testing.op_cases import (
    CASES,
    SPECIAL_CASES,
    OpCase,
    make_inputs,
    reference,
    run_special_case,
    special_inputs,
    special_mismatches,
    special_reference,
    tape_gradients,
)
from py_in_browser.testing.op_cases import _call_pib as call_case
from tests_unit.wgpu_native import NAME, WgpuNativeBackend, request_device

RTOL = 1e-4
CPU = CpuBackend()


# A software adapter's limits (SwiftShader on 2 threads): its GEMMs take gemm_direct.wgsl.
SOFTWARE = DeviceLimits(resident_workgroups=8)


@pytest.fixture(scope="module")
def gpu() -> WgpuNativeBackend:
    return WgpuNativeBackend(request_device())


@pytest.fixture
def active_gpu(gpu: WgpuNativeBackend) -> Iterator[WgpuNativeBackend]:
    """Makes the native backend the active one for one test, then restores the previous one."""
    previous = runtime._state["backend"]
    register_backend(NAME, lambda limits: gpu, priority=-1)
    try:
        assert asyncio.run(pib.init(backend=NAME)) == NAME
        yield gpu
    finally:
        runtime._state["backend"] = previous
        del BACKENDS[NAME]


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """Max absolute error over max(1, max |want|): the e2e op oracle's measure."""
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype == np.bool_ or want.dtype.kind in "iu":
        return 0.0 if np.array_equal(got, want) else float("inf")
    want64 = want.astype(np.float64)
    scale = max(1.0, float(np.max(np.abs(want64), initial=0.0)))
    return float(np.max(np.abs(got.astype(np.float64) - want64), initial=0.0)) / scale


def run_primitive(backend: Backend, op: str, arrays: Sequence[np.ndarray], **attrs: Any):
    """Uploads, runs one primitive exactly as apply_op would, and reads the result back."""
    dtypes = [a.dtype.name if a.dtype != np.bool_ else "bool" for a in arrays]
    shape, dtype = ops.infer(op, [a.shape for a in arrays], dtypes, attrs)
    spec = OutSpec(tuple(shape), dtype, tuple(a.shape for a in arrays), tuple(dtypes))
    handles = [backend.upload(a) for a in arrays]
    result = backend.run(op, handles, attrs, spec)
    got = asyncio.run(backend.download(result))
    for handle in [*handles, result]:
        backend.free(handle)
    return got


def assert_matches_cpu(gpu: Backend, op: str, arrays: Sequence[np.ndarray], **attrs: Any) -> None:
    wide = [a.astype(np.float64) if a.dtype == np.float32 else a for a in arrays]
    want = run_primitive(CPU, op, wide, **attrs)
    got = run_primitive(gpu, op, arrays, **attrs)
    assert relative_error(got, want) <= RTOL, (op, attrs, got, want)


def normal(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---- coverage and the shared op-case table ----------------------------------------------------


def test_adapter_is_found(gpu: WgpuNativeBackend) -> None:
    assert gpu.device is not None


def run_case(case: OpCase) -> float:
    """Worst relative error of one op case on the active backend: forward against numpy, tape
    gradients in float32 against the cpu backend's float64 tape gradients."""
    arrays = make_inputs(case, "float32")
    with pib.tidy():
        tensors = [pib.tensor(a, dtype="float32" if a.dtype.kind == "f" else None) for a in arrays]
        got = asyncio.run(call_case(case, tensors).numpy())
    worst = relative_error(got, reference(case, arrays))
    if case.grad:
        grads = asyncio.run(tape_gradients(case, "float32"))[0]
        active = runtime._state["backend"]
        runtime._state["backend"] = CPU
        try:
            oracle = asyncio.run(tape_gradients(case, "float64"))[0]
        finally:
            runtime._state["backend"] = active
        for got_grad, want_grad in zip(grads, oracle, strict=True):
            worst = max(worst, relative_error(got_grad, want_grad))
    return worst


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_op_case_forward_and_gradients(case: OpCase, active_gpu: WgpuNativeBackend) -> None:
    assert run_case(case) <= RTOL, case.name


def test_op_table_compiles_few_pipelines(active_gpu: WgpuNativeBackend) -> None:
    # Shapes live in params, so one pipeline serves every shape of a kernel: the count grows with
    # (kernel, element types), not with calls. A fresh backend counts the table's own pipelines.
    fresh = WgpuNativeBackend(active_gpu.device)
    runtime._state["backend"] = fresh
    for case in CASES:
        run_case(case)
    # Broadcast operands add a variant per (op, how each input is read: in place, as a repeated
    # row or by a strided walk), and each fused program one per gradient program: still a few
    # dozen.
    assert 0 < len(fresh.pipelines) <= 80, sorted(fresh.pipelines)


@pytest.mark.parametrize("limits", [DeviceLimits(), SOFTWARE], ids=["gpu", "software"])
def test_warm_up_kernels_compile_and_cover_training(
    gpu: WgpuNativeBackend, limits: DeviceLimits
) -> None:
    """The pipelines compiled ahead at start-up are valid WGSL, and include what the small CNN's
    training steps ask for (so its first step waits for no shader compilation), on a GPU and on
    a software adapter (whose GEMMs are other kernels). The first step's kernels come once,
    ahead of the rest."""
    first_step = dict(warmup.first_step_kernels(limits))
    warm = {**first_step, **dict(warmup.common_kernels(limits))}
    assert len(warm) == len(first_step) + len(warmup.common_kernels(limits))
    # Single ops plus the fused updates, losses and gradients, and the optimizers' groups.
    assert 20 <= len(warm) <= 104
    for key, wgsl in warm.items():
        gpu._pipeline(Dispatch(key, wgsl, (), b"", (1, 1, 1)))
    fresh = WgpuNativeBackend(gpu.device, limits)
    previous = runtime._state["backend"]
    runtime._state["backend"] = fresh
    try:
        x, y = workloads.synthetic_images(8, size=8, seed=0)
        model = workloads.small_cnn(size=8, seed=0)
        asyncio.run(model.fit(x, y, epochs=1, batch_size=4))
    finally:
        runtime._state["backend"] = previous
    assert set(fresh.pipelines) <= set(warm), sorted(set(fresh.pipelines) - set(warm))


BROADCASTS = [((), (4, 3)), ((1, 3), (4, 3)), ((4, 1), (4, 3)), ((2, 1, 5), (1, 3, 1))]


@pytest.mark.parametrize(("a_shape", "b_shape"), BROADCASTS)
def test_broadcasting_reads_views_without_copies(
    a_shape: tuple[int, ...], b_shape: tuple[int, ...], active_gpu: WgpuNativeBackend
) -> None:
    """reshape aliases and expand is a view read in place by the elementwise kernel: a broadcast
    add or where is one dispatch, and equals numpy."""
    a, b = normal(*a_shape, seed=1), normal(*b_shape, seed=2)
    with pib.tidy():
        ta, tb = pib.tensor(a), pib.tensor(b)
        before = active_gpu.dispatch_count
        total = ta + tb
        assert active_gpu.dispatch_count == before + 1
        picked = pib.where(ta > 0.0, ta, tb)
        got_total, got_picked = asyncio.run(total.numpy()), asyncio.run(picked.numpy())
        flat = asyncio.run(pib.reshape(pib.broadcast_to(ta, total.shape), (-1,)).numpy())
    assert relative_error(got_total, a + b) <= RTOL
    assert relative_error(got_picked, np.where(a > 0, a, b)) <= RTOL
    np.testing.assert_array_equal(flat, np.broadcast_to(a, (a + b).shape).reshape(-1))


def test_fused_program_is_one_dispatch_and_takes_any_input(active_gpu: WgpuNativeBackend) -> None:
    """A fused program over dense inputs is one dispatch, and so over a broadcast view (read in
    place by a strided walk); an input the program never reads still binds; inf and NaN
    constants (no WGSL constant expression may be non-finite) come out exactly."""
    a, b, flags = normal(4, 3, seed=1), normal(1, 3, seed=2), np.arange(12).reshape(4, 3) > 5
    inf, nan = float("inf"), float("nan")

    def program(x: fusion.Value, y: fusion.Value, unused: fusion.Value) -> fusion.Value:
        big = fusion.maximum(x * inf, -inf)
        return fusion.where(fusion.less(x, y), big, fusion.where(fusion.less(x, 0.0), nan, y))

    wide = np.broadcast_to(b, a.shape)
    want = np.where(a < wide, a * np.float32(inf), np.where(a < 0, np.float32(nan), wide))
    with pib.tidy():
        ta, tb, tflags = pib.tensor(a), pib.tensor(b), pib.tensor(flags, dtype=None)
        dense = pib.tensor(wide)
        before = active_gpu.dispatch_count
        got_dense = pib.fused(program, ta, dense, tflags)
        assert active_gpu.dispatch_count == before + 1
        got_view = pib.fused(program, ta, pib.broadcast_to(tb, a.shape), tflags)
        assert active_gpu.dispatch_count == before + 2
        column = pib.fused(lambda x, c: x * c, ta, pib.broadcast_to(ta[:, 0:1], a.shape))
        step = pib.fused(lambda t: t + 1.0, pib.tensor(2.0))
        np.testing.assert_array_equal(asyncio.run(got_dense.numpy()), want)
        np.testing.assert_array_equal(asyncio.run(got_view.numpy()), want)
        assert asyncio.run(step.numpy()).tolist() == 3.0
        np.testing.assert_array_equal(asyncio.run(column.numpy()), a * a[:, 0:1])


def test_fused_kernels_are_keyed_by_their_structure_with_constants_in_params() -> None:
    """The runtime caches pipelines by key (equal key, equal WGSL). Constants travel in the
    params, so programs differing only in a constant (an optimizer's learning rate) share one
    compiled kernel, while their params carry each constant's exact bits (0.0 vs -0.0)."""
    spec = OutSpec((4,), "float32", ((4,),), ("float32",))

    def dispatch(c: float) -> Dispatch:
        program = fusion.trace(lambda x: x * c, 1)
        return kernels.plan("fused", {"program": program}, spec).dispatches[0]

    zero, negative, other = dispatch(0.0), dispatch(-0.0), dispatch(0.5)
    assert zero.key == negative.key == other.key and zero.wgsl == other.wgsl
    assert len({zero.params, negative.params, other.params}) == 3
    square = kernels.plan("fused", {"program": fusion.trace(lambda x: x * x, 1)}, spec)
    assert square.dispatches[0].key != zero.key


def _group_inputs(group: fusion.Group, count: int, gate: bool) -> dict[Any, np.ndarray]:
    """Arrays for a registered group's named inputs, by their registered kinds: full ones of
    `count` elements (the gradient with NaN and infinities), scalars, the gate."""
    kinds_of = dict(fusion.common_programs())
    rng = np.random.default_rng(3)
    arrays: dict[Any, np.ndarray] = {}
    for program, names in group:
        for name, kind in zip(names, kinds_of[program], strict=True):
            if kind == "gate":
                arrays[name] = np.array(gate)
            elif kind == "scalar":
                arrays[name] = np.array(rng.uniform(0.05, 3.0), dtype=np.float32)
            else:
                full = rng.normal(size=count).astype(np.float32)
                arrays[name] = np.abs(full) if name in ("v", "rms") else full
    for name in ("grad",):
        if name in arrays and arrays[name].shape:
            arrays[name][:3] = (np.nan, np.inf, -np.inf)
    return arrays


@pytest.mark.parametrize("gate", [True, False])
def test_an_optimizers_rules_as_one_group_kernel_match_their_own_kernels(
    gpu: WgpuNativeBackend, gate: bool
) -> None:
    """Each registered group (an optimizer's rules for one variable, its step rules) that fits
    10 storage bindings (SwiftShader's) runs as one dispatch with an output per rule, and gives
    what each rule's own kernel gives (to a rounding: a compiler may contract a multiply-add
    in one kernel and not the other), NaN and infinities included, with the finite-step gate
    open and shut; count 1003 leaves a tail of a vec4 stride. The default Adam's is one."""
    limits = DeviceLimits(max_storage_buffers=10)
    grouped = 0
    for group in fusion.common_groups():
        distinct, reads = fused.shared_inputs([names for _, names in group])
        if len(distinct) + len(group) > limits.max_storage_buffers:
            continue
        arrays = _group_inputs(group, 1003, gate)
        shape = next((a.shape for a in arrays.values() if a.shape), ())
        handles = {name: gpu.upload(np.asarray(arrays[name])) for name in distinct}
        plan = fused.plan_fused_group(
            [program for program, _ in group],
            reads,
            [handles[n].dtype for n in distinct],
            [handles[n].shape == () for n in distinct],
            int(np.prod(shape)),
            limits,
        )
        assert len(plan.dispatches) == 1
        outputs = gpu.execute(
            plan, [handles[n] for n in distinct], [(shape, "float32")] * len(group)
        )
        for (program, names), output in zip(group, outputs, strict=True):
            inputs = [handles[n] for n in names]
            spec = OutSpec(
                shape, "float32", tuple(h.shape for h in inputs), tuple(h.dtype for h in inputs)
            )
            alone = gpu._execute(
                kernels.plan("fused", {"program": program}, spec, limits), inputs, shape, "float32"
            )
            want = asyncio.run(gpu.download(alone))
            # One rounding apart at most: a compiler may contract a*b+c differently per kernel.
            got = asyncio.run(gpu.download(output))
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
        grouped += 1
    assert grouped >= 4  # Adam's, AdamW's and their step rules at least
    adam = fused_runs.warmup_kernels(limits, typical=True)
    assert any(key.startswith("fused_group:7>3:") for key, _ in adam)  # w, m, v in one kernel


# ---- elementwise numerics ---------------------------------------------------------------------


def test_special_values_follow_numpy(gpu: WgpuNativeBackend) -> None:
    x = np.array([0.0, -1.0, 100.0, -100.0, 50.0, -50.0, np.nan, 1.0], dtype=np.float32)
    with np.errstate(all="ignore"):
        for op, want in [
            ("exp", np.exp(x)),
            ("log", np.log(x)),
            ("sqrt", np.sqrt(x)),
            ("tanh", np.tanh(x)),
            ("relu", np.maximum(x, 0)),
            ("neg", -x),
        ]:
            got = run_primitive(gpu, op, [x])
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7, err_msg=op)
        sig = run_primitive(gpu, "sigmoid", [x[x == x]])
        np.testing.assert_allclose(sig, 1 / (1 + np.exp(-x[x == x])), rtol=1e-6, atol=1e-7)


def test_pow_handles_negative_and_zero_bases(gpu: WgpuNativeBackend) -> None:
    base = np.array([-2.0, -2.0, -2.0, -8.0, 0.0, 0.0, 0.0, 3.0, np.nan, 1.0], dtype=np.float32)
    expo = np.array([2.0, 3.0, 0.5, -1.0, 2.0, 0.0, -1.0, 0.0, 0.0, np.nan], dtype=np.float32)
    with np.errstate(all="ignore"):
        want = np.power(base, expo)
    np.testing.assert_allclose(run_primitive(gpu, "pow", [base, expo]), want, rtol=1e-6)


def test_maximum_and_reduce_max_propagate_nan(gpu: WgpuNativeBackend) -> None:
    a = np.array([1.0, np.nan, 3.0, -np.inf], dtype=np.float32)
    b = np.array([np.nan, 2.0, 1.0, -5.0], dtype=np.float32)
    np.testing.assert_array_equal(run_primitive(gpu, "maximum", [a, b]), np.maximum(a, b))
    for op in ("less", "less_equal", "equal", "not_equal"):
        assert_matches_cpu(gpu, op, [a, b])
    rows = np.array([[1.0, np.nan, 2.0], [3.0, 1.0, -1.0]], dtype=np.float32)
    got = run_primitive(gpu, "reduce_max", [rows], axes=(1,), keepdims=False)
    np.testing.assert_array_equal(got, np.max(rows, axis=1))
    assert run_primitive(gpu, "argmax", [rows], axis=1).tolist() == [1, 0]


def test_integer_bool_and_cast_kernels(gpu: WgpuNativeBackend) -> None:
    i = np.array([[-7, 3, 0], [5, -2, 9]], dtype=np.int32)
    j = np.array([[2, 3, -1], [5, 4, -9]], dtype=np.int32)
    for op in ("add", "sub", "mul", "maximum"):
        assert_matches_cpu(gpu, op, [i, j])
    for op in ("neg", "relu"):
        assert_matches_cpu(gpu, op, [i])
    for op in ("less", "less_equal", "equal", "not_equal"):
        assert_matches_cpu(gpu, op, [i, j])
        assert_matches_cpu(gpu, op, [i > 0, j > 0])
    assert_matches_cpu(gpu, "where", [i > 0, i, j])
    assert_matches_cpu(gpu, "reduce_sum", [i], axes=(0,), keepdims=True)
    assert_matches_cpu(gpu, "reduce_max", [i], axes=(0, 1), keepdims=False)
    f = np.array([-2.7, -0.5, 0.0, 0.5, 2.7, np.nan], dtype=np.float32)
    for dtype in ("int32", "bool", "float32"):
        want = f[:5].astype(dtype)
        assert np.array_equal(run_primitive(gpu, "cast", [f[:5]], dtype=dtype), want), dtype
    assert run_primitive(gpu, "cast", [f], dtype="bool")[-1]  # NaN is truthy, as in numpy
    flags = np.array([True, False, True])
    for dtype in ("int32", "float32"):
        assert_matches_cpu(gpu, "cast", [flags], dtype=dtype)
    assert_matches_cpu(gpu, "argmax", [flags], axis=0)


# ---- layout -----------------------------------------------------------------------------------


def test_layout_kernels_match_cpu(gpu: WgpuNativeBackend) -> None:
    x = normal(2, 3, 4, 5)
    assert_matches_cpu(gpu, "transpose", [x], perm=(3, 1, 0, 2))
    assert_matches_cpu(
        gpu, "transpose", [normal(2, 1, 2, 3, 1, 2, 2, 3, 2)], perm=tuple(range(9))[::-1]
    )
    assert_matches_cpu(gpu, "slice", [x], begin=(1, 0, 2, 1), size=(1, 3, 2, 3))
    assert_matches_cpu(gpu, "pad", [x], paddings=((0, 1), (2, 0), (1, 1), (0, 0)), value=-1.5)
    assert_matches_cpu(
        gpu, "pad", [np.arange(6, dtype=np.int32).reshape(2, 3)], paddings=((1, 1), (0, 2)), value=7
    )
    assert_matches_cpu(gpu, "expand", [normal(1, 3, 1)], shape=(4, 3, 5))
    assert_matches_cpu(gpu, "expand", [np.array([[True], [False]])], shape=(2, 3))
    assert_matches_cpu(gpu, "reshape", [x], shape=(6, 20))
    parts = [normal(2, k, 3, seed=k) for k in (1, 4, 2)]
    assert_matches_cpu(gpu, "concat", parts, axis=1)
    assert_matches_cpu(gpu, "concat", [normal(0, 3), normal(2, 3)], axis=0)


# ---- reductions -------------------------------------------------------------------------------


def test_reductions_over_any_axes(gpu: WgpuNativeBackend) -> None:
    x = normal(3, 4, 5, 6)
    for axes in [(0,), (1, 3), (0, 2), (0, 1, 2, 3), (2,)]:
        for keepdims in (False, True):
            assert_matches_cpu(gpu, "reduce_sum", [x], axes=axes, keepdims=keepdims)
            assert_matches_cpu(gpu, "reduce_max", [x], axes=axes, keepdims=keepdims)
    for axis in range(4):
        assert_matches_cpu(gpu, "argmax", [x], axis=axis)
    ties = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]], dtype=np.float32)
    assert run_primitive(gpu, "argmax", [ties], axis=1).tolist() == [1, 0]


def test_long_reductions_take_two_passes(gpu: WgpuNativeBackend) -> None:
    x = normal(3, 50_000)
    spec = OutSpec((3,), "float32", (x.shape,), ("float32",))
    plan = kernels.plan("reduce_sum", {"axes": (1,), "keepdims": False}, spec)
    assert len(plan.dispatches) == 2 and plan.scratch_bytes
    assert_matches_cpu(gpu, "reduce_sum", [x], axes=(1,), keepdims=False)
    assert_matches_cpu(gpu, "reduce_max", [x], axes=(1,), keepdims=True)
    assert_matches_cpu(gpu, "argmax", [x], axis=1)
    assert_matches_cpu(gpu, "reduce_sum", [normal(200, 300)], axes=(0, 1), keepdims=False)


# ---- matmul and convolution -------------------------------------------------------------------


@pytest.mark.parametrize(
    "a_shape, b_shape",
    [
        ((1, 1), (1, 1)),
        ((17, 33), (33, 5)),
        ((3, 17, 33), (3, 33, 5)),
        ((2, 2, 40, 70), (2, 2, 70, 33)),
        # One case per specialised tile shape: 64x16, 16x64, 8x128 (128x8 and 32x32 above).
        ((50, 20), (20, 12)),
        ((12, 9), (9, 20)),
        ((5, 40), (40, 130)),
    ],
)
def test_matmul_odd_shapes_and_transposes(gpu: WgpuNativeBackend, a_shape, b_shape) -> None:
    a, b = normal(*a_shape, seed=1), normal(*b_shape, seed=2)
    for ta in (False, True):
        for tb in (False, True):
            left = np.swapaxes(a, -1, -2).copy() if ta else a
            right = np.swapaxes(b, -1, -2).copy() if tb else b
            assert_matches_cpu(gpu, "matmul", [left, right], transpose_a=ta, transpose_b=tb)


def test_matmul_long_k_uses_split_k(gpu: WgpuNativeBackend) -> None:
    a, b = normal(5, 6000, seed=3), normal(6000, 3, seed=4)
    spec = OutSpec((5, 3), "float32", (a.shape, b.shape), ("float32", "float32"))
    plan = kernels.plan("matmul", {"transpose_a": False, "transpose_b": False}, spec)
    assert len(plan.dispatches) == 2 and plan.scratch_bytes
    assert_matches_cpu(gpu, "matmul", [a, b], transpose_a=False, transpose_b=False)


@pytest.mark.parametrize(
    "a_shape, b_shape",
    [
        ((64, 64), (64, 64)),  # full tiles only
        ((33, 36), (36, 68)),  # edge tiles in M and N, K shorter than a slab
        ((2, 70, 20), (2, 20, 132)),  # batched, edges everywhere
        ((40, 1028), (1028, 72)),  # K not a multiple of the 32-wide slab
    ],
)
def test_vec4_gemm_for_aligned_row_major_operands(gpu: WgpuNativeBackend, a_shape, b_shape) -> None:
    a, b = normal(*a_shape, seed=11), normal(*b_shape, seed=12)
    attrs = {"transpose_a": False, "transpose_b": False}
    spec = OutSpec((*a_shape[:-1], b_shape[-1]), "float32", (a_shape, b_shape), ("float32",) * 2)
    (only,) = kernels.plan("matmul", attrs, spec).dispatches
    assert only.key.startswith("gemm_vec4:")
    assert_matches_cpu(gpu, "matmul", [a, b], **attrs)
    # A transposed B or unaligned operands keep the scalar kernel.
    (other,) = kernels.plan("matmul", {**attrs, "transpose_b": True}, spec).dispatches
    assert other.key.startswith("gemm:")
    unaligned = OutSpec((33, 66), "float32", ((33, 36), (36, 66)), ("float32",) * 2)
    assert kernels.plan("matmul", attrs, unaligned).dispatches[0].key.startswith("gemm:")


@pytest.mark.parametrize(
    "a_stored, b_shape",
    [
        ((64, 784), (64, 128)),  # a dense layer's weight gradient x^T g: full tiles
        ((20, 36), (20, 68)),  # edge tiles in M and N, K shorter than a slab
        ((2, 40, 44), (2, 40, 64)),  # batched, K not a multiple of the slab
        ((5000, 32), (5000, 64)),  # few tiles, long K: split-K
    ],
)
def test_vec4_gemm_with_a_transposed(gpu: WgpuNativeBackend, a_stored, b_shape) -> None:
    """A^T @ B with A stored K x M reads A as vec4s along M (the scalar kernel was 3x slower)."""
    a, b = normal(*a_stored, seed=17), normal(*b_shape, seed=18)
    attrs = {"transpose_a": True, "transpose_b": False}
    m = a_stored[-1]
    spec = OutSpec(
        (*a_stored[:-2], m, b_shape[-1]), "float32", (a.shape, b.shape), ("float32",) * 2
    )
    assert kernels.plan("matmul", attrs, spec).dispatches[0].key == "gemm_vec4:4x2:ta"
    assert_matches_cpu(gpu, "matmul", [a, b], **attrs)
    # Fewer than 32 rows of C, or rows not whole vec4s: the scalar kernel.
    for stored in ((16, 28), (16, 34)):
        narrow = OutSpec((stored[1], 64), "float32", (stored, (16, 64)), ("float32",) * 2)
        assert kernels.plan("matmul", attrs, narrow).dispatches[0].key.startswith("gemm:")


def test_vec4_gemm_of_few_rows_splits_long_k(gpu: WgpuNativeBackend) -> None:
    # A dense layer at batch 2 (8x64 tiles, 1 row per invocation) and a short-K few-row case.
    attrs = {"transpose_a": False, "transpose_b": False}
    a, b = normal(2, 8192, seed=15), normal(8192, 64, seed=16)
    spec = OutSpec((2, 64), "float32", (a.shape, b.shape), ("float32",) * 2)
    product, _sum = kernels.plan("matmul", attrs, spec).dispatches
    assert product.key == "gemm_vec4:1x2"
    assert_matches_cpu(gpu, "matmul", [a, b], **attrs)
    assert_matches_cpu(gpu, "matmul", [normal(5, 40), normal(40, 132)], **attrs)


@pytest.mark.parametrize(
    "a_shape, b_shape, transpose_a",
    [
        ((1, 8192), (8192, 64), False),  # I3's first dense layer at batch 1
        ((1, 64), (64, 4), False),  # its last: fewer columns than a workgroup covers
        ((3, 1, 20), (3, 20, 12), False),  # batched, K shorter than the lanes
        ((2, 36, 1), (2, 36, 132), True),  # A transposed: one column is the same vector
    ],
)
def test_gemv_for_one_row_of_c(gpu: WgpuNativeBackend, a_shape, b_shape, transpose_a) -> None:
    """One row of C is one dispatch of gemv.wgsl (K split across the workgroup), no split-K."""
    a, b = normal(*a_shape, seed=19), normal(*b_shape, seed=20)
    attrs = {"transpose_a": transpose_a, "transpose_b": False}
    spec = OutSpec((*a_shape[:-2], 1, b_shape[-1]), "float32", (a_shape, b_shape), ("float32",) * 2)
    (only,) = kernels.plan("matmul", attrs, spec).dispatches
    assert only.key.startswith("gemv:")
    assert_matches_cpu(gpu, "matmul", [a, b], **attrs)
    # A software adapter sums more columns per workgroup over fewer lanes of K.
    capped = WgpuNativeBackend(gpu.device, DeviceLimits(resident_workgroups=3))
    (software,) = kernels.plan("matmul", attrs, spec, capped.device_limits).dispatches
    assert (only.key, software.key) == (f"gemv:{linalg.GEMV_COLS4}", "gemv:8")
    assert_matches_cpu(capped, "matmul", [a, b], **attrs)
    # A transposed B or unaligned K keep the tiled kernels.
    flipped = np.swapaxes(b, -1, -2).copy()
    assert_matches_cpu(gpu, "matmul", [a, flipped], transpose_a=transpose_a, transpose_b=True)


def test_vec4_gemm_of_a_large_square_product(gpu: WgpuNativeBackend) -> None:
    a, b = normal(256, 256, seed=13), normal(256, 256, seed=14)
    assert_matches_cpu(gpu, "matmul", [a, b], transpose_a=False, transpose_b=False)


def test_gemms_with_fewer_workgroups_than_tiles_loop_over_them(gpu: WgpuNativeBackend) -> None:
    """A software adapter launches at most resident_workgroups GEMM workgroups, each looping
    over tiles, and takes gemm_direct.wgsl or, for vec4-aligned operands, gemm_direct_vec4.wgsl
    (no workgroup memory): every GEMM form (plain and A-transposed products, odd shapes,
    split-K, convolutions) still computes every tile."""
    capped = WgpuNativeBackend(gpu.device, DeviceLimits(resident_workgroups=3))
    plain = {"transpose_a": False, "transpose_b": False}
    spec = OutSpec((96, 128), "float32", ((96, 64), (64, 128)), ("float32",) * 2)
    (product,) = kernels.plan("matmul", plain, spec, capped.device_limits).dispatches
    assert product.workgroups == (3, 1, 1)
    assert product.key == "gemm_direct_vec4:2"
    assert_matches_cpu(capped, "matmul", [normal(96, 64), normal(64, 128, seed=1)], **plain)
    # vec4 operands with edge tiles (rows and columns past C), and split-K over a long K.
    assert_matches_cpu(capped, "matmul", [normal(37, 84), normal(84, 72, seed=7)], **plain)
    assert_matches_cpu(capped, "matmul", [normal(8, 4100), normal(4100, 64, seed=8)], **plain)
    narrow = OutSpec((2, 33, 7), "float32", ((2, 33, 20), (2, 20, 7)), ("float32",) * 2)
    (scalar,) = kernels.plan("matmul", plain, narrow, capped.device_limits).dispatches
    assert scalar.key.startswith("gemm_direct:")
    assert_matches_cpu(capped, "matmul", [normal(2, 33, 20), normal(2, 20, 7, seed=2)], **plain)
    assert_matches_cpu(capped, "matmul", [normal(5, 6000), normal(6000, 3, seed=3)], **plain)
    for m, n in ((4, 70), (12, 70), (40, 12)):  # gemm_direct's 8x128, 16x64 and 64x16 tiles
        assert_matches_cpu(capped, "matmul", [normal(m, 20), normal(20, n, seed=m)], **plain)
    transposed = {"transpose_a": True, "transpose_b": False}
    assert_matches_cpu(capped, "matmul", [normal(64, 96), normal(64, 128, seed=4)], **transposed)
    assert_matches_cpu(capped, "matmul", [normal(84, 36), normal(84, 72, seed=9)], **transposed)
    # 6 output channels: not whole vec4s, so conv2d is the implicit GEMM too.
    x, w = normal(2, 9, 9, 3, seed=5), normal(3, 3, 3, 6, seed=6)
    geo = {"strides": (1, 1), "pads": ((1, 1), (1, 1))}
    assert_matches_cpu(capped, "conv2d", [x, w], **geo)
    y = run_primitive(CPU, "conv2d", [x, w], **geo)
    assert_matches_cpu(capped, "conv2d_backprop_filter", [x, y], filter_shape=w.shape, **geo)
    assert_matches_cpu(capped, "conv2d_backprop_input", [y, w], input_shape=x.shape, **geo)


CONV_GEOMETRIES = [
    # (input NHWC, filter HWIO, strides, pads): valid, same, strided same, asymmetric pads.
    ((2, 5, 6, 2), (3, 3, 2, 3), (1, 1), ((0, 0), (0, 0))),
    ((1, 5, 5, 2), (3, 3, 2, 2), (1, 1), ((1, 1), (1, 1))),
    ((1, 6, 7, 2), (3, 2, 2, 3), (2, 2), ((1, 1), (0, 1))),
    ((1, 7, 7, 1), (3, 3, 1, 2), (2, 1), ((0, 0), (0, 0))),
    ((2, 9, 8, 3), (5, 3, 3, 4), (3, 2), ((2, 1), (0, 2))),
]


@pytest.mark.parametrize("x_shape, w_shape, strides, pads", CONV_GEOMETRIES)
def test_conv2d_and_gradients_match_cpu(
    gpu: WgpuNativeBackend, x_shape, w_shape, strides, pads
) -> None:
    x, w = normal(*x_shape, seed=5), normal(*w_shape, seed=6)
    geo = {"strides": strides, "pads": pads}
    assert_matches_cpu(gpu, "conv2d", [x, w], **geo)
    y_shape, _ = ops.infer("conv2d", [x.shape, w.shape], ["float32"] * 2, geo)
    g = normal(*y_shape, seed=7)
    for adapter in (gpu, WgpuNativeBackend(gpu.device, SOFTWARE)):  # gemm.wgsl, gemm_direct.wgsl
        assert_matches_cpu(adapter, "conv2d_backprop_input", [g, w], input_shape=x.shape, **geo)
        assert_matches_cpu(adapter, "conv2d_backprop_filter", [x, g], filter_shape=w.shape, **geo)


@pytest.mark.parametrize(
    "x_shape, w_shape, strides, pads",
    [
        ((2, 9, 8, 3), (3, 3, 3, 20), (1, 1), ((1, 1), (1, 1))),  # RGB, 5 vec4s: a partial group
        ((1, 7, 6, 1), (3, 2, 1, 8), (2, 1), ((0, 1), (1, 0))),  # strided, asymmetric pads
        ((1, 5, 5, 4), (1, 1, 4, 4), (1, 1), ((0, 0), (0, 0))),  # 1x1 filters
        ((2, 6, 6, 16), (3, 3, 16, 32), (1, 1), ((1, 1), (1, 1))),  # a small CNN's second layer
    ],
)
def test_conv2d_of_few_input_channels_is_direct(
    gpu: WgpuNativeBackend, x_shape, w_shape, strides, pads
) -> None:
    """conv2d of few input channels (up to 16) with output channels in whole vec4s runs on
    conv_direct.wgsl, a few pixels of a row per invocation; more input channels keep the
    implicit GEMM."""
    x, w = normal(*x_shape, seed=21), normal(*w_shape, seed=22)
    geo = {"strides": strides, "pads": pads}
    y_shape, _ = ops.infer("conv2d", [x.shape, w.shape], ["float32"] * 2, geo)
    spec = OutSpec(y_shape, "float32", (x.shape, w.shape), ("float32",) * 2)
    (only,) = kernels.plan("conv2d", geo, spec).dispatches
    assert only.key.startswith("conv_direct:")
    assert_matches_cpu(gpu, "conv2d", [x, w], **geo)
    wide = OutSpec((1, 5, 5, 4), "float32", ((1, 5, 5, 32), (1, 1, 32, 4)), ("float32",) * 2)
    assert kernels.plan("conv2d", geo, wide).dispatches[0].key.startswith("gemm:")


@pytest.mark.parametrize("epilogue", ["bias", "relu", "bias_relu"])
def test_conv_direct_applies_a_layers_bias_and_relu_as_it_stores(
    gpu: WgpuNativeBackend, epilogue: str
) -> None:
    """conv2d with its layer's bias add and/or relu applied in conv_direct.wgsl's stores gives
    the bits of conv2d, then the add kernel with the bias row, then the relu kernel: NaN and
    infinities in the input and the bias pass as there (relu keeps NaN), and 12 output
    channels leave the second vec4 group of each pixel half full (its bias read per vec4)."""
    x = normal(2, 7, 6, 3, seed=31)
    x[0, 1, 2, 0], x[1, 3, 3, 1] = np.nan, np.inf
    w, bias = normal(3, 3, 3, 12, seed=32), normal(12, seed=33)
    bias[5] = -np.inf
    geo = {"strides": (1, 1), "pads": ((1, 1), (1, 1))}
    spec = OutSpec((2, 7, 6, 12), "float32", (x.shape, w.shape), ("float32",) * 2)
    plan = kernels.plan("conv2d", {**geo, "epilogue": epilogue}, spec)
    assert len(plan.dispatches) == 1 and plan.dispatches[0].key.endswith(f":{epilogue}")
    handles = [gpu.upload(a) for a in (x, w, bias)]
    (out,) = gpu.execute(plan, handles, [(spec.shape, "float32")])
    got = asyncio.run(gpu.download(out))
    want = gpu.run("conv2d", handles[:2], geo, spec)
    if epilogue.startswith("bias"):
        row = gpu.run(
            "reshape",
            [handles[2]],
            {"shape": (1, 1, 1, 12)},
            OutSpec((1, 1, 1, 12), "float32", ((12,),), ("float32",)),
        )
        row = gpu.run(
            "expand",
            [row],
            {"shape": spec.shape},
            OutSpec(spec.shape, "float32", ((1, 1, 1, 12),), ("float32",)),
        )
        want = gpu.run(
            "add",
            [want, row],
            {},
            OutSpec(spec.shape, "float32", (spec.shape,) * 2, ("float32",) * 2),
        )
    if epilogue.endswith("relu"):
        want = gpu.run(
            "relu", [want], {}, OutSpec(spec.shape, "float32", (spec.shape,), ("float32",))
        )
    expected = asyncio.run(gpu.download(want))
    assert np.isnan(expected).any() and (expected == 0).any() == epilogue.endswith("relu")
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))
    wide = OutSpec((1, 5, 5, 4), "float32", ((1, 5, 5, 32), (1, 1, 32, 4)), ("float32",) * 2)
    assert not linalg.takes_epilogue(wide)  # an implicit GEMM
    with pytest.raises(ValueError, match="epilogue"):
        kernels.plan("conv2d", {**geo, "epilogue": epilogue}, wide)


@pytest.mark.parametrize(
    "x_shape, w_shape, pads",
    [
        ((2, 6, 6, 16), (3, 3, 16, 32), ((1, 1), (1, 1))),  # W3s's second layer, same padding
        ((1, 7, 5, 12), (3, 2, 12, 5), ((0, 2), (1, 0))),  # a partial vec4 group, asymmetric
        ((2, 5, 9, 4), (2, 3, 4, 3), ((0, 0), (0, 0))),  # valid
    ],
)
def test_an_input_gradient_at_stride_1_is_direct_on_a_software_adapter(
    gpu: WgpuNativeBackend, x_shape, w_shape, pads
) -> None:
    """On a software adapter conv2d_backprop_input at stride 1 (input channels in whole vec4s,
    output gradients of at most 32 channels) convolves the output gradient by the flipped
    filters (conv_direct.wgsl) instead of the im2col GEMM; strided, it stays the GEMM."""
    x, w = normal(*x_shape, seed=25), normal(*w_shape, seed=26)
    geo = {"strides": (1, 1), "pads": pads}
    gy = run_primitive(CPU, "conv2d", [x, w], **geo)
    spec = OutSpec(x_shape, "float32", (gy.shape, w_shape), ("float32",) * 2)
    attrs = {"input_shape": x_shape, **geo}
    key = kernels.plan("conv2d_backprop_input", attrs, spec, SOFTWARE).dispatches[0].key
    assert key.endswith(":input_grad")
    software = WgpuNativeBackend(gpu.device, SOFTWARE)
    assert_matches_cpu(software, "conv2d_backprop_input", [gy, w], **attrs)
    strided = {**attrs, "strides": (2, 1)}
    gy = run_primitive(CPU, "conv2d", [x, w], strides=(2, 1), pads=pads)
    spec = OutSpec(x_shape, "float32", (gy.shape, w_shape), ("float32",) * 2)
    assert (
        "gemm" in kernels.plan("conv2d_backprop_input", strided, spec, SOFTWARE).dispatches[0].key
    )
    assert_matches_cpu(software, "conv2d_backprop_input", [gy, w], **strided)


@pytest.mark.parametrize(
    "x_shape, w_shape, strides, pads, dispatches",
    [
        ((8, 32, 32, 3), (3, 3, 3, 16), (1, 1), ((1, 1), (1, 1)), 2),  # W3s's first layer
        ((2, 6, 6, 16), (3, 3, 16, 32), (1, 1), ((1, 1), (1, 1)), 1),  # one slice of pixels
        ((1, 9, 7, 6), (3, 2, 6, 12), (2, 3), ((0, 2), (1, 0)), 1),  # strided, asymmetric pads
    ],
)
def test_a_filter_gradient_is_summed_per_tap_on_a_software_adapter(
    gpu: WgpuNativeBackend, x_shape, w_shape, strides, pads, dispatches
) -> None:
    """On a software adapter conv2d_backprop_filter (output channels in whole vec4s) sums each
    tap's products over slices of the output pixels (conv_filter_grad.wgsl), then the slices'
    partials: the cpu backend's im2col product, within float32 rounding."""
    x = normal(*x_shape, seed=27)
    geo = {"strides": strides, "pads": pads}
    gy_shape, _ = ops.infer("conv2d", [x_shape, w_shape], ["float32"] * 2, geo)
    gy = normal(*gy_shape, seed=28)
    attrs = {"filter_shape": w_shape, **geo}
    spec = OutSpec(w_shape, "float32", (x_shape, gy_shape), ("float32",) * 2)
    plan = kernels.plan("conv2d_backprop_filter", attrs, spec, SOFTWARE).dispatches
    assert plan[0].key.startswith("conv_filter_grad:") and len(plan) == dispatches
    software = WgpuNativeBackend(gpu.device, SOFTWARE)
    assert_matches_cpu(software, "conv2d_backprop_filter", [x, gy], **attrs)


def test_a_large_filter_gradient_keeps_its_slices_partials_small() -> None:
    """A 3x3 256 -> 256 layer over 32 images of 56x56 pixels (196 slices of 512 pixels) sums
    in as many slices as keep their partials within SLICES_MAX_FLOATS (7)."""
    x_shape, w_shape, gy_shape = (32, 56, 56, 256), (3, 3, 256, 256), (32, 56, 56, 256)
    attrs = {"filter_shape": w_shape, "strides": (1, 1), "pads": ((1, 1), (1, 1))}
    spec = OutSpec(w_shape, "float32", (x_shape, gy_shape), ("float32",) * 2)
    plan = kernels.plan("conv2d_backprop_filter", attrs, spec, SOFTWARE)
    assert plan.scratch_bytes and plan.scratch_bytes[0] <= filter_grad.SLICES_MAX_FLOATS * 4


@pytest.mark.parametrize(
    "shape, axes, dispatches",
    [
        ((8192, 16), (0,), 2),  # W3s's first bias gradient: 32 slices, then their sum
        ((2, 3, 12), (0, 1), 1),  # two leading axes, one slice
        ((300, 8), (0,), 2),  # a short last slice
    ],
)
def test_a_sum_over_leading_axes_adds_columns_down_on_a_software_adapter(
    gpu: WgpuNativeBackend, shape, axes, dispatches
) -> None:
    """On a software adapter reduce_sum over leading axes with columns in whole vec4s (bias
    gradients) adds each vec4 of columns down slices of the rows (column_sums.wgsl), then the
    slices' sums; NaN and infinities flow as in numpy."""
    x = normal(*shape, seed=29)
    x.reshape(-1)[[5, 40, 61]] = [np.nan, np.inf, -np.inf]
    spec = OutSpec(shape[len(axes) :], "float32", (shape,), ("float32",))
    attrs = {"axes": axes, "keepdims": False}
    plan = kernels.plan("reduce_sum", attrs, spec, SOFTWARE).dispatches
    assert plan[0].key == "column_sums" and len(plan) == dispatches
    got = run_primitive(WgpuNativeBackend(gpu.device, SOFTWARE), "reduce_sum", [x], **attrs)
    want = x.astype(np.float64).sum(axis=axes)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    assert kernels.plan("reduce_sum", attrs, spec).dispatches[0].key.startswith("reduce_")


@pytest.mark.parametrize(
    "limits, key",
    [(DeviceLimits(), "gemm_vec4:"), (SOFTWARE, "gemm_direct_vec4:")],
)
def test_a_pointwise_conv2d_is_the_vec4_product(
    gpu: WgpuNativeBackend, limits: DeviceLimits, key: str
) -> None:
    """A 1x1 filter at stride 1 without padding (a MobileNet's or the hand model's pointwise
    layers) is pixels x channels @ filters: row-major operands, so the vec4 products; padded or
    strided, it stays the implicit GEMM."""
    x, w = normal(2, 6, 5, 24, seed=23), normal(1, 1, 24, 64, seed=24)
    geo = {"strides": (1, 1), "pads": ((0, 0), (0, 0))}
    spec = OutSpec((2, 6, 5, 64), "float32", (x.shape, w.shape), ("float32",) * 2)
    assert kernels.plan("conv2d", geo, spec, limits).dispatches[0].key.startswith(key)
    assert_matches_cpu(WgpuNativeBackend(gpu.device, limits), "conv2d", [x, w], **geo)
    for other in ({"strides": (2, 1), "pads": geo["pads"]}, {**geo, "pads": ((0, 1), (0, 0))}):
        y_shape, _ = ops.infer("conv2d", [x.shape, w.shape], ["float32"] * 2, other)
        spec = OutSpec(y_shape, "float32", (x.shape, w.shape), ("float32",) * 2)
        assert "im2col_a" in kernels.plan("conv2d", other, spec, limits).dispatches[0].key


@pytest.mark.parametrize(
    "x_shape, w_shape, strides, pads, key",
    [
        # The hand model's layers: 4 output pixels per invocation (a partial last group here).
        ((1, 28, 26, 96), (5, 5, 96, 1), (2, 2), ((1, 2), (1, 2)), "depthwise_cols:5x2"),
        ((2, 9, 7, 24), (3, 3, 24, 1), (1, 1), ((1, 1), (1, 1)), "depthwise_cols:3x1"),
        ((1, 7, 9, 8), (2, 7, 8, 1), (3, 1), ((0, 2), (4, 1)), "depthwise_cols:7x1"),
        ((1, 6, 5, 6), (3, 3, 6, 2), (1, 2), ((0, 1), (2, 0)), "depthwise:1"),  # a multiplier
        ((1, 9, 11, 8), (3, 3, 8, 1), (1, 3), ((1, 1), (1, 1)), "depthwise:4"),  # stride 3
        ((1, 3, 3, 64), (11, 12, 64, 1), (1, 1), ((0, 0), (0, 0)), "depthwise:4"),  # a gradient
    ],
)
def test_depthwise_runs_in_one_dispatch(
    gpu: WgpuNativeBackend, x_shape, w_shape, strides, pads, key
) -> None:
    """One dispatch per depthwise layer: a layer's small filters on depthwise_cols.wgsl (vec4s
    of channels where the multiplier is 1), others on depthwise.wgsl, whose loop also takes
    filters larger than their output (ops.py's filter gradient)."""
    if w_shape[0] > x_shape[1]:  # the gradient's geometry: a padded input, a large "filter"
        x_shape = (x_shape[0], w_shape[0] + 2, w_shape[1] + 2, x_shape[3])
    x, w = normal(*x_shape, seed=23), normal(*w_shape, seed=24)
    geo = {"strides": strides, "pads": pads}
    y_shape, _ = ops.infer("depthwise_conv2d", [x.shape, w.shape], ["float32"] * 2, geo)
    spec = OutSpec(y_shape, "float32", (x.shape, w.shape), ("float32",) * 2)
    (only,) = kernels.plan("depthwise_conv2d", geo, spec).dispatches
    assert only.key == key
    assert_matches_cpu(gpu, "depthwise_conv2d", [x, w], **geo)


def test_depthwise_special_values_follow_numpy(active_gpu: WgpuNativeBackend) -> None:
    cases = [c for c in SPECIAL_CASES if c.op == "depthwise_conv2d"]
    assert cases
    for case in cases:
        got = asyncio.run(run_special_case(case))
        want = special_reference(case, special_inputs(case))
        assert not special_mismatches(case, got, want, 1e-6), case.name


def test_filter_gradient_of_a_big_batch_uses_split_k(gpu: WgpuNativeBackend) -> None:
    x, g = normal(8, 32, 32, 3, seed=8), normal(8, 32, 32, 4, seed=9)
    attrs = {"filter_shape": (3, 3, 3, 4), "strides": (1, 1), "pads": ((1, 1), (1, 1))}
    spec = OutSpec((3, 3, 3, 4), "float32", (x.shape, g.shape), ("float32", "float32"))
    assert len(kernels.plan("conv2d_backprop_filter", attrs, spec).dispatches) == 2
    assert_matches_cpu(gpu, "conv2d_backprop_filter", [x, g], **attrs)
    # gemm_direct.wgsl (a software adapter's) sums each K slice of the pixels as well.
    software = WgpuNativeBackend(gpu.device, SOFTWARE)
    assert len(kernels.plan("conv2d_backprop_filter", attrs, spec, SOFTWARE).dispatches) == 2
    assert_matches_cpu(software, "conv2d_backprop_filter", [x, g], **attrs)


# ---- pooling ----------------------------------------------------------------------------------

POOL_GEOMETRIES = [
    ((2, 4, 6, 2), (2, 2), (2, 2), ((0, 0), (0, 0))),  # windows tiling the input
    ((1, 6, 9, 3), (3, 3), (3, 3), ((0, 0), (0, 0))),
    ((1, 5, 5, 2), (2, 2), (2, 2), ((0, 0), (0, 0))),  # a last row and column in no window
    ((1, 5, 5, 2), (3, 3), (2, 2), ((1, 1), (1, 1))),
    ((1, 6, 5, 3), (3, 2), (1, 2), ((1, 1), (0, 1))),
    ((2, 4, 6, 8), (2, 2), (2, 2), ((0, 0), (0, 0))),  # channels in whole vec4s (pool2d_vec4)
    ((1, 5, 5, 4), (3, 3), (2, 2), ((1, 1), (1, 1))),
]
TILED = {(2, 4, 6, 2), (1, 6, 9, 3), (2, 4, 6, 8)}  # the inputs of POOL_GEOMETRIES its windows tile


@pytest.mark.parametrize("x_shape, pool_size, strides, pads", POOL_GEOMETRIES)
def test_pooling_and_gradients_match_cpu(
    gpu: WgpuNativeBackend, x_shape, pool_size, strides, pads
) -> None:
    x = normal(*x_shape, seed=10)
    x[0, 0, :2, 0] = 5.0  # a tie inside a window: the first maximum takes the gradient
    geo = {"pool_size": pool_size, "strides": strides, "pads": pads}
    for op in ("max_pool2d", "avg_pool2d"):
        assert_matches_cpu(gpu, op, [x], **geo)
    y_shape, _ = ops.infer("max_pool2d", [x.shape], ["float32"], geo)
    g = normal(*y_shape, seed=11)
    assert_matches_cpu(gpu, "max_pool2d_grad", [x, g], **geo)
    assert_matches_cpu(gpu, "avg_pool2d_grad", [g], input_shape=x.shape, **geo)
    # Windows tiling the input route max's gradient from one invocation per window.
    spec = OutSpec(x.shape, "float32", (x.shape, y_shape), ("float32",) * 2)
    (only,) = kernels.plan("max_pool2d_grad", geo, spec).dispatches
    assert (only.key == "max_pool2d_grad_tiles") == (x_shape in TILED), only.key


@pytest.mark.parametrize("x_shape, pool_size, strides, pads", POOL_GEOMETRIES[-2:])
def test_pooling_over_whole_vec4s_of_channels_gives_the_bits_of_the_scalar_kernel(
    gpu: WgpuNativeBackend, x_shape, pool_size, strides, pads
) -> None:
    """Channels in whole vec4s pool on pool2d_vec4.wgsl, a vec4 per invocation: each channel
    gets the bits pool2d.wgsl gives it (run on 3- and 1-channel slices, which take that kernel),
    NaN winning a max and infinities passing, windows in the padding included."""
    x = normal(*x_shape, seed=12)
    x[0, 0, 0, 1], x[0, 1, 1, 2], x[-1, 2, 3, 0] = np.nan, np.inf, -np.inf
    geo = {"pool_size": pool_size, "strides": strides, "pads": pads}
    for op in ("max_pool2d", "avg_pool2d"):
        y_shape, _ = ops.infer(op, [x.shape], ["float32"], geo)
        spec = OutSpec(y_shape, "float32", (x.shape,), ("float32",))
        (only,) = kernels.plan(op, geo, spec).dispatches
        assert only.key == f"{op}_vec4"
        got = run_primitive(gpu, op, [x], **geo)
        for start in range(0, x_shape[3], 3):
            part = np.ascontiguousarray(x[..., start : start + 3])
            want = run_primitive(gpu, op, [part], **geo)
            np.testing.assert_array_equal(
                got[..., start : start + 3].view(np.uint32), want.view(np.uint32)
            )
        assert np.isnan(got).any() and np.isinf(got).any()


# ---- random numbers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("counter", "seed", "bits"),
    [
        (np.array(0, np.float32), 0, 24),
        (np.array(2**24 - 1, np.float32), 2**32 - 1, 24),
        (np.array(123456, np.int32), 77, 22),
        (np.array(9, np.int32), 5, 11),
    ],
    ids=["f32_counter_0", "f32_counter_max", "i32_counter", "bits_11"],
)
def test_random_uniform_is_bit_identical_to_cpu(
    gpu: WgpuNativeBackend, counter: np.ndarray, seed: int, bits: int
) -> None:
    # 3 x 1001 elements: several workgroups, and a count that is no multiple of 4 per invocation.
    attrs = {"shape": (3, 1001), "seed": seed, "stream": 6, "bits": bits}
    want = run_primitive(CPU, "random_uniform", [counter], **attrs)
    got = run_primitive(gpu, "random_uniform", [counter], **attrs)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_random_uniform_kernel_is_shared_by_every_seed_and_counter() -> None:
    def dispatch(seed: int, stream: int, bits: int) -> Dispatch:
        attrs = {"shape": (8, 8), "seed": seed, "stream": stream, "bits": bits}
        spec = OutSpec((8, 8), "float32", ((),), ("float32",))
        return kernels.plan("random_uniform", attrs, spec).dispatches[0]

    first, other = dispatch(0, 0, 24), dispatch(3, 9, 22)
    assert first.key == other.key and first.wgsl == other.wgsl
    assert first.params != other.params  # the key and precision travel as params


# ---- device limits ----------------------------------------------------------------------------


def test_dispatches_split_over_x_y_z_when_workgroups_exceed_the_limit(
    gpu: WgpuNativeBackend,
) -> None:
    tiny = WgpuNativeBackend(gpu.device, DeviceLimits(max_workgroups_per_dimension=4))
    tiny.pipelines = gpu.pipelines  # same WGSL, same keys: limits only change workgroup counts
    x = normal(3, 7, 9, 11, seed=12)  # 2079 elements
    # 8316 elements: 33 groups of 64 invocations doing 4 elements each
    a, b = normal(3, 7, 9, 44, seed=12), normal(3, 7, 9, 44, seed=13)
    spec = OutSpec(a.shape, "float32", (a.shape, b.shape), ("float32", "float32"))
    workgroups = kernels.plan("add", {}, spec, tiny.device_limits).dispatches[0].workgroups
    assert max(workgroups) <= 4 and workgroups[2] > 1
    assert_matches_cpu(tiny, "add", [a, b])
    assert_matches_cpu(tiny, "transpose", [x], perm=(2, 0, 3, 1))
    assert_matches_cpu(tiny, "reduce_sum", [x], axes=(1, 2), keepdims=False)
    assert_matches_cpu(tiny, "argmax", [x], axis=3)
    assert_matches_cpu(
        tiny, "matmul", [normal(130, 20), normal(20, 70)], transpose_a=False, transpose_b=False
    )
    assert_matches_cpu(
        tiny, "conv2d", [x, normal(3, 3, 11, 5)], strides=(1, 1), pads=((1, 1), (1, 1))
    )
    assert_matches_cpu(
        tiny, "max_pool2d", [x], pool_size=(2, 2), strides=(1, 1), pads=((0, 0), (0, 0))
    )
    with pytest.raises(ValueError, match="max_workgroups_per_dimension"):
        codegen.grid("add", 65, tiny.device_limits)


def test_more_than_65535_workgroups_in_one_elementwise_op(gpu: WgpuNativeBackend) -> None:
    n = 65535 * 64 * 4 + 4000  # 4 elements per invocation
    x = np.linspace(-3, 3, n, dtype=np.float32)
    spec = OutSpec((n,), "float32", ((n,),), ("float32",))
    assert kernels.plan("relu", {}, spec).dispatches[0].workgroups[1] == 2
    np.testing.assert_array_equal(run_primitive(gpu, "relu", [x]), np.maximum(x, 0))


def test_tensor_larger_than_a_storage_binding_is_a_clear_error() -> None:
    limits = DeviceLimits(max_storage_buffer_binding_size=1024)
    spec = OutSpec((16, 32), "float32", ((16, 32), (16, 32)), ("float32", "float32"))
    with pytest.raises(
        ValueError, match=r"\(16, 32\).*2048 bytes.*max_storage_buffer_binding_size of 1024"
    ):
        kernels.plan("add", {}, spec, limits)


def test_float64_is_refused_with_a_clear_type_error(gpu: WgpuNativeBackend) -> None:
    spec = OutSpec((2,), "float64", ((2,),), ("float64",))
    with pytest.raises(TypeError, match="no f64"):
        kernels.plan("exp", {}, spec)
    with pytest.raises(TypeError, match="no f64"):
        gpu.upload(np.zeros(2))


def test_float_only_kernels_refuse_integers() -> None:
    spec = OutSpec((2, 2), "float32", ((2, 2), (2, 2)), ("int32", "int32"))
    with pytest.raises(TypeError, match="float32 only"):
        kernels.plan("matmul", {"transpose_a": False, "transpose_b": False}, spec)


def test_empty_and_zero_rank_tensors(gpu: WgpuNativeBackend) -> None:
    spec = OutSpec((0, 3), "float32", ((0, 3),), ("float32",))
    assert kernels.plan("exp", {}, spec).dispatches == ()
    assert run_primitive(gpu, "exp", [normal(0, 3)]).shape == (0, 3)
    scalar = np.array(2.5, dtype=np.float32)
    assert_matches_cpu(gpu, "exp", [scalar])
    assert_matches_cpu(gpu, "reshape", [scalar], shape=(1, 1))
    assert_matches_cpu(gpu, "reduce_sum", [normal(2, 3)], axes=(), keepdims=False)
    assert_matches_cpu(gpu, "reduce_sum", [normal(0, 3)], axes=(0,), keepdims=False)
    assert_matches_cpu(
        gpu, "matmul", [normal(2, 0), normal(0, 3)], transpose_a=False, transpose_b=False
    )


def test_plans_are_memoized_per_call_site() -> None:
    spec = OutSpec((4, 4), "float32", ((4, 4), (4, 4)), ("float32", "float32"))
    attrs = {"transpose_a": False, "transpose_b": True}
    assert kernels.plan("matmul", attrs, spec) is kernels.plan("matmul", dict(attrs), spec)
    pad = {"paddings": [[1, 0], [0, 1]], "value": 0.0}
    negative = {"paddings": [[1, 0], [0, 1]], "value": -0.0}
    pad_spec = OutSpec((5, 5), "float32", ((4, 4),), ("float32",))
    assert kernels.plan("pad", pad, pad_spec) is not kernels.plan("pad", negative, pad_spec)
