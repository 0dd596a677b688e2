"""The feature-case table in CPython: every case runs on cpu (the reference the browser matrix is
compared with), reproducibly, with its feature's own invariants; and every public feature of the
engine has a row (a new layer, activation, loss, optimizer option, metric, callback, Sequential
method or fit argument without a case fails here)."""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any

import numpy as np
import pytest

import py_in_browser as pib
from py_in_browser import callbacks, layers, losses, optimizers, training
from py_in_browser.interop import tfjs
from py_in_browser.nn import activations, initializers
from py_in_browser.nn import metrics as metric_lib
from py_in_browser.testing import feature_cases

# What model_features reads off a built model; other kinds are taken as declared.
CHECKED_KINDS = {"layer", "activation", "loss", "optimizer", "optimizer-option", "metric"}


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    return asyncio.run(feature_cases.run_cases())


def result_of(results: dict[str, Any], name: str) -> dict[str, Any]:
    assert "error" not in results[name], results[name]["error"]
    out: dict[str, Any] = results[name]["result"]
    return out


# ---- the public surface, enumerated from the package --------------------------------------------


def parameters(function: Any, skip: int = 1) -> dict[str, inspect.Parameter]:
    """Named parameters after the first `skip` (self, or model/x/y), without *args/**kwargs."""
    params = list(inspect.signature(function).parameters.values())[skip:]
    return {p.name: p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def layer_classes() -> set[type[layers.Layer]]:
    return {
        value
        for name, value in vars(layers).items()
        if not name.startswith("_")
        and inspect.isclass(value)
        and issubclass(value, layers.Layer)
        and value is not layers.Layer
    }


def optimizer_defaults(cls: type[optimizers.Optimizer]) -> dict[str, Any]:
    """Every constructor option of an optimizer class, through its **kw chain, with its default."""
    defaults: dict[str, Any] = {}
    for klass in cls.__mro__:
        if klass is object:
            break
        for name, p in parameters(klass.__init__).items():  # type: ignore[misc]
            defaults.setdefault(name, p.default)
    return defaults


def honours_from_logits(cls: type[losses.Loss]) -> bool:
    return "from_logits" in inspect.getsource(cls.__call__)


def public_surface() -> set[str]:
    surface: set[str] = set()
    base_options = set(parameters(layers.Layer.__init__))
    for cls in layer_classes():
        surface.add(f"layer:{cls.__name__}")
        for name, p in parameters(cls.__init__).items():
            if name not in base_options and p.default is not p.empty:
                surface.add(f"layer-option:{cls.__name__}.{name}")
    surface |= {f"initializer:{name}" for name in initializers.INITIALIZERS}
    surface |= {f"activation:{name}" for name in activations.ACTIVATIONS}
    for name, loss_cls in losses.LOSSES.items():
        surface |= {f"loss-name:{name}", f"loss:{loss_cls.__name__}"}
        if honours_from_logits(loss_cls):
            surface.add(f"loss:{loss_cls.__name__}(from_logits)")
    for name, opt_cls in optimizers.OPTIMIZERS.items():
        surface |= {f"optimizer-name:{name}", f"optimizer:{opt_cls.__name__}"}
        surface |= {f"optimizer-option:{opt_cls.__name__}.{o}" for o in optimizer_defaults(opt_cls)}
    metric_names = {"accuracy", "acc", *metric_lib._ALIASES}  # the names metrics.get accepts
    surface |= {f"metric:{name}" for name in metric_names}
    surface |= {f"metric-kind:{kind}" for kind in metric_lib._ALIASES.values()}
    surface |= {
        f"callback:{name}"
        for name, value in vars(callbacks).items()
        if inspect.isclass(value) and issubclass(value, callbacks.Callback)
    }
    surface |= {
        f"method:{name}"
        for name, value in vars(pib.Sequential).items()
        if inspect.isfunction(value) and (not name.startswith("_") or name == "__call__")
    }
    surface |= {  # Sequential.fit(x, y, **options) hands its options to the Trainer
        f"fit-option:{name}"
        for name, p in parameters(training.Trainer.fit).items()
        if p.default is not p.empty
    }
    return surface


def model_features(model: pib.Sequential) -> set[str]:
    """The features a compiled model uses, read off the model itself."""
    found = {f"layer:{type(layer).__name__}" for layer in model.layers}
    found |= {
        f"activation:{activations.name_of(layer.activation)}"
        for layer in model.layers
        if hasattr(layer, "activation")
    }
    loss = model.loss
    assert loss is not None and model.optimizer is not None
    found.add(f"loss:{type(loss).__name__}{'(from_logits)' if loss.from_logits else ''}")
    opt_cls = type(model.optimizer)
    found.add(f"optimizer:{opt_cls.__name__}")
    config = model.optimizer.get_config()
    found |= {
        f"optimizer-option:{opt_cls.__name__}.{name}"
        for name, default in optimizer_defaults(opt_cls).items()
        if config[name] != default
    }
    for metric in model.resolved_metrics():
        found |= {f"metric:{metric.name}", f"metric-kind:{metric.kind}"}
    return found


# ---- coverage -----------------------------------------------------------------------------------


def test_every_public_feature_has_a_case() -> None:
    covered = set().union(*(c.covers for c in feature_cases.CASES))
    missing = sorted(public_surface() - covered)
    assert not missing, f"public features without a row in feature_cases.CASES: {missing}"


def test_covers_name_real_features() -> None:
    """No typo or stale name: every declared feature exists in the surface."""
    surface = public_surface()
    for case in feature_cases.CASES:
        unknown = sorted(case.covers - surface)
        assert not unknown, f"{case.name} covers features the engine does not have: {unknown}"


def test_model_level_claims_hold_on_the_built_model() -> None:
    for case in feature_cases.CASES:
        claimed = {f for f in case.covers if f.split(":")[0] in CHECKED_KINDS}
        untrue = sorted(claimed - model_features(case.model()))
        assert not untrue, f"{case.name} claims features its model does not use: {untrue}"


def test_surface_enumeration_sees_the_known_surface() -> None:
    """The enumeration itself finds what the brief names (a broken walk would pass vacuously)."""
    surface = public_surface()
    for feature in (
        "layer:Dense",
        "layer:GlobalAveragePooling2D",
        "layer-option:Conv2D.padding",
        "activation:gelu",
        "loss:BinaryCrossentropy(from_logits)",
        "optimizer-option:SGD.nesterov",
        "optimizer-option:AdamW.weight_decay",
        "optimizer-option:RMSprop.global_clipnorm",
        "metric:sparse_categorical_accuracy",
        "callback:EarlyStopping",
        "method:load_checkpoint",
        "method:__call__",
        "fit-option:validation_data",
    ):
        assert feature in surface
    assert "loss:MeanSquaredError(from_logits)" not in surface  # mse has no logits form
    assert {feature.split(":")[0] for feature in surface} == set(feature_cases.FEATURE_KINDS)


# ---- the reference run ---------------------------------------------------------------------------


def test_every_case_runs_on_cpu_and_returns_json_data(results: dict[str, Any]) -> None:
    assert set(results) == {c.name for c in feature_cases.CASES}
    for name in results:
        out = result_of(results, name)
        json.dumps(out, allow_nan=False)  # plain, finite data: what runPython hands back
        assert out["weights"], name


def test_cases_are_reproducible(results: dict[str, Any]) -> None:
    """Fixed seeds: a second run gives the same numbers bit for bit (the matrix compares runs)."""
    again = asyncio.run(feature_cases.run_cases())
    for name in results:
        assert result_of(again, name) == result_of(results, name), name


def test_cases_train(results: dict[str, Any]) -> None:
    """Each fit moves the loss: a case whose step did nothing would compare equal everywhere."""
    for name in results:
        history = result_of(results, name).get("history", {})
        if len(history.get("loss", [])) >= 2:
            assert history["loss"][-1] != history["loss"][0], name


def test_resumed_fit_ends_where_the_straight_fit_ends(results: dict[str, Any]) -> None:
    out = result_of(results, "checkpoint_resume")
    assert out["epochs"] == [1, 2]
    assert out["weights"] == out["straight"]["weights"]
    assert out["history"]["loss"][-1] == out["straight"]["history"]["loss"][-1]


def test_set_weights_copies_exactly(results: dict[str, Any]) -> None:
    out = result_of(results, "set_weights")
    assert out["copied_exactly"] and all(out["copied_exactly"])


def test_early_stopping_stops_after_the_second_epoch(results: dict[str, Any]) -> None:
    out = result_of(results, "validation_data_early_stopping")
    assert out["stopped_epoch"] == 1 and out["epochs"] == [0, 1]
    assert set(out["history"]) == {"loss", "val_loss"}


def test_callbacks_see_every_batch_and_epoch(results: dict[str, Any]) -> None:
    out = result_of(results, "callbacks")
    steps = -(-feature_cases.SAMPLES // feature_cases.BATCH)
    assert out["epochs_begun"] == [0, 1]
    assert len(out["batch_losses"]) == feature_cases.EPOCHS * steps
    assert [seen[2] for seen in out["custom"][:-1]] == out["batch_losses"]
    assert out["custom"][-1] == "end"
    events = [report[0] for report in out["progress"]]
    assert events.count("batch") == feature_cases.EPOCHS * (steps // 2)
    assert events.count("epoch") == feature_cases.EPOCHS and events[-1] == "end"


def test_validation_split_reports_validation_logs(results: dict[str, Any]) -> None:
    history = result_of(results, "validation_split")["history"]
    assert set(history) == {"loss", "accuracy", "val_loss", "val_accuracy"}


def test_inference_results_have_the_data_shape(results: dict[str, Any]) -> None:
    for name in ("batch_normalization", "dropout"):
        out = result_of(results, name)
        from_array, from_tensor = np.asarray(out["predict"])
        assert from_array.shape == (feature_cases.SAMPLES, feature_cases.CLASSES), name
        np.testing.assert_allclose(from_array.sum(axis=1), 1.0, rtol=1e-5)
        np.testing.assert_array_equal(from_tensor, from_array)
        assert set(out["evaluate"]) == {"loss", "accuracy"}


def test_a_loaded_model_file_predicts_as_the_saved_model(results: dict[str, Any]) -> None:
    out = result_of(results, "model_file")
    saved, loaded = out["predict"]
    assert saved == loaded
    assert out["loaded"]["weights"] != out["weights"]  # and it trained on


def test_tfjs_imports_predict_as_the_exported_model(results: dict[str, Any]) -> None:
    original, float32, float16 = (
        np.array(p) for p in result_of(results, "tfjs_round_trip")["predict"]
    )
    assert np.array_equal(original, float32)
    np.testing.assert_allclose(float16, original, rtol=0, atol=tfjs.FLOAT16_PREDICTION_BOUND)


def test_train_on_batch_reports_each_step(results: dict[str, Any]) -> None:
    out = result_of(results, "train_on_batch")
    assert len(out["losses"]) == 6 and set(out["logs"]) == {"loss", "accuracy"}


def test_sequential_api_case_starts_at_initial_epoch(results: dict[str, Any]) -> None:
    out = result_of(results, "sequential_api")
    assert out["epochs"] == [1, 2]
    assert out["printed_epochs"] == ["Epoch 2/3", "Epoch 3/3"]
    assert "hidden (Dense, tanh)" in out["summary"]
    assert out["count_params"] == 3 * 4 + 4 + 4 * 3 + 3
    assert np.asarray(out["call"]).shape == (3, feature_cases.CLASSES)
