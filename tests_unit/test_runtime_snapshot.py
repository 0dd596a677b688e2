"""The server's runtime snapshot: made with Node from the set-up runtime and both bundles, framed as
the worker reads it, recorded as failed (and not retried) where it cannot be made. Restoring it in
Chromium and Firefox is tested end to end (tests_e2e/test_startup_cache.py, test_smoke.py)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import struct
from pathlib import Path

import pytest

from server import runtime_snapshot
from server.engine_bundle import ensure_engine_bundle
from server.runtime_snapshot import FAILED, SNAPSHOT_NAME, build_version, make_snapshot
from server.settings import Paths


@pytest.fixture
def cache(tmp_path: Path) -> Paths:
    """A cache linking the set-up runtime and SIMD module; the engine bundle is built fresh."""
    paths = Paths(cache=tmp_path / "cache")
    for name in ("runtime", "simd"):
        shutil.copytree(Paths.default().cache / name, paths.cache / name, copy_function=os.link)
    return paths


def test_the_snapshot_holds_the_imported_engine_and_its_libraries(cache: Paths) -> None:
    bundle = ensure_engine_bundle(cache)
    snapshot = make_snapshot(cache, bundle)
    assert snapshot == bundle.path.with_name(SNAPSHOT_NAME), (
        bundle.path.parent / FAILED
    ).read_text()
    data = snapshot.read_bytes()
    (header_length,) = struct.unpack_from("<I", data)
    header = json.loads(data[4 : 4 + header_length])
    assert header["version"] == build_version(bundle.digest)
    libraries = header["libraries"]
    assert any(
        path.endswith("_multiarray_umath.cpython-312-wasm32-emscripten.so")
        for path in libraries["paths"]
    )
    assert any(path.endswith("cpu_simd/kernels.wasm") for path in libraries["paths"])
    assert len(libraries["handles"]) == len(libraries["paths"])
    assert gzip.decompress(snapshot.with_name(SNAPSHOT_NAME + ".gz").read_bytes()) == data
    assert make_snapshot(cache, bundle) == snapshot  # made once per build


def test_without_node_the_failure_is_recorded_and_not_retried(
    cache: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = ensure_engine_bundle(cache)
    monkeypatch.setattr(runtime_snapshot.shutil, "which", lambda _: None)
    assert make_snapshot(cache, bundle) is None
    assert "node is not installed" in (bundle.path.parent / FAILED).read_text()
    monkeypatch.undo()  # Node is back, but this build's failure stands
    assert make_snapshot(cache, bundle) is None
    assert not bundle.path.with_name(SNAPSHOT_NAME).exists()
