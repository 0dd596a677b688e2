"""A dev server in a child process on a free loopback port, for the e2e tests and the benchmarks;
RegistryProcess runs one with a given registry database (live registry tests, registry bench)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from server.settings import REPO_ROOT


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def background_dev_server(
    start_timeout_s: float = 300, env: dict[str, str] | None = None
) -> Iterator[str]:
    """Yields the base URL once /api/health answers (a cold cache makes serve run setup first);
    raises RuntimeError if the server exits or stays silent; stops it afterwards. `env` adds
    settings (e.g. the registry's PIB_* variables of server/registry/config.py)."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "server.cli", "serve", "--port", str(port)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
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


class RegistryProcess:
    """`start()` waits until /api/models answers; `kill()` is SIGKILL, `stop()` a clean stop.

    The listening socket is bound here and handed to uvicorn (--fd), so no other process can
    take the port between choosing it and serving on it (tests of several sessions share the
    machine, and a restart must reach this server, not a stranger on a recycled port).
    """

    def __init__(self, data_dir: Path, database_url: str | None, **env: str) -> None:
        self.env = {
            **os.environ,
            "PIB_DATA_DIR": str(data_dir),
            "PIB_DATABASE_URL": database_url or "",
            **env,
        }
        self.url = ""
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60) -> RegistryProcess:
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(128)
            self.url = f"http://127.0.0.1:{listener.getsockname()[1]}"
            command = [sys.executable, "-m", "uvicorn", "--factory", "server.main:create_app"]
            command += ["--fd", str(listener.fileno()), "--log-level", "warning"]
            self.process = subprocess.Popen(
                command, cwd=REPO_ROOT, env=self.env, pass_fds=[listener.fileno()]
            )
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/api/models", timeout=2):
                    return self
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the registry server did not start") from None
                time.sleep(0.1)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self, timeout_s: float = 60) -> None:
        """A clean stop (SIGTERM: uvicorn finishes the requests in flight), SIGKILL past
        `timeout_s` (a loaded machine slows the shutdown; a stuck one must not hang the tests)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
