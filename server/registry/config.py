"""The registry's settings: where it stores, the caps it enforces, the budgets and rate limits.

Read from the environment by `RegistryConfig.from_env()`; tests build one directly.

PIB_DATA_DIR           folder of the SQLite database (default: data/ in the repository)
PIB_DATABASE_URL       postgresql://... to use PostgreSQL instead (several server processes
                       then share models, rate limits and budgets)
PIB_REQUIRE_PERMITS    1 to make pages ask for a training permit before fit (default 0)
PIB_PERMITS_PER_HOUR   permits one client may get per hour (default 60)
PIB_WORK_PER_DAY       epochs x samples one client may be granted per day (default 50,000,000)
PIB_PERMIT_LIFETIME_S  seconds a permit stays valid (default 3600)
PIB_PERMIT_KEY         HMAC key of permits; by default one is generated and kept in the database,
                       so every process sharing the database signs alike
PIB_RATE_LIMITS        per-client buckets as kind=burst/per_minute, comma-separated, e.g.
                       "upload=10/10,delete=20/30,permit=20/30" (kinds not named keep defaults)
PIB_MAX_CONCURRENT_UPLOADS  uploads received at once (default 8), by all the server processes
                       sharing a PostgreSQL registry, or by the one process on SQLite
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from py_in_browser.limits import DEFAULT_LIMITS, Limits
from server.settings import REPO_ROOT


@dataclass(frozen=True)
class RateLimit:
    """A token bucket: `burst` requests at once, refilled at `per_minute`."""

    burst: int
    per_minute: float

    @property
    def per_second(self) -> float:
        return self.per_minute / 60.0


@dataclass(frozen=True)
class Budgets:
    """How much training one client may start: permits per hour, epochs x samples per day."""

    permits_per_hour: int = 60
    work_per_day: int = 50_000_000
    permit_lifetime_s: float = 3600.0


@dataclass(frozen=True)
class RegistryConfig:
    data_dir: Path = REPO_ROOT / "data"
    database_url: str | None = None
    limits: Limits = DEFAULT_LIMITS
    budgets: Budgets = field(default_factory=Budgets)
    require_permits: bool = False
    permit_key: bytes | None = None
    # Per client and per kind of write (upload, delete, permit).
    rate_limits: dict[str, RateLimit] = field(
        default_factory=lambda: {
            "upload": RateLimit(burst=10, per_minute=10),
            "delete": RateLimit(burst=20, per_minute=30),
            "permit": RateLimit(burst=20, per_minute=30),
        }
    )
    # Uploads being received at once (upload_slots.py); more are answered 503 + Retry-After.
    max_concurrent_uploads: int = 8
    # Multipart overhead allowed on top of the model file cap (field names, boundaries, text).
    form_overhead_bytes: int = 64 * 1024
    # Every other write endpoint's body cap (JSON bodies are small).
    max_json_body_bytes: int = 16 * 1024

    @property
    def max_upload_bytes(self) -> int:
        return self.limits.max_model_file_bytes + self.form_overhead_bytes

    @property
    def sqlite_path(self) -> Path:
        return self.data_dir / "registry.sqlite3"

    @classmethod
    def from_env(cls) -> RegistryConfig:
        env = os.environ
        key = env.get("PIB_PERMIT_KEY")
        defaults = cls()
        budgets = Budgets(
            permits_per_hour=int(
                env.get("PIB_PERMITS_PER_HOUR", defaults.budgets.permits_per_hour)
            ),
            work_per_day=int(env.get("PIB_WORK_PER_DAY", defaults.budgets.work_per_day)),
            permit_lifetime_s=float(
                env.get("PIB_PERMIT_LIFETIME_S", defaults.budgets.permit_lifetime_s)
            ),
        )
        return cls(
            data_dir=Path(env.get("PIB_DATA_DIR", REPO_ROOT / "data")),
            database_url=env.get("PIB_DATABASE_URL") or None,
            require_permits=env.get("PIB_REQUIRE_PERMITS", "0") == "1",
            budgets=budgets,
            permit_key=key.encode() if key else None,
            rate_limits={
                **defaults.rate_limits,
                **parse_rate_limits(env.get("PIB_RATE_LIMITS", "")),
            },
            max_concurrent_uploads=int(
                env.get("PIB_MAX_CONCURRENT_UPLOADS", defaults.max_concurrent_uploads)
            ),
        )


def parse_rate_limits(text: str) -> dict[str, RateLimit]:
    """ "upload=10/10,permit=20/30" -> {"upload": RateLimit(10, 10), "permit": RateLimit(20, 30)}."""
    limits = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        try:
            kind, spec = item.split("=")
            burst, per_minute = spec.split("/")
            limits[kind.strip()] = RateLimit(int(burst), float(per_minute))
        except ValueError as exc:
            raise ValueError(
                f"PIB_RATE_LIMITS: expected kind=burst/per_minute items, got {item!r}"
            ) from exc
    return limits
