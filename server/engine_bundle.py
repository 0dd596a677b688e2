"""Builds the py_in_browser bundle the page installs, again whenever the package sources change."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from server.package_bundle import BUNDLE_SUFFIX, drop_other_builds, write_bundle
from server.settings import Paths
from server.simd_build import SimdBuildError, SimdModule, ensure_simd_module

PACKAGE_NAME = "py_in_browser"
BUNDLE_NAME = PACKAGE_NAME + BUNDLE_SUFFIX
# What the browser needs of the package: Python modules and the shader sources they load.
SHIPPED_SUFFIXES = (".py", ".wgsl", ".frag", ".vert", ".glsl", ".js", ".json")


@dataclass(frozen=True)
class EngineBundle:
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
    """A content hash of the shipped sources, so any edit yields a new bundle and a new URL."""
    digest = hashlib.sha256()
    for path in _sources(src):
        digest.update(path.relative_to(src).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _simd_module(paths: Paths) -> SimdModule | None:
    """The SIMD kernels go in the wheel when they build; without them the cpu backend uses numpy
    (and the page records why); `py-in-browser setup` prints the build error."""
    try:
        return ensure_simd_module(paths)
    except SimdBuildError:
        return None


def ensure_engine_bundle(paths: Paths) -> EngineBundle:
    """Return the bundle for the current sources, building it only when they changed."""
    src = paths.engine_src
    simd = _simd_module(paths)
    digest = source_digest(src)
    if simd is not None:
        digest = hashlib.sha256(f"{digest}+{simd.digest}".encode()).hexdigest()[:16]
    bundle = paths.engine / digest / BUNDLE_NAME
    if bundle.is_file():
        return EngineBundle(bundle, digest, simd)
    bundle.parent.mkdir(parents=True, exist_ok=True)
    members = [
        (f"{PACKAGE_NAME}/{p.relative_to(src).as_posix()}", p.read_bytes()) for p in _sources(src)
    ]
    if simd is not None:
        members += [
            (f"{PACKAGE_NAME}/{at}", file.read_bytes()) for at, file in simd.package_files()
        ]
    write_bundle(bundle, members)
    drop_other_builds(paths.engine, digest)
    return EngineBundle(bundle, digest, simd)
