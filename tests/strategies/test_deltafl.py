"""Δ-FL: exact CVaR weights, α = tail fraction of the data mass."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairfl.strategies import DeltaFL
from fairfl.strategies.deltafl import cvar_weights
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


def test_weights_by_hand():
    # p = (0.1, 0.2, 0.3, 0.4), f = (4, 3, 2, 1), α = 0.5: caps p/α = (0.2, 0.4, 0.6, 0.8)
    # by decreasing loss: 0.2 (left 0.8), 0.4 (left 0.4), min(0.6, 0.4) = 0.4, then 0
    weights = cvar_weights([0.1, 0.2, 0.3, 0.4], [4.0, 3.0, 2.0, 1.0], 0.5)
    np.testing.assert_allclose(weights, [0.2, 0.4, 0.4, 0.0])
    # CVaR = 0.2·4 + 0.4·3 + 0.4·2 = 2.8 = (0.1·4 + 0.2·3 + 0.2·2)/0.5, the mean loss of
    # the worst half of the data mass.
    assert np.dot(weights, [4.0, 3.0, 2.0, 1.0]) == pytest.approx(2.8)


def test_tied_boundary_clients_share_in_proportion_to_p():
    # p uniform 0.25, f = (3, 2, 2, 1), α = 0.5: caps 0.5 each. Client 1 takes 0.5; the
    # tie {2, 3} has cap 1.0 > 0.5 left, so it takes 0.5 split by p: 0.25 each.
    np.testing.assert_allclose(
        cvar_weights([0.25] * 4, [3.0, 2.0, 2.0, 1.0], 0.5), [0.5, 0.25, 0.25, 0.0]
    )


def test_alpha_one_over_n_with_equal_p_puts_all_mass_on_the_argmax():
    # p/α = (1/5)/(1/5) = 1: the max-loss client fills the mass alone.
    weights = cvar_weights([0.2] * 5, [0.3, 2.5, 1.0, 2.4, 0.0], 1 / 5)
    np.testing.assert_allclose(weights, [0.0, 1.0, 0.0, 0.0, 0.0], atol=1e-15)


def test_strategy_round_by_hand():
    strategy = DeltaFL(alpha=0.5)
    # n = (10, 20, 30, 40) -> p = (0.1, 0.2, 0.3, 0.4), f = (4, 3, 2, 1): w = (0.2, 0.4, 0.4, 0)
    # models (1, 2, 3, 100): 0.2 + 0.8 + 1.2 + 0 = 2.2
    replies = [
        loss_reply(1, 10, 4.0, value=1.0),
        loss_reply(2, 20, 3.0, value=2.0),
        loss_reply(3, 30, 2.0, value=3.0),
        loss_reply(4, 40, 1.0, value=100.0),
    ]
    arrays, metrics = aggregate_round(strategy, replies)
    np.testing.assert_allclose(round_weights(strategy), [0.2, 0.4, 0.4, 0.0])
    np.testing.assert_allclose(arrays["0"].numpy(), 2.2, rtol=1e-6)
    assert metrics["deltafl-cvar"] == pytest.approx(2.8)
    assert metrics["deltafl-active-clients"] == 3


@pytest.mark.parametrize(
    ("alpha", "losses"),
    [(1.0, [3.0, 0.2, 1.0]), (0.3, [0.7, 0.7, 0.7])],
    ids=["alpha-1", "equal-losses"],
)
def test_reductions_to_fedavg(alpha, losses):
    replies = numbered_replies([4, 9, 7], losses)
    assert_matches_fedavg(DeltaFL(alpha=alpha), replies, atol=1e-15, rtol=1e-6)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 10), st.data())
def test_cvar_is_the_mean_of_the_worst_k_clients_with_equal_p(n, data):
    # With p = 1/n and α = k/n, CVaR is the plain mean of the k largest losses.
    k = data.draw(st.integers(1, n))
    losses = data.draw(st.lists(st.floats(0, 100), min_size=n, max_size=n))
    weights = cvar_weights([1 / n] * n, losses, k / n)
    assert np.dot(weights, losses) == pytest.approx(np.mean(sorted(losses)[-k:]), abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(client_rounds(), st.floats(1e-6, 1.0))
def test_weights_are_a_finite_distribution_capped_by_p_over_alpha(case, alpha):
    counts, losses = case
    p = shares(counts)
    weights = cvar_weights(p, losses, alpha)
    assert np.all(np.isfinite(weights)) and np.all(weights >= 0)
    assert weights.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all(weights <= p / alpha * (1 + 1e-12))
    # The tail dominates: every client with weight has a loss >= every client without.
    if np.any(weights == 0) and np.any(weights > 0):
        assert min(np.asarray(losses)[weights > 0]) >= max(np.asarray(losses)[weights == 0])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0.0, "alpha must be > 0, got 0.0"),
        (1.5, "alpha must be <= 1, got 1.5"),
        (math.nan, "alpha must be a finite number, got nan"),
    ],
)
def test_invalid_alpha_rejected(value, message):
    with pytest.raises(ValueError, match=message):
        DeltaFL(alpha=value)
    with pytest.raises(ValueError, match=message):
        cvar_weights([0.5, 0.5], [1.0, 2.0], value)


def test_three_rounds_in_process(tmp_path):
    outcome, rounds = run_rule(tmp_path, "deltafl", **{"deltafl-alpha": 0.4})
    assert len(rounds) == 3
    for logged in rounds:
        expected = cvar_weights(shares(logged.counts), logged.losses, 0.4)
        np.testing.assert_allclose(logged.weights, expected, atol=1e-12)
        assert logged.diagnostics["deltafl-active-clients"] == np.count_nonzero(logged.weights)
    assert outcome.summary["strategy_settings"]["alpha"] == 0.4
    assert all(np.isfinite(a.numpy()).all() for a in outcome.arrays.values())
