"""Builds the py_in_browser wheel the page installs, again whenever the package sources change."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from dataclasses import dataclass
from pathlib import Path

from server.settings import Paths
from server.simd_build import PACKAGE_PATH, SimdBuildError, SimdModule, ensure_simd_module

DIST_NAME = "py_in_browser"
VERSION = "0.1.0"
WHEEL_NAME = f"{DIST_NAME}-{VERSION}-py3-none-any.whl"
# What the browser needs of the package: Python modules and the shader sources they load.
SHIPPED_SUFFIXES = (".py", ".wgsl", ".frag", ".vert", ".glsl", ".js", ".json")


@dataclass(frozen=True)
class EngineWheel:
    path: Path
    digest: str
    simd: SimdModule | None  # the cpu backend's SIMD kernels, absent when they could not be built


def _sources(src: Path) -> list[Path]:
    return sorted(
        p
        for p in src.rglob("*")
        if p.is_file() and p.suffix in SHIPPED_SUFFIXES and "__pycache__" not in p.parts
    )


def source_digest(src: Path) -> str:
    """A content hash of the shipped sources, so any edit yields a new wheel and a new URL."""
    digest = hashlib.sha256()
    for path in _sources(src):
        digest.update(path.relative_to(src).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _record_hash(data: bytes) -> str:
    raw = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _simd_module(paths: Paths) -> SimdModule | None:
    """The SIMD kernels go in the wheel when they build; without them the cpu backend uses numpy
    (and the page records why); `py-in-browser setup` prints the build error."""
    try:
        return ensure_simd_module(paths)
    except SimdBuildError:
        return None


def ensure_engine_wheel(paths: Paths) -> EngineWheel:
    """Return the wheel for the current sources, building it only when they changed."""
    src = paths.engine_src
    simd = _simd_module(paths)
    digest = source_digest(src)
    if simd is not None:
        digest = hashlib.sha256(f"{digest}+{simd.digest}".encode()).hexdigest()[:16]
    wheel = paths.engine / digest / WHEEL_NAME
    if wheel.is_file():
        return EngineWheel(wheel, digest, simd)
    wheel.parent.mkdir(parents=True, exist_ok=True)
    dist_info = f"{DIST_NAME}-{VERSION}.dist-info"
    entries: list[tuple[str, bytes]] = [
        (f"{DIST_NAME}/{p.relative_to(src).as_posix()}", p.read_bytes()) for p in _sources(src)
    ]
    if simd is not None:
        entries.append((f"{DIST_NAME}/{PACKAGE_PATH}", simd.path.read_bytes()))
    entries.append(
        (
            f"{dist_info}/METADATA",
            f"Metadata-Version: 2.1\nName: {DIST_NAME}\nVersion: {VERSION}\n".encode(),
        )
    )
    entries.append(
        (
            f"{dist_info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: py-in-browser\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
    )
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in entries)
    record += f"{dist_info}/RECORD,,\n"
    partial = wheel.with_suffix(".partial")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries:
            archive.writestr(name, data)
        archive.writestr(f"{dist_info}/RECORD", record)
    partial.replace(wheel)
    for stale in paths.engine.iterdir():
        if stale.is_dir() and stale.name != digest:
            for leftover in stale.iterdir():
                leftover.unlink()
            stale.rmdir()
    return EngineWheel(wheel, digest, simd)
