"""Settings declared once (issue 51): one kit, one bound per key, errors that carry their key."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pytest

from fairfl.fields import ParameterError, Spec
from fairfl.secagg.config import SecAggSettings
from fairfl.settings import RunSettings
from fairfl.strategies import FedAvg, ReweightedStrategy
from fairfl.strategies.core.options import StrategyOptions
from fairfl.strategies.core.params import RuleParameters, real
from fairfl.strategies.registry import STRATEGIES, RuleSpec, build_strategy
from fairfl.telemetry.config import TelemetrySettings

LAYERS = (RunSettings, StrategyOptions, TelemetrySettings, SecAggSettings)


def test_a_wrong_fraction_train_is_refused_with_one_message_in_every_layer():
    # One range, [0, 1] (Flower's), and one bound's text; only who it is about differs.
    with pytest.raises(ParameterError) as run:
        RunSettings.from_run_config({"fraction-train": 1.5})
    with pytest.raises(ParameterError) as options:
        StrategyOptions(fraction_train=1.5)
    with pytest.raises(ParameterError) as rule:
        FedAvg(fraction_train=1.5)
    assert str(run.value) == "run config fraction-train must be in [0, 1], got 1.5"
    assert str(options.value) == "fraction_train must be in [0, 1], got 1.5"
    assert str(rule.value) == str(options.value)
    assert {run.value.key, options.value.key, rule.value.key} == {"fraction-train"}
    # The ends are in the range in both layers; the same declaration, not a copy.
    assert RunSettings.from_run_config({"fraction-train": 0.0}).fraction_train == 0.0
    assert StrategyOptions(fraction_train=0.0).fraction_train == 0.0
    assert RunSettings.specs()["fraction_train"] is StrategyOptions.specs()["fraction_train"]


def test_a_fraction_train_of_zero_is_refused_with_differential_privacy():
    # 0 trains Flower's min_train_nodes each round: no sampling rate for the accountant.
    with pytest.raises(ParameterError, match="fraction-train is 0 with dp on") as error:
        RunSettings.from_run_config({"fraction-train": 0.0, "dp": "central-fixed"})
    assert error.value.key == "fraction-train"


def _outside(spec: Spec) -> float | None:
    """A number just outside the declared range (None: no numeric bound to break)."""
    if spec.kind not in ("real", "integer"):
        return None
    step = 1 if spec.kind == "integer" else 0.5
    if spec.lower is not None:
        low = spec.lower if spec.lower_open else spec.lower - step
        if low != spec.off:
            return low
    if spec.upper is not None:
        return spec.upper if spec.upper_open else spec.upper + step
    return None


@pytest.mark.parametrize("layer", LAYERS, ids=lambda layer: layer.__name__)
def test_every_bound_is_refused_from_its_declaration_naming_its_key(layer):
    # Each declared field, given a value outside its range, is refused by the kit: a
    # ParameterError naming the field and its key, "<who> must be <bound>, got <value>".
    checked = 0
    for name, spec in layer.specs().items():
        value = _outside(spec)
        if value is None:
            continue
        if spec.kind == "integer":
            value = int(value)
        with pytest.raises(ParameterError) as error:
            layer(**{name: value})
        who = layer.subject(name, spec)
        assert error.value.name == name and error.value.key == spec.key
        assert re.fullmatch(
            rf"{re.escape(who)} must be .+, got {re.escape(repr(value))}", str(error.value)
        )
        checked += 1
    least = {RunSettings: 25, StrategyOptions: 9, TelemetrySettings: 2, SecAggSettings: 5}
    assert checked >= least[layer]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        # Bounds worked from the declarations by hand: lower 1 inclusive, an int.
        ({"num-server-rounds": 0}, "run config num-server-rounds must be >= 1, got 0"),
        # (0, 1) open at both ends: the whole range is said.
        ({"test-fraction": 1.0}, "run config test-fraction must be in (0, 1), got 1.0"),
        # 0 switches the clip off; otherwise >= 1.
        (
            {"num-examples-clip": 0.5},
            "run config num-examples-clip must be 0 (off) or >= 1, got 0.5",
        ),
        ({"seed": -1}, "run config seed must be in [0, 4294967295] (NumPy's seeds), got -1"),
        ({"telemetry-port": 70000}, "run config telemetry-port must be in [0, 65535], got 70000"),
        ({"lr": math.inf}, "run config lr must be a finite number, got inf"),
    ],
)
def test_run_config_messages_are_the_declared_bounds(config, message):
    with pytest.raises(ParameterError) as error:
        RunSettings.from_run_config(config)
    assert str(error.value) == message
    assert error.value.key == next(iter(config))


@dataclass(frozen=True)
class _ScaledParameters(RuleParameters):
    gamma: float = real(1.0, key="scaled-gamma", lower=0.0)

    def check(self) -> None:
        # A message that does not start with the field's name: the key still reaches it.
        if self.gamma > 4:
            raise ParameterError("gamma", "the scale may not pass 4, got 5.0", "scaled-gamma")


class _Scaled(ReweightedStrategy):
    Parameters = _ScaledParameters

    def lambdas(self, server_round, replies):
        counts = np.array([r.num_examples for r in replies], dtype=np.float64)
        return counts / counts.sum()


def test_build_strategy_names_the_key_the_error_carries_not_its_first_word(monkeypatch):
    rules = {**STRATEGIES._loaded(), "scaled": RuleSpec("scaled", _Scaled, "a-plugin")}
    monkeypatch.setattr(STRATEGIES, "_rules", rules)
    with pytest.raises(ValueError) as error:
        build_strategy("scaled", {"scaled-gamma": 5.0})
    assert str(error.value) == (
        "run config scaled-gamma (rule scaled): the scale may not pass 4, got 5.0"
    )
    with pytest.raises(ValueError) as error:
        build_strategy("term", {"sampling": "random"})
    assert str(error.value) == (
        "run config sampling (rule term): client_sampling must be one of "
        "('uniform', 'size-proportional'), got 'random'"
    )


def test_node_settings_are_declared_with_the_kit_and_name_the_node_config_key():
    from fairfl.settings import NodeSettings

    assert NodeSettings.from_node_config({"partition-id": 3}, 4).num_partitions == 4
    for config, key, message in [
        ({"partition-id": 4}, "partition-id", "node config partition-id must be in [0, 4), got 4"),
        ({"partition-id": -1}, "partition-id", "node config partition-id must be >= 0, got -1"),
        (
            {"partition-id": 0, "num-partitions": 0},
            "num-partitions",
            "node config num-partitions must be >= 1, got 0",
        ),
    ]:
        with pytest.raises(ParameterError) as error:
            NodeSettings.from_node_config(config, 4)
        assert (str(error.value), error.value.key) == (message, key)
