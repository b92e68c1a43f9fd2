"""Ditto with any rule as its global rule: ``strategy = "ditto+<rule>"`` (spec-ditto §5).

Algorithm 1 of the paper leaves line 9, the global update, to any rule. A pairing must
therefore take the global rule's server step unchanged (same configs, same model from
the same replies) and add only Ditto's keys to each train config and the request for
the personal metrics to each evaluate config.
"""

from __future__ import annotations

from dataclasses import dataclass
from unittest.mock import Mock

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord
from flwr.serverapp import Grid

from fairfl._compat import server_task_identity
from fairfl.contract import keys
from fairfl.strategies import QFFL, STRATEGIES, TERM, Ditto, FedAvg, build_strategy
from fairfl.strategies.core.params import RuleParameters, real
from fairfl.strategies.ditto import DittoPersonalisation, with_ditto
from tests.project.server_install_probe import NODES, SHAPES, replies

DITTO_KEYS = {
    "ditto-lambda": 1.0,
    "ditto-personal-epochs": 0,
    "ditto-personal-lr-scale": 1.0,
}
GLOBAL_RULES = [name for name in STRATEGIES if name != "ditto"]


def _grid() -> Mock:
    grid = Mock(spec=Grid)
    grid.get_node_ids.return_value = list(NODES)
    return grid


def _round(name: str, run_config: dict[str, object]):
    """Configure and aggregate one round of ``name`` on replies from a fixed seed."""
    strategy = build_strategy(name, run_config, min_available_nodes=1)
    rng = np.random.default_rng(7)
    global_np = {k: rng.normal(size=s).astype(np.float32) for k, s in SHAPES.items()}
    arrays = ArrayRecord({k: Array(v) for k, v in global_np.items()})
    with server_task_identity(1):
        sent = list(strategy.configure_train(1, arrays, ConfigRecord({"lr": 0.1}), _grid()))
    new, metrics = strategy.aggregate_train(1, replies(global_np, rng, strategy.reply_arrays_key))
    return strategy, sent, new, metrics


@pytest.mark.parametrize("rule", GLOBAL_RULES)
def test_a_pairing_takes_the_rules_server_step_unchanged(rule):
    config = {**STRATEGIES[rule].defaults(), "lr": 0.1, "ditto-lambda": 0.2}
    alone, alone_sent, alone_new, alone_metrics = _round(rule, config)
    paired, paired_sent, paired_new, paired_metrics = _round(f"ditto+{rule}", config)
    assert isinstance(paired, type(alone)) and isinstance(paired, DittoPersonalisation)
    expected = "Ditto" if rule == "fedavg" else f"Ditto+{alone.rule_name}"
    assert paired.rule_name == expected
    # Each train config: the rule's keys, and Ditto's besides (nothing else differs).
    for alone_message, paired_message in zip(alone_sent, paired_sent, strict=True):
        alone_config = dict(alone_message.content[keys.CONFIG])
        paired_config = dict(paired_message.content[keys.CONFIG])
        assert paired_config == {**alone_config, **DITTO_KEYS, "ditto-lambda": 0.2}
    # The same replies give the same global model, bit for bit, and the same metrics.
    assert alone_new is not None and paired_new is not None
    for key, array in alone_new.items():
        np.testing.assert_array_equal(paired_new[key].numpy(), array.numpy())
    assert dict(paired_metrics or {}) == dict(alone_metrics or {})


@pytest.mark.parametrize("rule", ["qffl", "term", "fairfed", "rcfl"])
def test_a_pairing_asks_for_the_personal_metrics(rule):
    strategy = build_strategy(f"ditto+{rule}", {}, min_available_nodes=1)
    arrays = ArrayRecord({"w": Array(np.zeros(2, dtype=np.float32))})
    with server_task_identity(1):
        sent = list(strategy.configure_evaluate(1, arrays, ConfigRecord({"x": 1}), _grid()))
    assert sent
    for message in sent:
        config = message.content[keys.CONFIG]
        assert config[keys.DITTO_PERSONAL] is True and config["x"] == 1


def test_the_pairings_keys_are_both_rules_with_their_defaults():
    spec = STRATEGIES["ditto+term"]
    assert issubclass(spec.strategy, TERM)
    assert spec.parameters == {
        "term-alpha": "alpha",
        "ditto-lambda": "lam",
        "ditto-personal-epochs": "personal_epochs",
        "ditto-personal-lr-scale": "personal_lr_scale",
    }
    assert spec.defaults() == {"term-alpha": 0.5, **DITTO_KEYS}
    strategy = build_strategy("ditto+qffl", {"qffl-q": 2.0, "ditto-personal-epochs": 3})
    assert isinstance(strategy, QFFL)
    assert (strategy.params.q, strategy.params.personal_epochs) == (2.0, 3)


def test_one_class_per_pairing_and_fedavgs_is_ditto():
    assert STRATEGIES["ditto+qffl"].strategy is STRATEGIES["ditto+qffl"].strategy
    assert STRATEGIES["ditto+fedavg"].strategy is Ditto
    assert with_ditto(FedAvg, "ditto+fedavg") is Ditto


def test_pairings_are_built_on_use_not_listed():
    assert "ditto+qffl" in STRATEGIES and "ditto+term" in STRATEGIES
    assert not any(name.startswith("ditto+") for name in STRATEGIES)


@pytest.mark.parametrize(
    ("name", "run_config", "message"),
    [
        ("ditto+term", {"term-alpha": -1.0}, r"run config term-alpha \(rule ditto\+term\): alpha"),
        (
            "ditto+qffl",
            {"ditto-lambda": -0.5},
            r"run config ditto-lambda \(rule ditto\+qffl\): lam",
        ),
        ("ditto+ditto", {}, r"ditto\+<rule> for one of them that trains no personal model"),
        ("ditto+nosuchrule", {}, r"got 'ditto\+nosuchrule'"),
    ],
)
def test_bad_names_and_values_name_the_key_and_the_pairing(name, run_config, message):
    with pytest.raises(ValueError, match=message):
        build_strategy(name, run_config)


def test_a_rule_declaring_dittos_keys_cannot_be_paired():
    @dataclass(frozen=True)
    class Clashing(RuleParameters):
        lam: float = real(0.5, key="my-lambda", lower=0.0)

    class Rule(TERM):
        Parameters = Clashing

    with pytest.raises(ValueError, match=r"ditto\+rule: .*Rule declares Ditto's \['lam'\]"):
        with_ditto(Rule, "ditto+rule")
