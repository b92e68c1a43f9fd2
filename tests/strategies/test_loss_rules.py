"""Properties the loss-weighted rules share, one test parametrized over the rules.

Each rule's own file keeps its hand-worked numbers and the properties only it has.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairfl.strategies import (
    AFL,
    STRATEGIES,
    TERM,
    DeltaFL,
    GiFair,
    PropFair,
    SemiVRed,
    VRed,
    build_strategy,
)
from fairfl.strategies.core.aggregation import reweighted_average, sample_weights
from fairfl.strategies.semivred import semi_deviations, semivred_weights
from fairfl.strategies.vred import algorithm1_update, loss_deviations, vred_weights
from tests.strategies.baseline_helpers import (
    aggregate_round,
    client_rounds,
    numbered_replies,
    pyproject_config,
    round_weights,
)

# Each rule with the hyperparameters the properties draw (the rest at their defaults).
RULES = [
    pytest.param(AFL, {}, id="afl"),
    pytest.param(TERM, {}, id="term"),
    pytest.param(GiFair, {}, id="gifair"),
    pytest.param(DeltaFL, {}, id="deltafl"),
    pytest.param(VRed, {"beta": st.floats(0.0, 3.0)}, id="vred"),
    pytest.param(SemiVRed, {"beta": st.floats(0.0, 3.0)}, id="semivred"),
]


@pytest.mark.parametrize(("rule", "hyperparameters"), RULES)
@settings(max_examples=30, deadline=None)
@given(client_rounds(min_size=2), st.randoms(use_true_random=False), st.data())
def test_reply_order_does_not_change_the_result(rule, hyperparameters, case, rng, data):
    kwargs = data.draw(st.fixed_dictionaries(hyperparameters))
    replies = numbered_replies(*case)
    shuffled = list(replies)
    rng.shuffle(shuffled)
    first, second = rule(**kwargs), rule(**kwargs)
    # Two rounds: AFL carries λ from one round to the next.
    for server_round in (1, 2):
        a, _ = aggregate_round(first, replies, server_round)
        b, _ = aggregate_round(second, shuffled, server_round)
        np.testing.assert_array_equal(a["0"].numpy(), b["0"].numpy())
        assert np.all(np.isfinite(a["0"].numpy()))
    assert first.state_dict() == second.state_dict()


@pytest.mark.parametrize(("rule", "hyperparameters"), RULES)
@settings(max_examples=20, deadline=None)
@given(client_rounds(min_size=2), st.data())
def test_replies_without_train_loss_are_dropped_by_name(rule, hyperparameters, case, data):
    size = len(case[0])
    missing = data.draw(st.sets(st.integers(0, size - 1), max_size=size - 1))
    strategy = rule(**data.draw(st.fixed_dictionaries(hyperparameters)))
    aggregate_round(strategy, numbered_replies(*case, missing=missing))
    record = strategy.train_records[1]
    assert record.dropped == {i + 1: "metrics['loss-before-training'] is missing" for i in missing}
    assert sorted(record.weights) == [i + 1 for i in range(size) if i not in missing]
    assert round_weights(strategy).sum() == pytest.approx(1.0)
    if isinstance(strategy, AFL):  # λ is kept for exactly the weighted nodes (by node key)
        assert set(strategy.client_lambdas) == {f"node-{n}" for n in record.weights}


# Registry name, class, run-config defaults, a run config and the settings it builds.
REGISTRY = [
    (
        "afl",
        AFL,
        {"afl-lambda-lr": 0.1, "afl-variant": "mohri"},
        {"afl-lambda-lr": 0.5},
        {
            "lambda_lr": 0.5,
            "variant": "mohri",
            "lambda_init": "uniform",
            "weights": "running average of lambda",
        },
    ),
    ("term", TERM, {"term-alpha": 0.5}, {"term-alpha": 0.01}, {"alpha": 0.01}),
    ("gifair", GiFair, {"gifair-coeff": 1.0}, {"gifair-coeff": 0.25}, {"coeff": 0.25}),
    (
        "deltafl",
        DeltaFL,
        {"deltafl-alpha": 0.5},
        {"deltafl-alpha": 0.2},
        {"alpha": 0.2, "alpha_convention": "tail fraction"},
    ),
    (
        "vred",
        VRed,
        {"vred-beta": 0.1, "vred-clip-negative": False},
        {},
        {"beta": 0.1, "clip_negative_weights": False},
    ),
    (
        "semivred",
        SemiVRed,
        {"semivred-beta": 0.2, "semivred-clip-negative": False},
        {},
        {"beta": 0.2, "clip_negative_weights": False},
    ),
    (
        "propfair",
        PropFair,
        {"propfair-m": 3.0, "propfair-epsilon": 0.2, "propfair-huber": False},
        {"propfair-m": 5.0, "propfair-huber": True},
        {"M": 5.0, "epsilon": 0.2, "huber": True},
    ),
]


@pytest.mark.parametrize(
    ("name", "rule", "defaults", "run_config", "expected"), REGISTRY, ids=[r[0] for r in REGISTRY]
)
def test_registry_and_run_config_defaults(name, rule, defaults, run_config, expected):
    spec = STRATEGIES[name]
    assert spec.strategy is rule
    assert spec.defaults() == defaults
    config = pyproject_config()
    assert {key: config[key] for key in defaults} == defaults
    strategy = build_strategy(name, run_config)
    assert isinstance(strategy, rule)
    assert strategy.settings() == expected


# ---------------------------------------------------------------- VRed and Semi-VRed
VRED_FAMILY = [
    pytest.param(loss_deviations, vred_weights, id="vred"),
    pytest.param(semi_deviations, semivred_weights, id="semivred"),
]


@pytest.mark.parametrize(("deviations", "weights"), VRED_FAMILY)
@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 1000), st.floats(0.0, 50.0)), min_size=1, max_size=12),
    st.floats(0.0, 2.0),
    st.integers(0, 2**31 - 1),
)
def test_algorithm1_form_equals_weight_form(deviations, weights, clients, beta, seed):
    # Paper 000, Algorithm 1 (VRed line 11, Semi-VRed line 13) against Lemmas 1 and 2.
    rng = np.random.default_rng(seed)
    counts, losses = zip(*clients, strict=True)
    p = sample_weights(counts)
    global_arrays = [rng.normal(size=(3, 2)), rng.normal(size=4)]
    locals_ = [[rng.normal(size=(3, 2)), rng.normal(size=4)] for _ in clients]
    by_algorithm = algorithm1_update(global_arrays, locals_, p, deviations(p, losses), beta)
    by_weights = reweighted_average(global_arrays, locals_, weights(p, losses, beta))
    for a, b in zip(by_algorithm, by_weights, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("weights", [vred_weights, semivred_weights], ids=["vred", "semivred"])
@given(
    st.lists(st.integers(1, 100), min_size=1, max_size=8), st.floats(0.0, 10.0), st.floats(0.0, 5.0)
)
def test_equal_losses_give_fedavg_weights_exactly(weights, counts, loss, beta):
    p = sample_weights(counts)
    np.testing.assert_array_equal(weights(p, [loss] * len(counts), beta), p)
