"""Fixtures shared by the registry tests: one PostgreSQL server per session, and a registry
configuration on each database kind (the same tests run on SQLite and on PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from server.postgres_sandbox import PostgresServer
from server.registry.config import RegistryConfig


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def database_url(database_kind: str, request: pytest.FixtureRequest) -> str | None:
    """None for SQLite (a file under the test's data folder), else a fresh PostgreSQL database."""
    if database_kind == "sqlite":
        return None
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.database()


@pytest.fixture
def registry_config(database_url: str | None, tmp_path: Path) -> RegistryConfig:
    return RegistryConfig(data_dir=tmp_path / "data", database_url=database_url)
