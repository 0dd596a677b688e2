"""The shared caps (limits.py) and training permits (permits.py): errors name the cap or bound."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

import py_in_browser as pib
from py_in_browser import layers, permits
from py_in_browser.limits import (
    LimitExceededError,
    Limits,
    ModelSummary,
    TrainingConfig,
    validate_model,
    validate_training,
)

SMALL = ModelSummary(input_shape=(32, 32, 3), param_count=10_000, layer_count=4)
KEY = b"k" * 32


def config(**changes) -> TrainingConfig:
    fields = {"model": SMALL, "samples": 200, "epochs": 10, "batch_size": 32, **changes}
    return TrainingConfig(**fields)


def test_a_config_within_every_cap_passes() -> None:
    validate_training(config())


@pytest.mark.parametrize(
    ("changes", "cap"),
    [
        ({"epochs": 10_001}, "max_epochs"),
        ({"batch_size": 5000}, "max_batch_size"),
        ({"samples": 10**6}, "max_samples"),
        ({"model": ModelSummary((32, 32, 3), 10**8, 4)}, "max_params"),
        ({"model": ModelSummary((32, 32, 3), 10, 1000)}, "max_layers"),
        ({"model": ModelSummary((4000, 2), 10, 1)}, "max_input_side"),
        ({"model": ModelSummary((1000, 1000, 3), 10, 1)}, "max_input_elements"),
        ({"model": ModelSummary((256, 256, 4), 10, 1), "samples": 5000}, "max_dataset_bytes"),
    ],
)
def test_each_cap_is_named_when_exceeded(changes, cap: str) -> None:
    with pytest.raises(LimitExceededError, match=cap) as caught:
        validate_training(config(**changes))
    assert caught.value.cap == cap
    assert isinstance(caught.value, ValueError)


def test_a_streamed_training_holds_one_batch_of_its_samples() -> None:
    """The gesture trainer streams 3 x 5,000 samples at 64 px: over max_dataset_bytes held
    whole, one batch of them when streamed."""
    at_scale = {"model": ModelSummary((64, 64, 3), 10_000, 8), "samples": 12_750}
    with pytest.raises(LimitExceededError, match="max_dataset_bytes"):
        validate_training(config(**at_scale))
    streamed = config(**at_scale, streamed=True)
    assert streamed.dataset_bytes == 4 * 32 * 64 * 64 * 3
    validate_training(streamed)
    assert Limits().max_samples_per_class >= 5000


def test_non_positive_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="epochs must be a positive int"):
        validate_training(config(epochs=0))


def test_a_server_may_lower_the_caps() -> None:
    with pytest.raises(LimitExceededError, match="max_params=100"):
        validate_model(SMALL, Limits(max_params=100))


def test_summary_of_a_real_model() -> None:
    model = pib.Sequential([layers.Dense(3, input_shape=(5,)), layers.Dense(2)])
    assert ModelSummary.of(model) == ModelSummary((5,), 5 * 3 + 3 + 3 * 2 + 2, 2)


def permit(**changes) -> permits.Permit:
    fields = {
        "id": "p1",
        "client": "127.0.0.1",
        "issued_at": 1000.0,
        "expires_at": 2000.0,
        "max_epochs": 10,
        "max_samples": 200,
        "max_batch_size": 32,
        "param_count": SMALL.param_count,
        "input_shape": SMALL.input_shape,
        **changes,
    }
    return permits.Permit(**fields)


def test_a_signed_permit_verifies_and_reads_back() -> None:
    token = permits.sign(permit(), KEY)
    assert permits.verify(token, KEY, now=1500.0) == permit()
    assert permits.read(token) == permit()


def test_forged_or_expired_permits_fail() -> None:
    token = permits.sign(permit(), KEY)
    with pytest.raises(permits.PermitError, match="not issued by this server"):
        permits.verify(token, b"other key", now=1500.0)
    _claims, signature = token.split(".")
    bigger = permits.sign(permit(max_epochs=500), b"guess").split(".")[0]
    with pytest.raises(permits.PermitError, match="not issued by this server"):
        permits.verify(bigger + "." + signature, KEY, now=1500.0)
    with pytest.raises(permits.PermitError, match="expired"):
        permits.verify(token, KEY, now=2000.0)
    with pytest.raises(permits.PermitError, match="malformed"):
        permits.read("not-a-permit")


def test_the_engine_refuses_to_train_past_the_permit() -> None:
    token = permits.sign(permit(), KEY)
    permits.check_training(config(), token, required=True, now=1500.0)
    with pytest.raises(permits.PermitError, match="epochs=11 goes past the permit's bound 10"):
        permits.check_training(config(epochs=11), token, required=True, now=1500.0)
    with pytest.raises(permits.PermitError, match="batch_size=64"):
        permits.check_training(config(batch_size=64), token, required=True, now=1500.0)
    with pytest.raises(permits.PermitError, match="model of 10,000 parameters"):
        permits.check_training(
            config(model=ModelSummary((32, 32, 3), 20_000, 4)), token, required=True, now=1500.0
        )
    with pytest.raises(permits.PermitError, match="expired"):
        permits.check_training(config(), token, required=True, now=2500.0)


def test_no_permit_is_fine_only_when_none_is_required() -> None:
    permits.check_training(config(), None, required=False)
    with pytest.raises(permits.PermitError, match="requires a training permit"):
        permits.check_training(config(), None, required=True)


# ---- fit(..., permit=token): the engine side ----


def small_fit_model() -> pib.Sequential:
    model = pib.Sequential([layers.Dense(2, input_shape=(3,))], seed=0)
    model.compile(optimizer="sgd", loss="mse")
    return model


def grant_for(model: pib.Sequential, lifetime_s: float = 600.0, **changes) -> str:
    now = time.time()
    fields = {
        "issued_at": now,
        "expires_at": now + lifetime_s,
        "max_epochs": 3,
        "max_samples": 8,
        "max_batch_size": 4,
        "param_count": model.count_params(),
        "input_shape": (3,),
        **changes,
    }
    return permits.sign(permit(**fields), KEY)


@pytest.mark.parametrize(
    ("fit_args", "changes", "message"),
    [
        ({"epochs": 4}, {}, "epochs=4 goes past the permit's bound 3"),
        ({"batch_size": 8}, {}, "batch_size=8 goes past the permit's bound 4"),
        ({"samples": 9}, {}, "samples=9 goes past the permit's bound 8"),
        ({}, {"param_count": 99}, "the permit is for a model of 99 parameters, not 8"),
        ({}, {"expires_at": 1.0}, "expired; ask the server for a new one"),
    ],
)
def test_fit_refuses_to_go_past_its_permit(fit_args, changes, message: str) -> None:
    async def run() -> None:
        model = small_fit_model()
        model.build((3,))
        before = await model.get_weights()
        samples = fit_args.get("samples", 8)
        x, y = np.ones((samples, 3), np.float32), np.zeros((samples, 2), np.float32)
        with pytest.raises(pib.PermitError, match=message):
            await model.fit(
                x,
                y,
                epochs=fit_args.get("epochs", 3),
                batch_size=fit_args.get("batch_size", 4),
                permit=grant_for(model, **changes),
            )
        after = await model.get_weights()
        assert all((a == b).all() for a, b in zip(before, after, strict=True)), "it trained"

    asyncio.run(run())


def test_fit_trains_within_its_permit_and_stops_when_it_expires() -> None:

    async def run() -> None:
        model = small_fit_model()
        model.build((3,))
        x, y = np.ones((8, 3), np.float32), np.zeros((8, 2), np.float32)
        history = await model.fit(x, y, epochs=3, batch_size=4, permit=grant_for(model))
        assert len(history.history["loss"]) == 3
        with pytest.raises(pib.PermitError, match="permit must be the token string"):
            await model.fit(x, y, epochs=1, permit={"max_epochs": 3})
        # A permit that expires during epoch 0: that epoch finishes, the next does not start.
        token = grant_for(model, lifetime_s=0.3)
        slow = pib.LambdaCallback(on_epoch_end=lambda epoch, logs: time.sleep(0.4))
        with pytest.raises(pib.PermitError, match="expired"):
            await model.fit(x, y, epochs=3, batch_size=4, permit=token, callbacks=[slow])
        assert model.history is not None and len(model.history.history["loss"]) == 1

    asyncio.run(run())
