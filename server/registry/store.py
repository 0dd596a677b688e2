"""Stored models: metadata rows and file bytes, written in one transaction, owned by a token.

The owner token is returned once, at creation; only its sha256 is stored (it carries 256 random
bits, so a fast hash is enough), and it is compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
import uuid
from dataclasses import dataclass
from typing import Any

from server.registry.database import Database


@dataclass(frozen=True)
class StoredModel:
    id: str
    name: str
    description: str
    metadata: dict[str, Any]
    size: int
    sha256: str
    created_at: float


def _is_model_id(text: str) -> bool:
    """Whether `text` could name a stored model (ids are uuid4 hex): anything else is answered
    "no such model" without a query (PostgreSQL would refuse a NUL character in it)."""
    return len(text) == 32 and all(c in "0123456789abcdef" for c in text)


class NotOwnerError(Exception):
    """The owner token does not match the model's."""


def _token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


_COLUMNS = "id, name, description, metadata, size, sha256, created_at"


def _row(row: tuple[Any, ...]) -> StoredModel:
    model_id, name, description, metadata, size, digest, created_at = row
    return StoredModel(
        model_id, name, description, json.loads(metadata), int(size), digest, float(created_at)
    )


class ModelStore:
    def __init__(self, database: Database) -> None:
        self.database = database

    def create(
        self, name: str, description: str, metadata: dict[str, Any], data: bytes
    ) -> tuple[StoredModel, str]:
        """Stores a model; returns it and its owner token (which is not kept)."""
        token = secrets.token_urlsafe(32)
        model = StoredModel(
            id=uuid.uuid4().hex,
            name=name,
            description=description,
            metadata=metadata,
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            created_at=time.time(),
        )
        with self.database.transaction() as tx:
            tx.execute(
                f"INSERT INTO models ({_COLUMNS}, owner_token_sha256) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    model.id,
                    model.name,
                    model.description,
                    json.dumps(model.metadata),
                    model.size,
                    model.sha256,
                    model.created_at,
                    _token_digest(token),
                ),
            )
            tx.execute("INSERT INTO model_files (model_id, data) VALUES (?, ?)", (model.id, data))
        return model, token

    def list(self, name: str | None, limit: int, offset: int) -> tuple[list[StoredModel], int]:
        """Newest first; `name` filters by case-insensitive substring."""
        where, params = "", []
        if name:
            where = "WHERE lower(name) LIKE ? ESCAPE '\\'"
            params.append(f"%{_escape_like(name.lower())}%")
        with self.database.transaction(write=False) as tx:
            total = int(tx.execute(f"SELECT count(*) FROM models {where}", params)[0][0])
            rows = tx.execute(
                f"SELECT {_COLUMNS} FROM models {where} "
                "ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?",
                [*params, limit, offset],
            )
        return [_row(row) for row in rows], total

    def get(self, model_id: str) -> StoredModel | None:
        if not _is_model_id(model_id):
            return None
        with self.database.transaction(write=False) as tx:
            rows = tx.execute(f"SELECT {_COLUMNS} FROM models WHERE id = ?", (model_id,))
        return _row(rows[0]) if rows else None

    def file(self, model_id: str) -> tuple[StoredModel, bytes] | None:
        if not _is_model_id(model_id):
            return None
        with self.database.transaction(write=False) as tx:
            rows = tx.execute(
                f"SELECT {_COLUMNS}, data FROM models JOIN model_files ON model_id = id "
                "WHERE id = ?",
                (model_id,),
            )
        return (_row(rows[0][:-1]), bytes(rows[0][-1])) if rows else None

    def delete(self, model_id: str, token: str) -> bool:
        """False when there is no such model; NotOwnerError when the token is not its owner's."""
        if not _is_model_id(model_id):
            return False
        with self.database.transaction() as tx:
            rows = tx.execute("SELECT owner_token_sha256 FROM models WHERE id = ?", (model_id,))
            if not rows:
                return False
            if not hmac.compare_digest(rows[0][0], _token_digest(token)):
                raise NotOwnerError(model_id)
            tx.execute("DELETE FROM model_files WHERE model_id = ?", (model_id,))
            tx.execute("DELETE FROM models WHERE id = ?", (model_id,))
        return True
