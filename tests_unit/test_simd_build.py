"""Set-up's build of the cpu SIMD module: cached by content, shipped in the engine bundle, and a
broken build leaves a working bundle without it (the page then records why and uses numpy)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from server import simd_build
from server.engine_bundle import PACKAGE_NAME, ensure_engine_bundle
from server.package_bundle import read_bundle
from server.settings import REPO_ROOT, Paths
from server.simd_build import PACKAGE_PATH, SimdBuildError, ensure_simd_module


@pytest.fixture
def sources(tmp_path: Path) -> Paths:
    source = tmp_path / "py_in_browser"
    shutil.copytree(
        REPO_ROOT / "py_in_browser", source, ignore=shutil.ignore_patterns("__pycache__")
    )
    return Paths(cache=tmp_path / "cache", engine_src=source)


def _native(paths: Paths) -> Path:
    return paths.engine_src / "backends" / "cpu_simd" / "native"


def test_module_is_a_side_module_cached_by_content(
    sources: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = ensure_simd_module(sources)
    data = module.path.read_bytes()
    assert data[:4] == b"\0asm" and b"dylink.0" in data[:32]  # what Emscripten's dlopen needs

    def no_compiler(*args: object) -> None:
        raise AssertionError("unchanged sources must not be compiled again")

    with monkeypatch.context() as patch:
        patch.setattr(simd_build, "_compile", no_compiler)
        assert ensure_simd_module(sources) == module
    with (_native(sources) / "gemm.c").open("a") as source:
        source.write("\n// edited\n")
    rebuilt = ensure_simd_module(sources)
    assert rebuilt.digest != module.digest and rebuilt.path.is_file()
    assert not module.path.parent.exists()  # the stale build is gone


def test_engine_bundle_ships_the_module_but_not_its_sources(sources: Paths) -> None:
    bundle = ensure_engine_bundle(sources)
    assert bundle.simd is not None
    files = read_bundle(bundle.path.read_bytes())
    assert files[f"{PACKAGE_NAME}/{PACKAGE_PATH}"] == bundle.simd.path.read_bytes()
    assert not [name for name in files if name.endswith((".c", ".h"))]


def test_a_broken_build_is_reported_cached_and_leaves_a_bundle_without_it(
    sources: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    (_native(sources) / "broken.c").write_text("int broken(void) { return undeclared; }\n")
    with pytest.raises(SimdBuildError, match="undeclared"):
        ensure_simd_module(sources)

    def no_compiler(*args: object) -> None:
        raise AssertionError("a failed build is not retried until the sources change")

    monkeypatch.setattr(simd_build, "_compile", no_compiler)
    with pytest.raises(SimdBuildError, match="undeclared"):
        ensure_simd_module(sources)
    bundle = ensure_engine_bundle(sources)
    assert bundle.simd is None
    files = read_bundle(bundle.path.read_bytes())
    assert f"{PACKAGE_NAME}/{PACKAGE_PATH}" not in files
    assert f"{PACKAGE_NAME}/backends/cpu_simd/loader.py" in files
