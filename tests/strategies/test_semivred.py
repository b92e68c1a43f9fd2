"""Semi-VRed (paper 000, Algorithm 1 line 13, eqs. 10 and 12): weights, bound, strategy."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg
from hypothesis import given, settings
from hypothesis import strategies as st

from fairfl.contract import keys
from fairfl.strategies import FedAvg, SemiVRed
from fairfl.strategies.core.aggregation import reweighted_average, sample_weights
from fairfl.strategies.semivred import semi_deviations, semivred_beta_max, semivred_weights
from fairfl.strategies.vred import algorithm1_update, loss_deviations, vred_beta_max
from tests.conftest import make_reply
from tests.strategies.baseline_helpers import (
    LOCALS,
    LOSSES,
    P,
    aggregate_models,
    aggregate_round,
    hand_round,
    model_replies,
    run_rule,
)

# The hand-worked round of baseline_helpers (paper 000, eq. 12 with general p):
# p = (0.25, 0.25, 0.5), f = (1, 2, 3), f̄ = 2.25; a = (f - f̄)_+ = (0, 0, 0.75); A = 0.375


# ---------------------------------------------------------------- pure functions
def test_weights_by_hand():
    # β = 0.2, 2β = 0.4, 2βA = 0.15:
    #   below the mean: w = p (1 - 0.15) -> 0.25·0.85 = 0.2125 (clients 1 and 2)
    #   above:          w_3 = 0.5 (1 + 0.4·0.75 - 0.15) = 0.5·1.15 = 0.575;  Σ = 1
    np.testing.assert_allclose(semi_deviations(P, LOSSES), [0.0, 0.0, 0.75])
    np.testing.assert_allclose(semivred_weights(P, LOSSES, 0.2), [0.2125, 0.2125, 0.575])


def test_beta_max_by_hand():
    # β_max = 1/(2A) = 1/0.75 = 4/3, looser than VRed's 1/(2·1.25) = 0.4.
    assert semivred_beta_max(P, LOSSES) == pytest.approx(4 / 3)
    assert vred_beta_max(P, LOSSES) == pytest.approx(0.4)
    np.testing.assert_allclose(semivred_weights(P, LOSSES, 4 / 3), [0.0, 0.0, 1.0], atol=1e-15)
    assert semivred_beta_max(P, [1.0, 1.0, 1.0]) == float("inf")


def test_beta_max_equals_papers_equal_size_form():
    # p = 1/n: paper's n / (2 Σ_{f_j > f̄} (f_j - f̄)); f = (1, 2, 6), f̄ = 3 -> 3 / (2·3) = 0.5
    assert semivred_beta_max([1 / 3] * 3, [1.0, 2.0, 6.0]) == pytest.approx(0.5)


def test_negative_weights_just_above_beta_max():
    beta = semivred_beta_max(P, LOSSES) * (1 + 1e-6)
    weights = semivred_weights(P, LOSSES, beta)
    # every below-mean client shares the factor (1 - 2βA) < 0
    assert np.count_nonzero(weights < 0) == 2 and weights[2] > 0
    assert np.all(semivred_weights(P, LOSSES, 4 / 3 * (1 - 1e-6)) > 0)


def test_algorithm1_form_by_hand():
    # θ^t = [1], θ_i = (4, 0, 2) -> Δ_i = (-3, 1, -1), Δ̄ = -1
    # Σ p_i a_i (Δ_i - Δ̄) = 0.5·0.75·0 = 0 -> Δ = -1, θ^{t+1} = 2
    # weight form: 0.2125·4 + 0.2125·0 + 0.575·2 = 0.85 + 1.15 = 2.0
    new = algorithm1_update([np.array([1.0])], LOCALS, P, semi_deviations(P, LOSSES), 0.2)
    np.testing.assert_allclose(new[0], [2.0])
    np.testing.assert_allclose(
        reweighted_average([np.array([1.0])], LOCALS, semivred_weights(P, LOSSES, 0.2))[0],
        [2.0],
    )


clients_st = st.lists(
    st.tuples(st.integers(1, 1000), st.floats(0.0, 50.0)), min_size=1, max_size=12
)


@settings(max_examples=80, deadline=None)
@given(clients_st, st.floats(0.0, 5.0))
def test_below_mean_clients_all_get_p_times_one_minus_2_beta_a(clients, beta):
    counts, losses = zip(*clients, strict=True)
    p = sample_weights(counts)
    weights = semivred_weights(p, losses, beta)
    a = semi_deviations(p, losses)
    big_a = float(np.dot(p, a))
    below = loss_deviations(p, losses) <= 0
    np.testing.assert_allclose(weights[below], p[below] * (1 - 2 * beta * big_a), rtol=1e-12)
    assert np.all(np.isfinite(weights))
    assert weights.sum() == pytest.approx(1.0, abs=1e-12)
    # The bound is never tighter than VRed's; weights are >= 0 below it.
    assert semivred_beta_max(p, losses) >= vred_beta_max(p, losses) * (1 - 1e-12)
    if beta <= semivred_beta_max(p, losses):
        assert np.all(weights >= -1e-12)


# ---------------------------------------------------------------- the strategy
def test_strategy_aggregates_by_hand_and_reports_diagnostics():
    arrays, metrics = hand_round(SemiVRed())
    np.testing.assert_allclose(arrays["0"].numpy(), [2.0], rtol=1e-6)
    assert metrics["beta-max"] == pytest.approx(4 / 3)
    assert metrics["negative-weights"] == 0


def test_above_bound_counts_negatives_and_clip_option(caplog):
    # β = 2 > 4/3: 2βA = 1.5 -> below-mean w = p·(-0.5) = -0.125 (×2);
    # w_3 = 0.5 (1 + 4·0.75 - 1.5) = 1.25.  On θ = (4, 0, 2): -0.5 + 0 + 2.5 = 2.0
    # clipped: (0, 0, 1) -> 2.0 too (θ_3 = 2); use θ_3 = 6 to tell them apart:
    # faithful -0.5 + 0 + 7.5 = 7.0, clipped 6.0
    locals_ = [[[4.0]], [[0.0]], [[6.0]]]
    with caplog.at_level(logging.INFO, logger="fairfl"):
        faithful, metrics = hand_round(SemiVRed(beta=2.0), locals_)
    clipped, clipped_metrics = hand_round(SemiVRed(beta=2.0, clip_negative_weights=True), locals_)
    np.testing.assert_allclose(faithful["0"].numpy(), [7.0], rtol=1e-6)
    np.testing.assert_allclose(clipped["0"].numpy(), [6.0], rtol=1e-6)
    assert metrics["negative-weights"] == clipped_metrics["negative-weights"] == 2
    assert "Semi-VRed beta 2, beta-max 1.33333, 2 negative weights" in caplog.text


def test_beta_zero_and_equal_losses_are_fedavg():
    rng = np.random.default_rng(2)
    global_arrays = [rng.normal(size=(3, 3)).astype(np.float32)]
    locals_ = [[rng.normal(size=(3, 3)).astype(np.float32)] for _ in range(4)]
    counts = [4, 1, 9, 2]
    losses = [0.1, 0.5, 2.0, 1.0]
    fedavg, _ = aggregate_models(FedAvg(), global_arrays, locals_, counts, losses)
    flower, _ = FlowerFedAvg().aggregate_train(1, model_replies(locals_, counts, losses))
    beta0, _ = aggregate_models(SemiVRed(beta=0.0), global_arrays, locals_, counts, losses)
    equal, metrics = aggregate_models(SemiVRed(beta=0.9), global_arrays, locals_, counts, [1.3] * 4)
    np.testing.assert_array_equal(beta0["0"].numpy(), fedavg["0"].numpy())
    np.testing.assert_array_equal(equal["0"].numpy(), fedavg["0"].numpy())
    np.testing.assert_allclose(beta0["0"].numpy(), flower["0"].numpy(), rtol=1e-5, atol=1e-6)
    assert "beta-max" not in metrics and metrics["negative-weights"] == 0


def test_reply_missing_train_loss_is_dropped_by_name():
    strategy = SemiVRed()
    replies = [
        make_reply(1, [np.ones(2, np.float32)], {keys.NUM_EXAMPLES: 3}),
        make_reply(
            2, [np.full(2, 3.0, np.float32)], {keys.NUM_EXAMPLES: 3, keys.LOSS_BEFORE_TRAINING: 0.5}
        ),
    ]
    arrays, _ = aggregate_round(strategy, replies, arrays=[np.zeros(2, np.float32)])
    assert strategy.train_records[1].dropped == {1: "metrics['loss-before-training'] is missing"}
    np.testing.assert_allclose(arrays["0"].numpy(), 3.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"beta": -1.0}, "beta must be >= 0, got -1.0"),
        ({"beta": float("inf")}, "beta must be a finite number, got inf"),
        ({"clip_negative_weights": "yes"}, "clip_negative_weights must be a bool, got 'yes'"),
    ],
)
def test_invalid_settings_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SemiVRed(**kwargs)


# ---------------------------------------------------------------- end to end
def test_three_rounds_in_process(tmp_path):
    out, rounds = run_rule(tmp_path, "semivred", **{"semivred-clip-negative": True})
    assert len(rounds) == 3
    records = out.strategy.train_records
    assert sorted(records) == [1, 2, 3]
    for record in records.values():
        assert len(record.accepted) == 5 and not record.dropped
        assert sum(record.weights.values()) == pytest.approx(1.0)
        assert min(record.weights.values()) >= 0
        assert "negative-weights" in record.diagnostics
    assert out.strategy.beta == 0.2 and out.strategy.clip_negative_weights
    assert np.isfinite(out.summary["final_metrics"]["acc-mean"])
