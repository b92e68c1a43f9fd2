"""The client-step registry (issue 51, item 3): a rule's client half without editing fairfl.

A step switched on by its own train-config key runs through fair_train and adds its
declared metric to the reply; the registry refuses two trainings in one round, a metric
a step did not declare, a key registered twice, and leaves a broken plug-in out.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest
from flwr.app import ConfigRecord
from torch import nn

from fairfl.client import fair_train
from fairfl.client import steps as steps_module
from fairfl.client.steps import (
    CLIENT_STEPS,
    ClientRound,
    ClientStep,
    ClientStepError,
    ClientSteps,
    run_phase,
)
from fairfl.contract.replies import FieldSpec
from tests.client.test_adapter import N, global_model, loader, message, no_training

COUNT = FieldSpec("int", lower=0)


def _twice_the_samples(round_: ClientRound) -> dict[str, int]:
    return {"twice-n": 2 * round_.num_examples}


def test_a_new_step_runs_through_fair_train_and_adds_its_metric(monkeypatch):
    # A registry of its own for this test: the global one keeps only fairfl's steps.
    monkeypatch.setattr(CLIENT_STEPS, "_steps", dict(CLIENT_STEPS._steps))
    CLIENT_STEPS.register(ClientStep("want-twice-n", _twice_the_samples, {"twice-n": COUNT}))
    model, loss = global_model(), nn.CrossEntropyLoss()
    on = fair_train(message(model, **{"want-twice-n": True}), model, loader(), loss, no_training)
    off = fair_train(message(model), global_model(), loader(), loss, no_training)
    assert on["metrics"]["twice-n"] == 2 * N  # n_k = 23 samples, counted by fair_train
    assert "twice-n" not in off["metrics"]


def test_two_trainings_in_one_round_are_refused():
    registry = ClientSteps()
    for key in ("train-a", "train-b"):
        registry.register(ClientStep(key, lambda round_: {}, phase="train"))
    with pytest.raises(ClientStepError, match="two trainings"):
        registry.active(ConfigRecord({"train-a": True, "train-b": True}))
    assert [s.key for s in registry.active(ConfigRecord({"train-a": True}))] == ["train-a"]


def test_a_metric_the_step_did_not_declare_is_refused():
    step = ClientStep("want-x", lambda round_: {"x": 1.0}, {})
    with pytest.raises(ClientStepError, match="returned undeclared 'x'"):
        run_phase("before", [step], None)  # type: ignore[arg-type]


def test_a_key_registered_twice_is_refused():
    registry = ClientSteps()
    registry.register(ClientStep("want-y", lambda round_: {}))
    with pytest.raises(ClientStepError, match="already registered"):
        registry.register(ClientStep("want-y", lambda round_: {}))


def test_a_plugin_that_fails_to_load_is_left_out(monkeypatch, caplog):
    broken = EntryPoint("want-z", "no_such_module_anywhere:STEP", steps_module.ENTRY_POINT_GROUP)
    monkeypatch.setattr(steps_module, "entry_points", lambda group: [broken])
    registry = ClientSteps()
    registry.register(ClientStep("want-y", lambda round_: {}))
    assert list(registry) == ["want-y"]
    assert registry.broken["want-z"].startswith("ModuleNotFoundError")
    assert "client step plug-in want-z left out" in caplog.text
