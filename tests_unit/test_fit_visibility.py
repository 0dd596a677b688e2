"""fit on a hidden page (recovery.py's pause), in CPython: the worker's set_hidden is the input
the page gives; the fit stops after its current step and goes on, unchanged, once visible."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

import py_in_browser as pib
from py_in_browser import visibility
from py_in_browser.testing import recovery_runs


class Steps(pib.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.steps = 0
        self.events: list[dict[str, Any]] = []

    def on_batch_end(self, batch: int, logs: dict[str, Any]) -> None:
        self.steps += 1

    def on_runtime_event(self, event: dict[str, Any]) -> None:
        self.events.append(event)


async def _weights(net: pib.Sequential) -> list[np.ndarray]:
    return list(await net.get_weights())


def test_a_hidden_page_pauses_fit_after_its_step_and_visible_resumes_it_unchanged() -> None:
    async def main() -> tuple[list[np.ndarray], list[np.ndarray], Steps, int]:
        x, y = recovery_runs.data()
        reference = recovery_runs.model()
        await reference.fit(x, y, epochs=2, batch_size=recovery_runs.BATCH)
        net = recovery_runs.model()
        seen = Steps()
        visibility.set_hidden(True)
        try:
            task = asyncio.ensure_future(
                net.fit(x, y, epochs=2, batch_size=recovery_runs.BATCH, callbacks=[seen])
            )
            await asyncio.sleep(0.5)
            while_hidden = seen.steps
        finally:
            visibility.set_hidden(False)
        await task
        return await _weights(reference), await _weights(net), seen, while_hidden

    expected, got, seen, while_hidden = asyncio.run(main())
    assert while_hidden == 1  # the step under way finished, no other ran
    assert [e["type"] for e in seen.events] == ["paused", "resumed"]
    assert seen.events[0]["step"] == 1 and seen.events[0]["stored"] is False  # no IndexedDB
    assert seen.steps == 24
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g, e)


def test_on_hidden_continue_trains_on_and_other_policies_are_refused() -> None:
    async def main() -> int:
        x, y = recovery_runs.data()
        net = recovery_runs.model()
        seen = Steps()
        visibility.set_hidden(True)
        try:
            await net.fit(
                x, y, batch_size=recovery_runs.BATCH, callbacks=[seen], on_hidden="continue"
            )
            with pytest.raises(ValueError, match="on_hidden must be one of"):
                await net.fit(x, y, on_hidden="stop")
        finally:
            visibility.set_hidden(False)
        return seen.steps

    assert asyncio.run(main()) == 12


def test_resume_auto_without_a_stored_checkpoint_starts_from_the_beginning() -> None:
    async def main() -> list[int]:
        x, y = recovery_runs.data()
        net = recovery_runs.model()
        history = await net.fit(x, y, epochs=2, batch_size=recovery_runs.BATCH, resume="auto")
        return list(history.epoch)

    assert asyncio.run(main()) == [0, 1]
