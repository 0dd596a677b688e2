"""The cpu backend's WebAssembly SIMD kernels, run natively under wasmtime, against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from tests_unit.wasm_simd import WasmSimd, native_simd

TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def simd() -> WasmSimd:
    return native_simd()


def _reference(a: np.ndarray, b: np.ndarray, ta: bool, tb: bool) -> np.ndarray:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return np.matmul(
        np.swapaxes(a64, -1, -2) if ta else a64, np.swapaxes(b64, -1, -2) if tb else b64
    )


def _close(actual: np.ndarray, expected: np.ndarray) -> None:
    # Relative to the size of the terms summed, as a float32 dot product's error is.
    scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
    np.testing.assert_allclose(actual, expected, rtol=0, atol=TOLERANCE * scale)


# Shapes around every blocking edge: micro-tile (4x8), k block 256, m block 128, n block 512.
GEMM_SHAPES = [
    (1, 1, 1),
    (3, 5, 7),
    (4, 8, 16),
    (17, 33, 9),
    (129, 19, 300),
    (64, 520, 40),
    (5, 3, 0),
]


@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize(("m", "n", "k"), GEMM_SHAPES)
def test_gemm_matches_numpy(
    simd: WasmSimd, m: int, n: int, k: int, transpose_a: bool, transpose_b: bool
) -> None:
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    a = rng.standard_normal((k, m) if transpose_a else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(np.float32)
    out = simd.kernels.gemm(a, b, transpose_a, transpose_b)
    assert out is not None and out.shape == (m, n) and out.dtype == np.float32
    _close(out, _reference(a, b, transpose_a, transpose_b))


@pytest.mark.parametrize(("transpose_a", "transpose_b"), [(False, False), (True, True)])
def test_batched_gemm_matches_numpy(simd: WasmSimd, transpose_a: bool, transpose_b: bool) -> None:
    rng = np.random.default_rng(7)
    a = rng.standard_normal((2, 3, 12, 10)).astype(np.float32)
    b = rng.standard_normal((2, 3, 10, 12)).astype(np.float32)
    out = simd.kernels.gemm(a, b, transpose_a, transpose_b)
    expected = _reference(a, b, transpose_a, transpose_b)
    assert out is not None and out.shape == expected.shape == (
        (2, 3, 10, 10) if transpose_a else (2, 3, 12, 12)
    )
    _close(out, expected)


def test_gemm_reads_strided_views(simd: WasmSimd) -> None:
    """A transposed or sliced handle (the cpu backend's views) is read as its values."""
    a = np.arange(60, dtype=np.float32).reshape(6, 10)[:, ::2]
    b = np.linspace(-1, 1, 35, dtype=np.float32).reshape(7, 5).T
    out = simd.kernels.gemm(a, b, False, False)
    assert out is not None
    _close(out, _reference(a, b, False, False))


def test_gemm_leaves_other_dtypes_to_numpy(simd: WasmSimd) -> None:
    a = np.ones((2, 2), dtype=np.float64)
    assert simd.kernels.gemm(a, a, False, False) is None
