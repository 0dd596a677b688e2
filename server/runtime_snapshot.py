"""The runtime snapshot the server offers first visits: Pyodide with numpy and the engine imported.

A browser keeps its own snapshot between visits (web/js/runtime-snapshot.js), but a first visit had
to start Python and import everything itself (about 3 s of its 4). Node runs Pyodide the same way,
so the server makes that snapshot once per engine build with `server/runtime_snapshot.mjs`, in the
background (a few seconds), and names it in /api/engine once it exists. Without Node, or when
making it fails (recorded, not retried for that build), first visits start Python as before.
"""

from __future__ import annotations

import gzip
import shutil
import subprocess
import threading
from pathlib import Path

from server.engine_bundle import EngineBundle
from server.settings import NUMPY_BUNDLE, REPO_ROOT, RUNTIME_PREFIX, Paths

SNAPSHOT_NAME = "runtime.snapshot"
MAKER = REPO_ROOT / "server" / "runtime_snapshot.mjs"
FAILED = "snapshot-failed.txt"


def build_version(digest: str) -> str:
    """What a worker's stored snapshot and bytecode must have been made from: this runtime, numpy
    and engine build (the worker receives it in /api/engine)."""
    return f"{RUNTIME_PREFIX}/ {NUMPY_BUNDLE} {digest}"


def make_snapshot(paths: Paths, bundle: EngineBundle) -> Path | None:
    """Makes the snapshot for `bundle` unless it exists or failed before; its path, or None."""
    target = bundle.path.parent / SNAPSHOT_NAME
    failed = bundle.path.parent / FAILED
    if target.is_file():
        return target
    if failed.is_file():
        return None
    node = shutil.which("node")
    if node is None:
        failed.write_text("node is not installed (apt-get install nodejs)")
        return None
    partial = target.with_name(target.name + ".partial")
    command = [
        node,
        str(MAKER),
        str(paths.runtime),
        str(paths.runtime / NUMPY_BUNDLE),
        str(bundle.path),
        build_version(bundle.digest),
        str(partial),
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    except subprocess.TimeoutExpired:
        failed.write_text("making the snapshot took over 300 s")
        return None
    if done.returncode != 0:
        failed.write_text((done.stderr or done.stdout).strip()[-2000:])
        return None
    # Mostly empty memory: level 1 shrinks it 3.4x in well under a second.
    compressed = target.with_name(target.name + ".gz")
    compressed.write_bytes(gzip.compress(partial.read_bytes(), compresslevel=1, mtime=0))
    partial.replace(target)
    return target


class SnapshotMaker:
    """Makes each engine build's snapshot once, on a background thread, for the server."""

    def __init__(self, paths: Paths) -> None:
        self._paths = paths
        self._lock = threading.Lock()
        self._started: set[str] = set()

    def ready(self, bundle: EngineBundle) -> Path | None:
        """The snapshot if it exists; otherwise starts making it (once) and answers None."""
        target = bundle.path.parent / SNAPSHOT_NAME
        if target.is_file():
            return target
        with self._lock:
            if bundle.digest not in self._started:
                self._started.add(bundle.digest)
                threading.Thread(
                    target=make_snapshot, args=(self._paths, bundle), daemon=True
                ).start()
        return None
