"""The dev server for a benchmark run: runtime set up first, then `serve` on a free loopback port."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from server.background import background_dev_server

REPO_ROOT = Path(__file__).resolve().parent.parent
VENDOR_CHECK = REPO_ROOT / "bench/node_modules/@tensorflow/tfjs/dist/tf.min.js"


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
    try:
        with background_dev_server(start_timeout_s=120) as url:
            yield url
    except RuntimeError as exc:
        raise SystemExit(f"error: {exc}") from exc
