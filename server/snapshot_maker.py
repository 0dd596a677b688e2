"""Makes the runtime snapshot the dev server offers first visits, in headless Chromium, at set-up.

The snapshot must come from a browser: an image made in Node restores, but Node lacks JSPI, and
Pyodide's start-up records that lack in the image, which breaks synchronous calls in Chromium
and Firefox (both have JSPI). So set-up serves the app on a loopback port, opens
web/js/snapshot-maker.js in headless Chromium (the page makes the snapshot with the same code a
browser uses for its own after a first visit) and takes the upload it posts back, guarded by a
one-time token. Without Chromium nothing is made, and pages start Python afresh on a first visit.

WebKit lacks JSPI, and an image also holds function-table slots that only the engine which made
it assigns alike (JavaScriptCore adds a slot for a function V8 finds already in the table), so a
Chromium image fails to restore there; where WebKitGTK's MiniBrowser is installed (`make
browsers`), set-up opens the same page in it, under a private X display, for the snapshot that
browsers without JSPI take.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route

from server.background import free_port
from server.engine_bundle import ensure_engine_bundle
from server.main import SECURITY_HEADERS, create_app
from server.runtime_snapshot import (
    NO_JSPI_SNAPSHOT_NAME,
    SNAPSHOT_NAME,
    SnapshotRejected,
    snapshot_path,
    store_snapshot,
)
from server.settings import Paths
from server.xvfb import xvfb_display

MAKER_PATH = "/setup/runtime-snapshot"
MAKE_TIMEOUT_S = 300.0
# Chromium as the tests and benchmarks launch it (tests_e2e/browsers.py), less the GPU flags:
# the snapshot is taken before any backend starts.
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
)


MINIBROWSER = Path("/usr/lib/x86_64-linux-gnu/webkit2gtk-4.1/MiniBrowser")


class SnapshotMakerError(RuntimeError):
    """The snapshot was not made; the message says why."""


def find_chromium() -> Path | None:
    """PIB_CHROMIUM, else Debian's /usr/bin/chromium (`make browsers`), else None."""
    named = os.environ.get("PIB_CHROMIUM")
    if named:
        return Path(named)
    found = shutil.which("chromium")
    return Path(found) if found else None


def find_minibrowser() -> Path | None:
    """PIB_MINIBROWSER, else Debian's WebKitGTK MiniBrowser (`make browsers`), else None."""
    named = os.environ.get("PIB_MINIBROWSER")
    if named:
        return Path(named)
    return MINIBROWSER if MINIBROWSER.is_file() else None


class _Upload:
    """The one upload the maker page posts: the snapshot bytes, or why it failed."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.done = threading.Event()
        self.data: bytes | None = None
        self.failure = ""

    async def receive(self, request: Request) -> Response:
        if not secrets.compare_digest(request.query_params.get("token", ""), self.token):
            return PlainTextResponse("wrong token", status_code=403)
        failed = request.query_params.get("failed")
        if failed is not None:
            self.failure = f"the page could not make it: {failed}"
        else:
            self.data = await request.body()
        self.done.set()
        return PlainTextResponse("received")


def _maker_page(_: Request) -> Response:
    # Isolated like the app's pages, so the snapshot is made where pages restore it.
    return HTMLResponse(
        "<!doctype html><title>making the runtime snapshot</title>"
        '<script type="module" src="/js/snapshot-maker.js"></script>',
        headers={name.decode(): value.decode() for name, value in SECURITY_HEADERS},
    )


def _serve(app: Starlette, port: int) -> tuple[uvicorn.Server, threading.Thread]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise SnapshotMakerError("the set-up server did not start")
        time.sleep(0.05)
    return server, thread


# A browser opening the maker page: (address, profile folder) -> its process.
Launch = Callable[[str, str], "subprocess.Popen[bytes]"]


def _make(paths: Paths, name: str, browser_name: str, launch: Launch) -> Path:
    """Makes (or finds) snapshot `name` of the current engine build in the browser `launch`
    starts; raises SnapshotMakerError."""
    digest = ensure_engine_bundle(paths).digest
    existing = snapshot_path(paths, digest, name)
    if existing.is_file():
        return existing
    upload = _Upload(secrets.token_urlsafe(24))
    app = Starlette(
        routes=[
            Route(MAKER_PATH, _maker_page),
            Route(MAKER_PATH, upload.receive, methods=["POST"]),
            Mount("/", app=create_app(paths)),
        ]
    )
    port = free_port()
    server, thread = _serve(app, port)
    upload_url = quote(f"{MAKER_PATH}?token={upload.token}", safe="")
    with tempfile.TemporaryDirectory(prefix="pib-snapshot-profile-") as profile:
        browser = launch(f"http://127.0.0.1:{port}{MAKER_PATH}?upload={upload_url}", profile)
        try:
            if not upload.done.wait(MAKE_TIMEOUT_S):
                raise SnapshotMakerError(
                    f"no snapshot from {browser_name} within {MAKE_TIMEOUT_S:.0f} s"
                )
        finally:
            browser.kill()
            browser.wait()
            server.should_exit = True
            thread.join(timeout=30)
    if upload.data is None:
        raise SnapshotMakerError(upload.failure)
    try:
        stored = store_snapshot(paths, digest, upload.data)
    except SnapshotRejected as exc:
        raise SnapshotMakerError(f"the upload was refused: {exc}") from exc
    if stored.name != name:
        raise SnapshotMakerError(f"{browser_name} made {stored.name}, not {name}")
    return stored


def make_runtime_snapshot(paths: Paths, chromium: Path) -> Path:
    """Makes (or finds) the snapshot of the current engine build; raises SnapshotMakerError."""

    def launch(address: str, profile: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [str(chromium), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", address],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    return _make(paths, SNAPSHOT_NAME, "Chromium", launch)


def make_webkit_snapshot(paths: Paths, minibrowser: Path) -> Path:
    """Makes (or finds) the snapshot for browsers without JSPI in WebKitGTK's MiniBrowser, on an
    X display of its own; raises SnapshotMakerError."""
    with xvfb_display() as display:

        def launch(address: str, profile: str) -> subprocess.Popen[bytes]:
            # Its caches and data go to the throwaway profile, not the user's home.
            folders = {f"XDG_{kind}_HOME": f"{profile}/{kind}" for kind in ("CACHE", "DATA")}
            return subprocess.Popen(
                [str(minibrowser), address],
                env={**os.environ, **folders, "DISPLAY": display},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )

        return _make(paths, NO_JSPI_SNAPSHOT_NAME, "WebKitGTK's MiniBrowser", launch)
