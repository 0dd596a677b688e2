"""A throwaway PostgreSQL server for tests and benchmarks: initdb in a temporary folder, pg_ctl
on a free loopback port, no system service touched. Debian's postgresql package provides the binaries
(`make test` installs it); as root the server runs as the `postgres` user that package creates,
since PostgreSQL refuses to run as root."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

from server.background import free_port


def postgres_bin_dir() -> Path:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=_version)
    if not candidates:
        raise RuntimeError(
            "PostgreSQL is not installed: run `make postgres` (apt-get install postgresql)"
        )
    return Path(candidates[-1]).parent


def _version(path: str) -> int:
    return int(Path(path).parent.parent.name)


class PostgresServer:
    """Started by `start()`, removed with its folder by `stop()`; `database()` gives fresh ones."""

    def __init__(self) -> None:
        self.bin = postgres_bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="pib-postgres-"))
        self.port = free_port()
        self.as_root = os.geteuid() == 0

    def _run(self, *args: str) -> None:
        command = [str(self.bin / args[0]), *args[1:]]
        if self.as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        if self.as_root:
            shutil.chown(self.root, "postgres", "postgres")
        data = self.root / "data"
        self._run("initdb", "-D", str(data), "-A", "trust", "-U", "pib", "-E", "UTF8", "--no-sync")
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c max_connections=200"
        )
        self._run(
            "pg_ctl", "-D", str(data), "-l", str(self.root / "log"), "-o", options, "-w", "start"
        )

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://pib@127.0.0.1:{self.port}/{database}"

    def database(self) -> str:
        """The URL of a new, empty database."""
        import psycopg

        name = "t_" + uuid.uuid4().hex
        with psycopg.connect(self.url(), autocommit=True) as connection:
            connection.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
