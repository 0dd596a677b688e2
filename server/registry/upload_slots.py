"""The cap on uploads received at once, for the whole deployment.

On PostgreSQL the cap holds across every server process sharing the database: an upload holds
one of `capacity` session-level advisory locks, on a connection of its own, until it ends. A
killed process's connections drop and PostgreSQL frees their locks with them, so no slot leaks.
On SQLite (one machine, normally one server process) the slots are a counter in the process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from server.registry.database import Database

# The advisory-lock key space of the upload slots: (UPLOAD_SLOTS_SPACE, slot number). Two-int
# keys never meet the one-bigint keys of Database.transaction's locks.
UPLOAD_SLOTS_SPACE = 0x5049_4255

Release = Callable[[], None]


class UploadSlots:
    def __init__(self, database: Database, capacity: int) -> None:
        self.database, self.capacity = database, capacity
        self._in_flight = 0
        self._lock = threading.Lock()

    def acquire(self) -> Release | None:
        """Takes a slot: the function that gives it back, or None when all are in use."""
        if self.database.dialect == "postgresql":
            return self.database.hold_advisory_lock(UPLOAD_SLOTS_SPACE, self.capacity)
        with self._lock:
            if self._in_flight >= self.capacity:
                return None
            self._in_flight += 1
        return self._release_local

    def _release_local(self) -> None:
        with self._lock:
            self._in_flight -= 1
