"""Makes the runtime snapshot the dev server offers first visits, in headless Chromium, at set-up.

The snapshot must come from a browser: an image made in Node restores, but Node lacks JSPI, and
Pyodide's start-up records that lack in the image, which breaks synchronous calls in Chromium
and Firefox (both have JSPI). So set-up serves the app on a loopback port, opens
web/js/snapshot-maker.js in headless Chromium (the page makes the snapshot with the same code a
browser uses for its own after a first visit) and takes the upload it posts back, guarded by a
one-time token. Without Chromium nothing is made, and pages start Python afresh on a first visit.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
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
from server.runtime_snapshot import SnapshotRejected, snapshot_path, store_snapshot
from server.settings import Paths

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


class SnapshotMakerError(RuntimeError):
    """The snapshot was not made; the message says why."""


def find_chromium() -> Path | None:
    """PIB_CHROMIUM, else Debian's /usr/bin/chromium (`make browsers`), else None."""
    named = os.environ.get("PIB_CHROMIUM")
    if named:
        return Path(named)
    found = shutil.which("chromium")
    return Path(found) if found else None


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


def make_runtime_snapshot(paths: Paths, chromium: Path) -> Path:
    """Makes (or finds) the snapshot of the current engine build; raises SnapshotMakerError."""
    digest = ensure_engine_bundle(paths).digest
    existing = snapshot_path(paths, digest)
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
        browser = subprocess.Popen(
            [
                str(chromium),
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                f"http://127.0.0.1:{port}{MAKER_PATH}?upload={upload_url}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            if not upload.done.wait(MAKE_TIMEOUT_S):
                raise SnapshotMakerError(f"no snapshot from Chromium within {MAKE_TIMEOUT_S:.0f} s")
        finally:
            browser.kill()
            browser.wait()
            server.should_exit = True
            thread.join(timeout=30)
    if upload.data is None:
        raise SnapshotMakerError(upload.failure)
    try:
        return store_snapshot(paths, digest, upload.data)
    except SnapshotRejected as exc:
        raise SnapshotMakerError(f"the upload was refused: {exc}") from exc
