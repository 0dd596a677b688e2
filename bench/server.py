"""The dev server for a benchmark run: runtime set up first, then `serve` on a free loopback port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
VENDOR_CHECK = REPO_ROOT / "bench/node_modules/@tensorflow/tfjs/dist/tf.min.js"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def ensure_ready() -> None:
    """TF.js installed (`make bench` does it) and the Pyodide runtime cached (`setup` is idempotent)."""
    if not VENDOR_CHECK.is_file():
        raise SystemExit(
            "error: TensorFlow.js is not installed in bench/node_modules: run `make bench`, "
            "or `npm ci --prefix bench`"
        )
    subprocess.run([sys.executable, "-m", "server.cli", "setup"], cwd=REPO_ROOT, check=True)


@contextmanager
def dev_server() -> Iterator[str]:
    """Yields the base URL of a dev server that answers /api/health; stops it afterwards."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "server.cli", "serve", "--port", str(port)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/health", timeout=2):
                    break
            except OSError:
                if process.poll() is not None:
                    raise SystemExit(
                        f"error: the dev server exited with {process.returncode}"
                    ) from None
                if time.monotonic() > deadline:
                    raise SystemExit("error: the dev server did not answer /api/health") from None
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
