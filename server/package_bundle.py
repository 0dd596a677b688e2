"""Python packages as bundles: files laid end to end behind a JSON index, for the engine worker.

Pyodide's loadPackage unpacks a wheel in Python, member by member, then loads every shared library
in it (numpy's 19, linalg and fft included, which the engine never imports). The worker instead
writes a bundle's files into Pyodide's file system in one JS pass and leaves each library to the
import that needs it. A bundle is served gzip-encoded, so the browser's network stack inflates
it. Layout: a little-endian uint32 header length, the UTF-8 JSON header {"files": [[path, size],
...]}, then the files' bytes in that order (web/js/package-bundle.js reads it).
"""

from __future__ import annotations

import gzip
import json
import struct
import zipfile
from pathlib import Path

BUNDLE_SUFFIX = ".bundle"


def wheel_members(wheel: Path) -> list[tuple[str, bytes]]:
    """The files of a wheel (a zip archive), in archive order, without its directory entries."""
    with zipfile.ZipFile(wheel) as archive:
        return [
            (info.filename, archive.read(info)) for info in archive.infolist() if not info.is_dir()
        ]


def bundle_bytes(members: list[tuple[str, bytes]]) -> bytes:
    header = json.dumps({"files": [[name, len(data)] for name, data in members]}).encode()
    return b"".join([struct.pack("<I", len(header)), header, *(data for _, data in members)])


def write_bundle(path: Path, members: list[tuple[str, bytes]]) -> None:
    """Writes the bundle and its gzip sibling (write_served)."""
    write_served(path, bundle_bytes(members))


def write_served(path: Path, data: bytes) -> None:
    """Writes `data` and its gzip sibling (what serve_file sends to browsers), each complete or
    not at all: a crash mid-write leaves no truncated file under the final name."""
    for target, content in (
        (path, data),
        (path.with_name(path.name + ".gz"), gzip.compress(data, 6, mtime=0)),
    ):
        partial = target.with_name(target.name + ".partial")
        partial.write_bytes(content)
        partial.replace(target)


def drop_other_builds(parent: Path, current: str) -> None:
    """Removes the folders under `parent` of builds other than `current` (one folder of plain
    files per build, named by its digest), so the cache holds only what is served."""
    for other in parent.iterdir():
        if other.is_dir() and other.name != current:
            for leftover in other.iterdir():
                leftover.unlink()
            other.rmdir()


def read_bundle(data: bytes) -> dict[str, bytes]:
    """The files of a bundle by path: what the worker writes, read back (for checks)."""
    (header_length,) = struct.unpack_from("<I", data)
    offset = 4 + header_length
    files = {}
    for name, size in json.loads(data[4:offset])["files"]:
        files[name] = data[offset : offset + size]
        offset += size
    return files
