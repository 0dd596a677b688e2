"""Backend registry: kernel coverage of the op table (read from the one kernel table every
backend registers into), backend selection and capabilities."""

import asyncio
from typing import Any

import numpy as np
import pytest

import py_in_browser as pib
from py_in_browser import backends
from py_in_browser.backends import OutSpec
from py_in_browser.backends.cpu import CpuBackend
from py_in_browser.backends.webgl2 import kernels as webgl2_kernels
from py_in_browser.backends.webgpu import kernels as webgpu_kernels
from py_in_browser.ops import OPS


def missing_primitives(backend: str) -> set[str]:
    """Primitives of the op table that `backend` has no kernel for (must be empty)."""
    return set(OPS) - backends.kernels_of(backend)


def test_every_registered_backend_implements_every_primitive() -> None:
    assert backends.BACKENDS, "no backend registered"
    for name in backends.BACKENDS:
        assert missing_primitives(name) == set(), name


def test_coverage_check_reports_a_missing_kernel() -> None:
    class Partial(CpuBackend):
        name = "partial-test"

    for op in sorted(OPS)[1:]:  # every kernel but the first primitive
        backends.register_kernel(Partial.name, op)(backends.KERNELS[("cpu", op)])
    try:
        assert missing_primitives(Partial.name) == {sorted(OPS)[0]}
    finally:
        for key in [k for k in backends.KERNELS if k[0] == Partial.name]:
            del backends.KERNELS[key]


@pytest.mark.parametrize(
    "plan", [webgl2_kernels.plan, webgpu_kernels.plan], ids=["webgl2", "webgpu"]
)
def test_gpu_backends_plan_from_the_kernel_table(plan: Any) -> None:
    """The GPU backends find their planners where the coverage test looks: without its entry
    in the table a primitive has no plan, and with another entry it gets that one's."""
    backend = plan.__module__.split(".")[-2]
    spec = OutSpec((3, 7), "float32", ((3, 7),), ("float32",))
    probe = {"probe": True}  # attrs relu ignores: a call webgpu has not memoized a plan for
    relu = backends.KERNELS.pop((backend, "relu"))
    try:
        with pytest.raises(NotImplementedError, match=f"{backend}.*relu"):
            plan("relu", probe, spec)
        backends.register_kernel(backend, "relu")(lambda *args: ("stand-in", args[0]))
        assert plan("relu", probe, spec) == ("stand-in", "relu")
    finally:
        backends.KERNELS[(backend, "relu")] = relu


def test_init_auto_picks_cpu_and_rejects_unknown_backends() -> None:
    assert asyncio.run(pib.init()) == "cpu"
    assert pib.get_backend() == "cpu"
    assert "cpu" in pib.available_backends()
    assert pib.capabilities()["backend"] == "cpu"
    with pytest.raises(ValueError, match=r"webgpu.*available: \['cpu'\]"):
        asyncio.run(pib.init(backend="webgpu"))


def test_profile_reports_kernels() -> None:
    a = pib.tensor(np.ones((8, 8)))

    def work() -> None:
        with pib.tidy():
            pib.relu(a @ a)

    report = asyncio.run(pib.profile(work))
    names = {k["name"] for k in report["kernels"]}
    assert {"matmul", "relu"} <= names
    assert report["wall_ms"] >= report["kernel_ms"] >= 0
