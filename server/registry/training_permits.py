"""Issuing training permits: the caps of limits.py, then the client's hourly and daily budgets.

Each permit granted is recorded (client, time, work = epochs x samples), so the budgets hold
across server processes sharing a database; the check and the record happen in one transaction
locked on the client.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable

from py_in_browser import permits
from py_in_browser.limits import LimitExceededError, Limits, TrainingConfig, validate_training
from server.registry.config import Budgets
from server.registry.database import Database

HOUR, DAY = 3600.0, 86400.0


class BudgetExceededError(Exception):
    """The client has spent a budget; `retry_after` seconds until enough of it comes back."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = max(1, math.ceil(retry_after))


class PermitIssuer:
    def __init__(
        self,
        database: Database,
        limits: Limits,
        budgets: Budgets,
        key: bytes,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.database, self.limits, self.budgets = database, limits, budgets
        self.key, self.clock = key, clock

    def issue(self, client: str, config: TrainingConfig) -> tuple[str, permits.Permit]:
        """A signed permit; LimitExceededError (a cap) or BudgetExceededError (a budget)."""
        validate_training(config, self.limits)
        budgets = self.budgets
        if config.work > budgets.work_per_day:
            raise LimitExceededError(
                "work_per_day", config.work, budgets.work_per_day, "epochs x samples"
            )
        with self.database.transaction() as tx:
            tx.lock("permits:" + client)
            now = self.clock()
            hour = tx.execute(
                "SELECT count(*), min(issued_at) FROM permit_grants "
                "WHERE client = ? AND issued_at > ?",
                (client, now - HOUR),
            )[0]
            if hour[0] >= budgets.permits_per_hour:
                raise BudgetExceededError(
                    f"{hour[0]} permits in the last hour; the budget is "
                    f"{budgets.permits_per_hour} per hour",
                    hour[1] + HOUR - now,
                )
            day = tx.execute(
                "SELECT issued_at, work FROM permit_grants WHERE client = ? AND issued_at > ? "
                "ORDER BY issued_at",
                (client, now - DAY),
            )
            spent = sum(int(work) for _, work in day)
            if spent + config.work > budgets.work_per_day:
                raise BudgetExceededError(
                    f"epochs x samples: {spent:,} spent today + {config.work:,} asked is over "
                    f"the daily budget of {budgets.work_per_day:,}",
                    self._wait_for(day, spent + config.work - budgets.work_per_day, now),
                )
            permit = permits.Permit(
                id=uuid.uuid4().hex,
                client=client,
                issued_at=now,
                expires_at=now + budgets.permit_lifetime_s,
                max_epochs=config.epochs,
                max_samples=config.samples,
                max_batch_size=config.batch_size,
                param_count=config.model.param_count,
                input_shape=config.model.input_shape,
            )
            tx.execute(
                "INSERT INTO permit_grants (id, client, issued_at, work) VALUES (?, ?, ?, ?)",
                (permit.id, client, now, config.work),
            )
        return permits.sign(permit, self.key), permit

    @staticmethod
    def _wait_for(grants: list[tuple[float, int]], excess: int, now: float) -> float:
        """Seconds until grants totalling at least `excess` work leave the 24-hour window."""
        freed = 0
        for issued_at, work in grants:
            freed += int(work)
            if freed >= excess:
                return issued_at + DAY - now
        return DAY
