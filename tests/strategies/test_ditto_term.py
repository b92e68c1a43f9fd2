"""Ditto with TERM as the global rule: one rule's parameters, both rules' keys."""

import pytest

from fairfl.contract import keys
from fairfl.strategies import STRATEGIES, build_strategy
from fairfl.strategies.ditto import DittoTERM
from fairfl.strategies.term import TERM


def test_registered_with_both_rules_keys_and_defaults():
    spec = STRATEGIES["ditto-term"]
    assert spec.strategy is DittoTERM and issubclass(DittoTERM, TERM)
    assert spec.parameters == {
        "term-alpha": "alpha",
        "ditto-lambda": "lam",
        "ditto-personal-epochs": "personal_epochs",
        "ditto-personal-lr-scale": "personal_lr_scale",
    }
    # TERM's default tilt and Ditto's defaults, unchanged by the pairing.
    assert spec.defaults() == {
        "term-alpha": 0.5,
        "ditto-lambda": 1.0,
        "ditto-personal-epochs": 0,
        "ditto-personal-lr-scale": 1.0,
    }


def test_train_config_switches_the_personal_step_on():
    strategy = build_strategy(
        "ditto-term", {"term-alpha": 2.0, "ditto-lambda": 0.1, "ditto-personal-epochs": 3}
    )
    assert strategy.params.alpha == 2.0
    assert strategy.train_config(1) == {
        keys.DITTO_LAMBDA: 0.1,
        keys.DITTO_PERSONAL_EPOCHS: 3,
        keys.DITTO_PERSONAL_LR_SCALE: 1.0,
    }


@pytest.mark.parametrize(
    ("run_config", "message"),
    [
        ({"term-alpha": -1.0}, r"run config term-alpha \(rule ditto-term\): alpha must be >= 0"),
        ({"ditto-lambda": -0.5}, r"run config ditto-lambda \(rule ditto-term\): lam must be >= 0"),
    ],
)
def test_bad_values_name_the_key_and_the_pairing(run_config, message):
    with pytest.raises(ValueError, match=message):
        build_strategy("ditto-term", run_config)
