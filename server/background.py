"""A dev server in a child process on a free loopback port, for the e2e tests and the benchmarks."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

from server.settings import REPO_ROOT


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def background_dev_server(start_timeout_s: float = 300) -> Iterator[str]:
    """Yields the base URL once /api/health answers (a cold cache makes serve run setup first);
    raises RuntimeError if the server exits or stays silent; stops it afterwards."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "server.cli", "serve", "--port", str(port)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/health", timeout=2):
                    break
            except OSError:
                if process.poll() is not None:
                    raise RuntimeError(f"the dev server exited with {process.returncode}") from None
                if time.monotonic() > deadline:
                    raise RuntimeError("the dev server did not answer /api/health") from None
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
