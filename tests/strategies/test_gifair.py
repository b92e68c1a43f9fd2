"""GiFair: rank shifts r_i = Σ_j sign(f_i - f_j) scaled by λ = coeff · min p / (n - 1)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairfl.strategies import GiFair
from fairfl.strategies.gifair import gifair_lambda, gifair_weights, loss_ranks
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
    # n = (10, 20, 70): p = (0.1, 0.2, 0.7); f = (0.5, 2.0, 1.0)
    # r_1 = sign(0.5-2) + sign(0.5-1) = -2; r_2 = +2; r_3 = sign(1-0.5) + sign(1-2) = 0
    # λ_max = min p/(n-1) = 0.1/2 = 0.05
    p, f = [0.1, 0.2, 0.7], [0.5, 2.0, 1.0]
    np.testing.assert_array_equal(loss_ranks(f), [-2.0, 2.0, 0.0])
    assert gifair_lambda(p, 1.0) == pytest.approx(0.05)
    # coeff 1: w = (0.1 - 0.1, 0.2 + 0.1, 0.7) = (0, 0.3, 0.7)
    np.testing.assert_allclose(gifair_weights(p, f, 0.05), [0.0, 0.3, 0.7], atol=1e-15)
    # coeff 0.5: λ = 0.025, w = (0.05, 0.25, 0.7)
    np.testing.assert_allclose(gifair_weights(p, f, gifair_lambda(p, 0.5)), [0.05, 0.25, 0.7])


def test_ties_get_the_same_shift():
    # f = (1, 1, 2), p uniform: r = (0 - 1, 0 - 1, 2) = (-1, -1, 2); λ_max = (1/3)/2 = 1/6
    # w = (1/3 - 1/6, 1/3 - 1/6, 1/3 + 2/6) = (1/6, 1/6, 2/3)
    np.testing.assert_array_equal(loss_ranks([1.0, 1.0, 2.0]), [-1.0, -1.0, 2.0])
    p = [1 / 3] * 3
    np.testing.assert_allclose(
        gifair_weights(p, [1.0, 1.0, 2.0], gifair_lambda(p, 1.0)), [1 / 6, 1 / 6, 2 / 3]
    )


def test_strategy_round_by_hand_logs_absolute_lambda():
    strategy = GiFair(coeff=0.5)
    # p = (0.1, 0.2, 0.7) from n = (10, 20, 70), f as above: w = (0.05, 0.25, 0.7)
    # models 10, 2, 0 -> 0.5 + 0.5 + 0 = 1.0
    replies = [
        loss_reply(1, 10, 0.5, value=10.0),
        loss_reply(2, 20, 2.0, value=2.0),
        loss_reply(3, 70, 1.0, value=0.0),
    ]
    arrays, metrics = aggregate_round(strategy, replies)
    np.testing.assert_allclose(round_weights(strategy), [0.05, 0.25, 0.7])
    np.testing.assert_allclose(arrays["0"].numpy(), 1.0, rtol=1e-6)
    assert metrics["gifair-lambda"] == pytest.approx(0.025)


@pytest.mark.parametrize(
    ("coeff", "losses"),
    [(0.0, [3.0, 0.2, 1.0]), (1.0, [0.7, 0.7, 0.7])],
    ids=["coeff-0", "equal-losses"],
)
def test_reductions_to_fedavg(coeff, losses):
    assert_matches_fedavg(GiFair(coeff=coeff), numbered_replies([4, 9, 7], losses))


def test_single_client_gets_everything():
    assert gifair_lambda([1.0], 1.0) == 0.0
    np.testing.assert_allclose(gifair_weights([1.0], [5.0], 0.0), [1.0])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0, 100), min_size=1, max_size=10, unique=True))
def test_ranks_match_the_reference_argsort_form_without_ties(losses):
    # Reference code: weights_gi[argsort(losses)] = linspace(-(n-1), n-1, n)
    n = len(losses)
    reference = np.zeros(n)
    reference[np.argsort(losses)] = np.linspace(-(n - 1), n - 1, num=n)
    np.testing.assert_array_equal(loss_ranks(losses), reference)


@settings(max_examples=100, deadline=None)
@given(client_rounds(), st.floats(0.0, 1.0))
def test_weights_are_a_finite_distribution_within_the_bound(case, coeff):
    counts, losses = case
    p = shares(counts)
    weights = gifair_weights(p, losses, gifair_lambda(p, coeff))
    assert np.all(np.isfinite(weights))
    assert np.all(weights >= -1e-15)
    assert weights.sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-0.1, "coeff must be >= 0, got -0.1"),
        (1.5, "coeff must be <= 1, got 1.5"),
        (math.inf, "coeff must be a finite number, got inf"),
    ],
)
def test_invalid_coeff_rejected(value, message):
    with pytest.raises(ValueError, match=message):
        GiFair(coeff=value)


def test_pure_functions_reject_bad_input():
    with pytest.raises(ValueError, match=r"penalty must be >= 0, got -1\.0"):
        gifair_weights([0.5, 0.5], [1.0, 2.0], -1.0)
    with pytest.raises(ValueError, match="p must be non-empty and all > 0"):
        gifair_lambda([], 1.0)


def test_three_rounds_in_process(tmp_path):
    outcome, rounds = run_rule(tmp_path, "gifair")
    assert len(rounds) == 3
    for logged in rounds:
        p = shares(logged.counts)
        expected = gifair_weights(p, logged.losses, p.min() / 4)
        np.testing.assert_allclose(logged.weights, expected, atol=1e-12)
        assert logged.diagnostics["gifair-lambda"] == pytest.approx(p.min() / 4)
        assert min(logged.weights) >= -1e-15
    assert outcome.summary["strategy_settings"] == {"coeff": 1.0}
