"""TERM: exact client-level tilted softmax weights."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairfl.strategies import STRATEGIES, TERM, FedAvg, build_strategy
from fairfl.strategies.term import term_weights, tilted_loss
from tests.strategies.baseline_helpers import (
    aggregate_round,
    client_rounds,
    jsonl_weights,
    loss_reply,
    pyproject_config,
    round_weights,
    run_rule,
    shares,
)

LN3 = math.log(3.0)


def test_weights_by_hand():
    # α = ln 3, f = (1, 0): e^{α f} = (3, 1).
    # p = (1/2, 1/2): w = (1.5, 0.5)/2 = (0.75, 0.25)
    np.testing.assert_allclose(term_weights([0.5, 0.5], [1.0, 0.0], LN3), [0.75, 0.25])
    # p = (1/4, 3/4): w ∝ (0.75, 0.75) = (0.5, 0.5)
    np.testing.assert_allclose(term_weights([0.25, 0.75], [1.0, 0.0], LN3), [0.5, 0.5])
    # f = (2, 1, 0), p uniform: w ∝ (9, 3, 1) / 13
    np.testing.assert_allclose(
        term_weights([1 / 3] * 3, [2.0, 1.0, 0.0], LN3), [9 / 13, 3 / 13, 1 / 13]
    )


def test_tilted_loss_by_hand():
    # (1/ln 3) · log(0.5·3 + 0.5·1) = log 2 / log 3
    assert tilted_loss([0.5, 0.5], [1.0, 0.0], LN3) == pytest.approx(math.log(2) / LN3)
    # α = 0 is the mean loss Σ p f = 0.25·1 + 0.75·3 = 2.5
    assert tilted_loss([0.25, 0.75], [1.0, 3.0], 0.0) == pytest.approx(2.5)


def test_strategy_round_by_hand():
    strategy = TERM(alpha=LN3)
    # n = (10, 30): p = (0.25, 0.75); f = (1, 0) -> w = (0.5, 0.5); models 1 and 4 -> 2.5
    replies = [loss_reply(1, 10, 1.0, value=1.0), loss_reply(2, 30, 0.0, value=4.0)]
    arrays, metrics = aggregate_round(strategy, replies)
    np.testing.assert_allclose(round_weights(strategy), [0.5, 0.5])
    np.testing.assert_allclose(arrays["0"].numpy(), 2.5)
    # tilted loss (1/ln 3)·log(0.25·3 + 0.75) = log 1.5 / log 3
    assert metrics["term-tilted-loss"] == pytest.approx(math.log(1.5) / LN3)


@pytest.mark.parametrize("alpha", [0.0, 1e-12])
def test_alpha_to_zero_is_fedavg(alpha):
    p = shares([3, 5, 12])
    np.testing.assert_allclose(term_weights(p, [4.0, 0.1, 2.0], alpha), p, atol=1e-10)
    term, fedavg = TERM(alpha=alpha), FedAvg()
    replies = [loss_reply(n, c, f, value=n) for n, c, f in [(1, 3, 4.0), (2, 5, 0.1), (3, 12, 2.0)]]
    a, _ = aggregate_round(term, replies)
    b, _ = aggregate_round(fedavg, replies)
    np.testing.assert_allclose(round_weights(term), round_weights(fedavg), atol=1e-10)
    np.testing.assert_allclose(a["0"].numpy(), b["0"].numpy(), rtol=1e-6)


@settings(max_examples=50, deadline=None)
@given(client_rounds(), st.floats(0.0, 100.0), st.floats(0.0, 1e3))
def test_equal_losses_are_fedavg(case, alpha, loss):
    counts, _ = case
    p = shares(counts)
    np.testing.assert_allclose(term_weights(p, [loss] * len(p), alpha), p, rtol=1e-12)


def test_large_tilt_goes_to_the_max_loss_client_without_overflow():
    weights = term_weights([0.2, 0.3, 0.5], [1.0, 2.0, 0.5], 1e4)
    np.testing.assert_allclose(weights, [0.0, 1.0, 0.0], atol=1e-300)


@settings(max_examples=100, deadline=None)
@given(client_rounds(), st.floats(0.0, 1e6))
def test_weights_are_a_finite_distribution(case, alpha):
    counts, losses = case
    weights = term_weights(shares(counts), losses, alpha)
    assert np.all(np.isfinite(weights)) and np.all(weights >= 0)
    assert weights.sum() == pytest.approx(1.0, abs=1e-12)
    assert math.isfinite(tilted_loss(shares(counts), losses, alpha))


@settings(max_examples=30, deadline=None)
@given(client_rounds(min_size=2), st.randoms(use_true_random=False))
def test_reply_order_does_not_change_the_result(case, rng):
    counts, losses = case
    replies = [
        loss_reply(i + 1, c, f, value=float(i))
        for i, (c, f) in enumerate(zip(counts, losses, strict=True))
    ]
    shuffled = list(replies)
    rng.shuffle(shuffled)
    a, _ = aggregate_round(TERM(), replies)
    b, _ = aggregate_round(TERM(), shuffled)
    np.testing.assert_array_equal(a["0"].numpy(), b["0"].numpy())


@settings(max_examples=20, deadline=None)
@given(client_rounds(min_size=2), st.data())
def test_replies_without_train_loss_are_dropped_by_name(case, data):
    counts, losses = case
    missing = data.draw(st.sets(st.integers(0, len(counts) - 1), max_size=len(counts) - 1))
    replies = [
        loss_reply(i + 1, c, None if i in missing else f)
        for i, (c, f) in enumerate(zip(counts, losses, strict=True))
    ]
    strategy = TERM()
    aggregate_round(strategy, replies)
    record = strategy.train_records[1]
    assert record.dropped == {i + 1: "metrics['train_loss'] is missing" for i in missing}
    assert round_weights(strategy).sum() == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-0.5, "alpha must be >= 0, got -0.5"),
        (math.nan, "alpha must be a finite number, got nan"),
        (None, "alpha must be a finite number, got None"),
    ],
)
def test_invalid_alpha_rejected(value, message):
    with pytest.raises(ValueError, match=message):
        TERM(alpha=value)


def test_pure_function_rejects_bad_input():
    with pytest.raises(ValueError, match="p must all be > 0"):
        term_weights([0.0, 1.0], [1.0, 1.0], 0.5)
    with pytest.raises(ValueError, match="losses must be finite"):
        term_weights([0.5, 0.5], [1.0, math.inf], 0.5)
    with pytest.raises(ValueError, match="one shape"):
        term_weights([1.0], [1.0, 2.0], 0.5)


def test_registry_and_run_config_defaults():
    assert STRATEGIES["term"].defaults() == {"term-alpha": 0.5}
    assert pyproject_config()["term-alpha"] == 0.5
    strategy = build_strategy("term", {"term-alpha": 0.01})
    assert isinstance(strategy, TERM) and strategy.settings() == {"alpha": 0.01}


def test_three_rounds_in_process(tmp_path):
    outcome, lines, seen = run_rule(tmp_path, "term", **{"term-alpha": 1.0})
    assert len(lines) == 3
    for line in lines:
        nodes, weights = jsonl_weights(line)
        counts = [seen[line["round"]][n][0] for n in nodes]
        losses = [seen[line["round"]][n][1] for n in nodes]
        np.testing.assert_allclose(weights, term_weights(shares(counts), losses, 1.0), atol=1e-12)
        assert line["train"]["diagnostics"]["term-tilted-loss"] == pytest.approx(
            tilted_loss(shares(counts), losses, 1.0)
        )
    assert outcome.summary["strategy_settings"] == {"alpha": 1.0}
    assert all(np.isfinite(a.numpy()).all() for a in outcome.arrays.values())
