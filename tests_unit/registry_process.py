"""The dev server as a real uvicorn process on a loopback port, for the registry's live tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from server.background import free_port
from server.settings import REPO_ROOT


class RegistryProcess:
    """`start()` waits until /api/health answers; `kill()` is SIGKILL, `stop()` a clean stop."""

    def __init__(self, data_dir: Path, database_url: str | None, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "PIB_DATA_DIR": str(data_dir),
            "PIB_DATABASE_URL": database_url or "",
            **env,
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60) -> RegistryProcess:
        command = [sys.executable, "-m", "uvicorn", "--factory", "server.main:create_app"]
        command += ["--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning"]
        self.process = subprocess.Popen(command, cwd=REPO_ROOT, env=self.env)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                httpx.get(f"{self.url}/api/models", timeout=2).raise_for_status()
                return self
            except httpx.HTTPError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the registry server did not start") from None
                time.sleep(0.1)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
