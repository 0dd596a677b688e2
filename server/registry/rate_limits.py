"""Per-client token buckets kept in the database, so every server process draws from the same one.

A bucket holds up to `burst` tokens and refills at `per_minute`; a write takes one token or is
refused with the seconds until one is back (the Retry-After of a 429). The read-modify-write of a
bucket runs in one transaction under a lock on its key, so concurrent requests, from any
process, never spend the same token twice.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from server.registry.config import RateLimit
from server.registry.database import Database


class RateLimiter:
    def __init__(self, database: Database, clock: Callable[[], float] = time.time) -> None:
        self.database, self.clock = database, clock

    def take(self, kind: str, client: str, limit: RateLimit) -> float | None:
        """Takes a token; None when granted, else the seconds to wait before retrying."""
        key = f"{kind}:{client}"
        with self.database.transaction() as tx:
            tx.lock("rate:" + key)
            now = self.clock()
            rows = tx.execute("SELECT tokens, updated_at FROM rate_buckets WHERE key = ?", (key,))
            if rows:
                tokens, updated = rows[0]
                tokens = min(
                    float(limit.burst), tokens + max(0.0, now - updated) * limit.per_second
                )
            else:
                tokens = float(limit.burst)
            if tokens < 1.0:
                return math.ceil((1.0 - tokens) / limit.per_second) if limit.per_second else 3600.0
            tx.execute(
                "INSERT INTO rate_buckets (key, tokens, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT (key) DO UPDATE SET tokens = excluded.tokens, "
                "updated_at = excluded.updated_at",
                (key, tokens - 1.0, now),
            )
        return None
