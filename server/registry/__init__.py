"""The model registry and training permits: storage, validation, budgets and rate limits.

`Registry` bundles what the routers need; server/routers/ holds the HTTP side.
"""

from __future__ import annotations

import threading

from server.registry.config import RegistryConfig
from server.registry.database import Database
from server.registry.rate_limits import RateLimiter
from server.registry.store import ModelStore
from server.registry.training_permits import PermitIssuer
from server.registry.upload_slots import UploadSlots


class Registry:
    def __init__(self, config: RegistryConfig) -> None:
        self.config = config
        if config.database_url:
            self.database = Database(
                url=config.database_url, held_connections=config.max_concurrent_uploads
            )
        else:
            self.database = Database(sqlite_path=config.sqlite_path)
        self.models = ModelStore(self.database)
        self.upload_slots = UploadSlots(self.database, config.max_concurrent_uploads)
        self.rate_limiter = RateLimiter(self.database)
        key = config.permit_key or self.database.secret("permit_key").encode()
        self.permits = PermitIssuer(self.database, config.limits, config.budgets, key)

    def close(self) -> None:
        self.database.close()


class LazyRegistry:
    """Opens the registry on first use, so serving pages never creates a database."""

    def __init__(self, config: RegistryConfig) -> None:
        self.config = config
        self._registry: Registry | None = None
        self._lock = threading.Lock()

    def get(self) -> Registry:
        with self._lock:
            if self._registry is None:
                self._registry = Registry(self.config)
            return self._registry

    def close(self) -> None:
        with self._lock:
            if self._registry is not None:
                self._registry.close()
                self._registry = None
