"""One SQL interface over SQLite (default) and PostgreSQL, with the registry's versioned schema.

Queries are written once with `?` placeholders; the PostgreSQL side rewrites them to psycopg's
`%s`. Every unit of work is a `transaction()`: on SQLite a fresh connection with BEGIN IMMEDIATE
(one writer at a time, readers never blocked thanks to WAL), on PostgreSQL a pooled connection.
A write is only visible once its transaction commits, so a killed server leaves no half-written
row behind, and both databases recover on their own at the next start.

The schema is versioned by the table schema_version: MIGRATIONS[i] brings version i to i + 1 and
runs once, under a lock, when the server starts (several processes may start at once).
"""

from __future__ import annotations

import contextlib
import secrets
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

# Types differ only in the binary column; {blob} is filled per dialect.
MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE models (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            description TEXT NOT NULL,
            metadata TEXT NOT NULL,
            size BIGINT NOT NULL,
            sha256 TEXT NOT NULL,
            owner_token_sha256 TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL
        )""",
        "CREATE INDEX models_newest ON models (created_at DESC, id DESC)",
        """CREATE TABLE model_files (
            model_id TEXT PRIMARY KEY REFERENCES models (id) ON DELETE CASCADE,
            data {blob} NOT NULL
        )""",
        """CREATE TABLE rate_buckets (
            key TEXT PRIMARY KEY,
            tokens DOUBLE PRECISION NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL
        )""",
        """CREATE TABLE permit_grants (
            id TEXT PRIMARY KEY,
            client TEXT NOT NULL,
            issued_at DOUBLE PRECISION NOT NULL,
            work BIGINT NOT NULL
        )""",
        "CREATE INDEX permit_grants_by_client ON permit_grants (client, issued_at)",
        "CREATE TABLE secrets (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ],
]
SCHEMA_VERSION = len(MIGRATIONS)


class Transaction(Protocol):
    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    def lock(self, key: str) -> None: ...


class _SqliteTransaction:
    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.connection.execute(sql, tuple(params)).fetchall()

    def lock(self, key: str) -> None:
        """Nothing to do: BEGIN IMMEDIATE already holds SQLite's one write lock."""


class _PostgresTransaction:
    def __init__(self, connection: Any) -> None:
        self.connection = connection

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cursor = self.connection.execute(sql.replace("?", "%s"), tuple(params))
        return cursor.fetchall() if cursor.description is not None else []

    def lock(self, key: str) -> None:
        """Serialises transactions on `key` across processes until this one ends."""
        self.connection.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (key,))


class Database:
    """SQLite at `sqlite_path`, or PostgreSQL at `url`; migrated to SCHEMA_VERSION on open."""

    def __init__(
        self, *, sqlite_path: Path | None = None, url: str | None = None, held_connections: int = 0
    ) -> None:
        """`held_connections`: PostgreSQL connections that hold_advisory_lock may keep at once,
        on top of those transactions use."""
        if (sqlite_path is None) == (url is None):
            raise ValueError("Database needs exactly one of sqlite_path and url")
        self.dialect = "sqlite" if url is None else "postgresql"
        self.sqlite_path = sqlite_path
        self._pool: Any = None
        if url is not None:
            from psycopg_pool import ConnectionPool

            self._pool = ConnectionPool(
                url, min_size=1, max_size=16 + held_connections, open=True, timeout=30
            )
        else:
            assert sqlite_path is not None
            sqlite_path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.closing(sqlite3.connect(sqlite_path)) as connection:
                connection.execute("PRAGMA journal_mode=WAL")
        try:
            self._migrate()
        except BaseException:
            self.close()  # a refused schema must not leave the pool's threads behind
            raise

    @property
    def blob_type(self) -> str:
        return "BLOB" if self.dialect == "sqlite" else "BYTEA"

    @contextlib.contextmanager
    def transaction(self, write: bool = True) -> Iterator[Transaction]:
        """Commits when the block ends normally, rolls back when it raises. On SQLite a read-only
        one (write=False) takes no lock: with WAL it reads the last commit while writers work."""
        if self._pool is not None:
            with self._pool.connection() as connection, connection.transaction():
                yield _PostgresTransaction(connection)
            return
        assert self.sqlite_path is not None
        connection = sqlite3.connect(self.sqlite_path, timeout=30, isolation_level=None)
        try:
            connection.execute("PRAGMA busy_timeout=30000")
            connection.execute("PRAGMA foreign_keys=ON")
            # With WAL, NORMAL still survives a killed process (only a power cut may lose the
            # last commits) and saves an fsync per transaction.
            connection.execute("PRAGMA synchronous=NORMAL")
            connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield _SqliteTransaction(connection)
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")
        finally:
            connection.close()

    def _migrate(self) -> None:
        with self.transaction() as tx:
            tx.lock("py_in_browser.registry.migrations")
            tx.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            rows = tx.execute("SELECT version FROM schema_version")
            version = rows[0][0] if rows else 0
            if not rows:
                tx.execute("INSERT INTO schema_version (version) VALUES (0)")
            if version > SCHEMA_VERSION:
                raise RuntimeError(
                    f"the registry database has schema version {version}, newer than this "
                    f"server's {SCHEMA_VERSION}: update the server"
                )
            for statements in MIGRATIONS[version:]:
                for statement in statements:
                    tx.execute(statement.format(blob=self.blob_type))
            tx.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))

    def schema_version(self) -> int:
        with self.transaction(write=False) as tx:
            return int(tx.execute("SELECT version FROM schema_version")[0][0])

    def secret(self, name: str) -> str:
        """A random secret created once and shared by every process using this database."""
        with self.transaction() as tx:
            tx.execute(
                "INSERT INTO secrets (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
                (name, secrets.token_hex(32)),
            )
            return str(tx.execute("SELECT value FROM secrets WHERE name = ?", (name,))[0][0])

    def hold_advisory_lock(self, space: int, count: int) -> Callable[[], None] | None:
        """PostgreSQL: takes the first free one of the session-level advisory locks
        (space, 0 .. count - 1) on a connection kept until the returned function releases it;
        None when all are held, by any process. A dropped connection frees its lock."""
        import psycopg

        assert self._pool is not None, "advisory locks are PostgreSQL's"
        connection = self._pool.getconn()
        held = None
        try:
            connection.autocommit = True
            for slot in range(count):
                taken = connection.execute("SELECT pg_try_advisory_lock(%s, %s)", (space, slot))
                if taken.fetchone()[0]:
                    held = slot
                    break
        finally:
            if held is None:
                connection.autocommit = False
                self._pool.putconn(connection)
        if held is None:
            return None

        def release() -> None:
            try:
                connection.execute("SELECT pg_advisory_unlock(%s, %s)", (space, held))
                connection.autocommit = False
            except psycopg.Error:
                connection.close()  # its lock goes with it; the pool replaces it
            self._pool.putconn(connection)

        return release

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
