"""Set-up's build of the cpu SIMD module: cached by content, shipped in the engine bundle, and a
broken build leaves a working bundle without it (the page then records why and uses numpy)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import wasmtime

from server import simd_build
from server.engine_bundle import PACKAGE_NAME, ensure_engine_bundle
from server.package_bundle import read_bundle
from server.settings import REPO_ROOT, Paths
from server.simd_build import (
    SimdBuildError,
    SimdModule,
    ensure_simd_module,
)

RELINK_HARNESS = Path(__file__).with_name("js") / "relaxed_kernels.mjs"
SHARED_LIBRARIES = REPO_ROOT / "web" / "js" / "shared-libraries.js"


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
    for path in (module.path, module.relaxed_path):
        data = path.read_bytes()
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


def test_the_helper_build_is_gemm_alone_on_an_imported_shared_memory(sources: Paths) -> None:
    """What pool.js instantiates in each helper worker: no dynamic linking, one shared memory."""
    module = ensure_simd_module(sources)
    engine = wasmtime.Engine()  # threads and relaxed SIMD are on by default
    helper = wasmtime.Module(engine, module.helper_path.read_bytes())
    imports = [(item.module, item.name, item.type) for item in helper.imports]
    assert len(imports) == 1 and imports[0][:2] == ("env", "memory"), imports
    memory = imports[0][2]
    assert isinstance(memory, wasmtime.MemoryType) and memory.is_shared, memory
    assert sorted(item.name for item in helper.exports) == ["gemm", "gemm_work_floats"]


def test_only_the_relaxed_build_needs_relaxed_simd(sources: Paths) -> None:
    """A WebAssembly engine without relaxed SIMD (WebKit's, where the loader takes kernels.wasm)
    compiles the plain build and refuses the relaxed one: its products use relaxed_madd."""
    module = ensure_simd_module(sources)
    config = wasmtime.Config()
    config.wasm_relaxed_simd = False
    engine = wasmtime.Engine(config)
    wasmtime.Module(engine, module.path.read_bytes())
    with pytest.raises(wasmtime.WasmtimeError, match="relaxed SIMD"):
        wasmtime.Module(engine, module.relaxed_path.read_bytes())


def test_engine_bundle_ships_the_module_but_not_its_sources(sources: Paths) -> None:
    bundle = ensure_engine_bundle(sources)
    assert bundle.simd is not None
    files = read_bundle(bundle.path.read_bytes())
    for at, built in bundle.simd.package_files():
        assert files[f"{PACKAGE_NAME}/{at}"] == built.read_bytes(), at
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
    assert not [name for name in files if name.endswith(".wasm")], files.keys()
    assert f"{PACKAGE_NAME}/backends/cpu_simd/loader.py" in files


def _restore_compiles(
    module: SimdModule, relaxed_simd: bool, plain_shipped: bool
) -> dict[str, Any]:
    """Whether a restore compiles a snapshot that recorded the relaxed build, in node with or
    without relaxed SIMD, with the plain build in the bundle or not (tests_unit/js)."""
    node = shutil.which("node")
    assert node is not None, "node is part of the set-up (npm fetches the runtime)"
    flags = ["--experimental-wasm-relaxed-simd"] if relaxed_simd else []
    plain = str(module.path) if plain_shipped else "-"
    done = subprocess.run(
        [node, *flags, str(RELINK_HARNESS), str(SHARED_LIBRARIES), plain, str(module.relaxed_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_a_snapshot_with_the_relaxed_build_restores_where_relaxed_simd_is_missing(
    sources: Paths,
) -> None:
    """A snapshot made in Chromium records kernels-relaxed.wasm; a browser without relaxed SIMD
    relinks kernels.wasm in its place, and one with it keeps the relaxed build."""
    module = ensure_simd_module(sources)
    assert _restore_compiles(module, relaxed_simd=False, plain_shipped=True) == {"compiled": True}
    # Without relaxed SIMD it never compiles the relaxed build: with no plain one, nothing.
    refused = _restore_compiles(module, relaxed_simd=False, plain_shipped=False)
    assert not refused["compiled"] and "no file" in refused["error"], refused
    assert _restore_compiles(module, relaxed_simd=True, plain_shipped=False) == {"compiled": True}
