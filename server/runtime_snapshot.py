"""The runtime snapshot the dev server offers a page's first visit: where set-up keeps it and what
an upload must be to be kept.

A page restores a Pyodide memory snapshot taken after numpy and the engine were imported instead
of starting Python and importing them (web/js/runtime-snapshot.js). A browser makes its own after
its first visit; `py-in-browser setup` makes one in headless Chromium (server/snapshot_maker.py)
for the current engine build, so that the first visit is quick too. The page checks the snapshot's
recorded version against the build it runs and starts afresh on any mismatch.

Pyodide records at start-up whether the browser can suspend WebAssembly (JSPI), and a restored
image keeps that answer, so set-up makes two: one with JSPI (Chromium, Firefox) and one made with
JSPI hidden, for browsers without it (WebKit: Safari, WebKitGTK), each page taking its own.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

from server.package_bundle import drop_other_builds, write_served
from server.settings import NUMPY_BUNDLE_URL, RUNTIME_URL, Paths

SNAPSHOT_NAME = "runtime.snapshot"
# The snapshot made without JSPI, for browsers that lack it.
NO_JSPI_SNAPSHOT_NAME = "runtime-no-jspi.snapshot"
SNAPSHOT_NAMES = (SNAPSHOT_NAME, NO_JSPI_SNAPSHOT_NAME)
SNAPSHOT_URL_PREFIX = "/runtime-snapshot"
# The engine build whose snapshot the browser holds in its own cache, as the page records it
# (web/js/pib-client.js): the server then leaves out the snapshot's preload.
SNAPSHOT_COOKIE = "pib-snapshot"
# A snapshot holds Python's heap after the imports (~40 MB); anything far larger is not one.
MAX_SNAPSHOT_BYTES = 256 * 1024 * 1024


class SnapshotRejected(ValueError):
    """An upload that is not a snapshot of the build it claims."""


def snapshots_offered() -> bool:
    """Whether the server offers its snapshot; PIB_SERVER_SNAPSHOT=off makes every first visit start
    Python afresh (and store its own), as on a server set up without a browser."""
    return os.environ.get("PIB_SERVER_SNAPSHOT", "on") != "off"


def build_version(digest: str) -> str:
    """The build a page runs, as runtime-snapshot.js's buildVersion spells it from /api/engine."""
    return f"{RUNTIME_URL} {NUMPY_BUNDLE_URL} {digest}"


def snapshot_key(user_agent: str) -> str:
    """Which snapshot of /api/engine's description a page preloads: the WebKit one for WebKit
    (Safari, WebKitGTK, every iOS browser; their user agents name AppleWebKit but not Chrome/),
    else the JSPI one. Only a hint: the worker picks by JSPI itself (runtime-snapshot.js), and a
    wrong guess costs one download."""
    webkit = "AppleWebKit/" in user_agent and "Chrome/" not in user_agent
    return "snapshot_url_without_jspi" if webkit else "snapshot_url"


def snapshot_path(paths: Paths, digest: str, name: str = SNAPSHOT_NAME) -> Path:
    return paths.runtime_snapshots / digest / name


def snapshot_url(paths: Paths, digest: str, name: str = SNAPSHOT_NAME) -> str | None:
    """Where a page downloads snapshot `name` (SNAPSHOT_NAMES) of engine build `digest`, or None
    when set-up made none."""
    if not snapshot_path(paths, digest, name).is_file():
        return None
    return f"{SNAPSHOT_URL_PREFIX}/{digest}/{name}"


def _recorded_version(data: bytes) -> str:
    """The version in a snapshot's header (framed layout: uint32 length, JSON, image)."""
    if len(data) < 4:
        raise SnapshotRejected("too short to be a snapshot")
    (length,) = struct.unpack_from("<I", data)
    try:
        header = json.loads(data[4 : 4 + length])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SnapshotRejected(f"the header is not JSON: {exc}") from exc
    version = header.get("version") if isinstance(header, dict) else None
    if not isinstance(version, str):
        raise SnapshotRejected("the header records no version")
    return version


def store_snapshot(paths: Paths, digest: str, data: bytes) -> Path:
    """Keeps `data` as the snapshot of engine build `digest`, replacing other builds' snapshots;
    refuses it unless its header records that build (plus the browser's features). A snapshot
    made without JSPI is kept beside the one made with it."""
    if len(data) > MAX_SNAPSHOT_BYTES:
        raise SnapshotRejected(f"{len(data)} bytes is larger than any snapshot")
    expected = build_version(digest)
    recorded = _recorded_version(data)
    if not recorded.startswith(expected + " "):
        raise SnapshotRejected(f"made for {recorded!r}, not for {expected!r}")
    # runtime-snapshot.js's snapshotVersion ends the version with the runtime's JSPI answer.
    name = NO_JSPI_SNAPSHOT_NAME if recorded.endswith(" jspi=false") else SNAPSHOT_NAME
    target = snapshot_path(paths, digest, name)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_served(target, data)
    drop_other_builds(paths.runtime_snapshots, digest)
    return target
