"""The cpu backend's numerics: long float32 sums near rounding, exact int32 beyond float
precision, and a self-test that really computes."""

import asyncio
from typing import Any

import py_in_browser as pib
from py_in_browser.backends import OutSpec
from py_in_browser.backends.cpu import CpuBackend
from py_in_browser.testing.op_cases import long_sum_relative_errors


def test_long_sums_over_several_axes_keep_float32_accuracy() -> None:
    errors = asyncio.run(long_sum_relative_errors())
    print("cpu long-sum relative errors:", errors)  # in place: sum 1.6e-5, variance 1.3e-4
    assert errors["sum"] < 1e-6 and errors["variance"] < 1e-6, errors


def test_int32_beyond_float_precision_stays_exact() -> None:
    async def twice() -> list[int]:
        i = pib.tensor([2**24 + 1, -(2**24) - 1], dtype="int32")
        doubled: list[int] = (await (i + i).numpy()).tolist()
        return doubled

    assert asyncio.run(twice()) == [2**25 + 2, -(2**25) - 2]


class _WrongMatmul(CpuBackend):
    """A backend whose matmul kernel lies, as a broken GPU driver can."""

    def run(self, op: str, inputs: list[Any], attrs: dict[str, Any], out: OutSpec) -> Any:
        result = super().run(op, inputs, attrs, out)
        return result + 1 if op == "matmul" else result


def test_the_cpu_self_test_computes_and_compares() -> None:
    assert asyncio.run(CpuBackend().self_test()) is True
    assert asyncio.run(_WrongMatmul().self_test()) is False
