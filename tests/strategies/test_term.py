"""TERM: exact client-level tilted softmax weights."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairfl.strategies import TERM
from fairfl.strategies.term import term_weights, tilted_loss
from tests.strategies.baseline_helpers import (
    aggregate_round,
    assert_matches_fedavg,
    client_rounds,
    loss_reply,
    numbered_replies,
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
    replies = numbered_replies([3, 5, 12], [4.0, 0.1, 2.0])
    assert_matches_fedavg(TERM(alpha=alpha), replies, atol=1e-10, rtol=1e-6)


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


def test_three_rounds_in_process(tmp_path):
    outcome, rounds = run_rule(tmp_path, "term", **{"term-alpha": 1.0})
    assert len(rounds) == 3
    for logged in rounds:
        p = shares(logged.counts)
        np.testing.assert_allclose(logged.weights, term_weights(p, logged.losses, 1.0), atol=1e-12)
        assert logged.diagnostics["term-tilted-loss"] == pytest.approx(
            tilted_loss(p, logged.losses, 1.0)
        )
    assert outcome.summary["strategy_settings"] == {"alpha": 1.0}
    assert all(np.isfinite(a.numpy()).all() for a in outcome.arrays.values())
