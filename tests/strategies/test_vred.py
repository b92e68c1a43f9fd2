"""VRed (paper 000, Algorithm 1 line 11, eqs. 5 and 8): weights, bound, strategy, run."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg
from hypothesis import given, settings
from hypothesis import strategies as st

from fairfl.contract import keys
from fairfl.strategies import FedAvg, VRed
from fairfl.strategies.core.aggregation import sample_weights
from fairfl.strategies.vred import (
    algorithm1_update,
    clip_negative_weights,
    loss_deviations,
    vred_beta_max,
    vred_weights,
)
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

# The hand-worked round of baseline_helpers (paper 000, eq. 8 with general p):
# p = (0.25, 0.25, 0.5), f = (1, 2, 3), f̄ = 2.25; f - f̄ = (-1.25, -0.25, 0.75)


# ---------------------------------------------------------------- pure functions
def test_weights_by_hand():
    # β = 0.1, 2β = 0.2: w = p (1 + 0.2 (f - f̄))
    #   w_1 = 0.25 (1 - 0.25) = 0.1875, w_2 = 0.25 (1 - 0.05) = 0.2375,
    #   w_3 = 0.5 (1 + 0.15) = 0.575;  Σ = 1
    np.testing.assert_allclose(loss_deviations(P, LOSSES), [-1.25, -0.25, 0.75])
    np.testing.assert_allclose(vred_weights(P, LOSSES, 0.1), [0.1875, 0.2375, 0.575])


def test_beta_max_by_hand():
    # β_max = 1 / (2 (f̄ - min f)) = 1 / (2 · 1.25) = 0.4; at β_max the best client has 0.
    assert vred_beta_max(P, LOSSES) == pytest.approx(0.4)
    np.testing.assert_allclose(vred_weights(P, LOSSES, 0.4), [0.0, 0.2, 0.8], atol=1e-15)
    assert vred_beta_max(P, [2.0, 2.0, 2.0]) == float("inf")


def test_negative_weight_just_above_beta_max():
    beta = vred_beta_max(P, LOSSES) * (1 + 1e-6)
    weights = vred_weights(P, LOSSES, beta)
    assert np.count_nonzero(weights < 0) == 1 and weights[0] < 0
    assert np.all(vred_weights(P, LOSSES, 0.4 * (1 - 1e-6)) > 0)


def test_clip_negative_weights_by_hand():
    # β = 1: w = p (1 + 2 (f - f̄)) = (0.25·(-1.5), 0.25·0.5, 0.5·2.5) = (-0.375, 0.125, 1.25)
    # clipped: (0, 0.125, 1.25) / 1.375 = (0, 1/11, 10/11)
    weights = vred_weights(P, LOSSES, 1.0)
    np.testing.assert_allclose(weights, [-0.375, 0.125, 1.25])
    np.testing.assert_allclose(clip_negative_weights(weights), [0.0, 1 / 11, 10 / 11])
    with pytest.raises(ValueError, match="must have a positive entry"):
        clip_negative_weights([-1.0, 0.0])


def test_bad_pure_inputs_rejected():
    with pytest.raises(ValueError, match="non-empty vectors of one length"):
        loss_deviations([0.5, 0.5], [1.0])
    with pytest.raises(ValueError, match="must be finite"):
        loss_deviations([0.5, 0.5], [1.0, np.nan])


def test_algorithm1_form_by_hand():
    # θ^t = [1]; θ_i = (4, 0, 2) -> Δ_i = θ^t - θ_i = (-3, 1, -1)
    # Δ̄ = 0.25·(-3) + 0.25·1 + 0.5·(-1) = -1
    # Σ p_i (f_i - f̄)(Δ_i - Δ̄) = 0.25·(-1.25)(-2) + 0.25·(-0.25)(2) + 0.5·0.75·0 = 0.5
    # Δ = -1 + 2·0.1·0.5 = -0.9;  θ^{t+1} = 1 + 0.9 = 1.9
    # weight form: 0.1875·4 + 0.2375·0 + 0.575·2 = 1.9
    new = algorithm1_update([np.array([1.0])], LOCALS, P, loss_deviations(P, LOSSES), 0.1)
    np.testing.assert_allclose(new[0], [1.9])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 1000), st.floats(0.0, 50.0)), min_size=1, max_size=12),
    st.floats(0.0, 5.0),
)
def test_weights_sum_to_one_finite_and_increasing_in_loss(clients, beta):
    counts, losses = zip(*clients, strict=True)
    p = sample_weights(counts)
    weights = vred_weights(p, losses, beta)
    assert np.all(np.isfinite(weights))
    assert weights.sum() == pytest.approx(1.0, abs=1e-12)
    # w_i / p_i = 1 + 2β (f_i - f̄) is non-decreasing in f_i.
    order = np.argsort(losses, kind="stable")
    assert np.all(np.diff((weights / p)[order]) >= -1e-12)
    # Non-negative up to the bound.
    bound = vred_beta_max(p, losses)
    if beta <= bound:
        assert np.all(weights >= -1e-12)


# ---------------------------------------------------------------- the strategy
def test_strategy_aggregates_by_hand_and_reports_diagnostics():
    # θ_i = (4, 0, 2) with weights (0.1875, 0.2375, 0.575): 0.75 + 0 + 1.15 = 1.9
    arrays, metrics = hand_round(VRed(beta=0.1))
    np.testing.assert_allclose(arrays["0"].numpy(), [1.9], rtol=1e-6)
    assert metrics["beta-max"] == pytest.approx(0.4)
    assert metrics["negative-weights"] == 0
    assert metrics["lambda-sum"] == pytest.approx(1.0)


def test_strategy_weights_recorded_by_node():
    strategy = VRed(beta=0.1)
    hand_round(strategy)
    weights = strategy.train_records[1].weights
    assert weights == pytest.approx({1: 0.1875, 2: 0.2375, 3: 0.575})


def test_above_bound_is_faithful_by_default_and_warns_once(caplog):
    # β = 1 > β_max = 0.4: weights (-0.375, 0.125, 1.25) -> 1.5·(-0.375)... on θ = (4, 0, 2):
    # -0.375·4 + 0.125·0 + 1.25·2 = -1.5 + 2.5 = 1.0 (extrapolation, as in Algorithm 1)
    strategy = VRed(beta=1.0)
    with caplog.at_level(logging.INFO, logger="fairfl"):
        arrays, metrics = hand_round(strategy)
        hand_round(strategy)
    np.testing.assert_allclose(arrays["0"].numpy(), [1.0], rtol=1e-6)
    assert metrics["negative-weights"] == 1
    assert "round 1 VRed beta 1, beta-max 0.4, 1 negative weights" in caplog.text
    assert caplog.text.count("is above this round's bound") == 1


def test_clip_option_clips_then_renormalises():
    # clipped weights (0, 1/11, 10/11) on θ = (4, 0, 2): 20/11
    arrays, metrics = hand_round(VRed(beta=1.0, clip_negative_weights=True))
    np.testing.assert_allclose(arrays["0"].numpy(), [20 / 11], rtol=1e-6)
    assert metrics["negative-weights"] == 1  # counted before clipping
    assert metrics["lambda-min"] == 0.0


def test_beta_zero_is_fedavg_and_flowers_fedavg():
    rng = np.random.default_rng(0)
    global_arrays = [rng.normal(size=(4, 3)).astype(np.float32)]
    locals_ = [[rng.normal(size=(4, 3)).astype(np.float32)] for _ in range(4)]
    counts, losses = [3, 10, 1, 7], [0.2, 1.5, 3.0, 0.9]
    ours, _ = aggregate_models(VRed(beta=0.0), global_arrays, locals_, counts, losses)
    fedavg, _ = aggregate_models(FedAvg(), global_arrays, locals_, counts, losses)
    flower, _ = FlowerFedAvg().aggregate_train(1, model_replies(locals_, counts, losses))
    np.testing.assert_array_equal(ours["0"].numpy(), fedavg["0"].numpy())
    np.testing.assert_allclose(ours["0"].numpy(), flower["0"].numpy(), rtol=1e-5, atol=1e-6)


def test_equal_losses_are_fedavg():
    rng = np.random.default_rng(1)
    global_arrays = [rng.normal(size=5).astype(np.float32)]
    locals_ = [[rng.normal(size=5).astype(np.float32)] for _ in range(3)]
    ours, metrics = aggregate_models(VRed(beta=0.5), global_arrays, locals_, [2, 5, 9], [0.7] * 3)
    fedavg, _ = aggregate_models(FedAvg(), global_arrays, locals_, [2, 5, 9], [0.7] * 3)
    np.testing.assert_array_equal(ours["0"].numpy(), fedavg["0"].numpy())
    assert "beta-max" not in metrics  # no bound when all losses are equal (inf)


def test_reply_missing_train_loss_is_dropped_by_name(caplog):
    strategy = VRed()
    replies = [
        make_reply(
            1, [np.ones(2, np.float32)], {keys.NUM_EXAMPLES: 3, keys.LOSS_BEFORE_TRAINING: 1.0}
        ),
        make_reply(2, [np.ones(2, np.float32)], {keys.NUM_EXAMPLES: 3}),
    ]
    with caplog.at_level(logging.INFO, logger="fairfl"):
        arrays, metrics = aggregate_round(strategy, replies, arrays=[np.zeros(2, np.float32)])
    assert strategy.train_records[1].dropped == {2: "metrics['loss-before-training'] is missing"}
    assert "dropped reply from node 2: metrics['loss-before-training'] is missing" in caplog.text
    assert metrics["num-replies"] == 1
    np.testing.assert_allclose(arrays["0"].numpy(), 1.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"beta": -0.1}, "beta must be >= 0, got -0.1"),
        ({"beta": float("nan")}, "beta must be a finite number, got nan"),
        ({"beta": "0.1"}, "beta must be a finite number, got '0.1'"),
        ({"clip_negative_weights": 1}, "clip_negative_weights must be a bool, got 1"),
        ({"fraction_train": 2.0}, r"fraction_train must be in \[0, 1\], got 2.0"),
    ],
)
def test_invalid_settings_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        VRed(**kwargs)


# ---------------------------------------------------------------- end to end
def test_three_rounds_in_process(tmp_path):
    out, rounds = run_rule(tmp_path, "vred", **{"vred-beta": 0.5})
    assert len(rounds) == 3
    records = out.strategy.train_records
    assert sorted(records) == [1, 2, 3]
    for record in records.values():
        assert len(record.accepted) == 5 and not record.dropped
        assert sum(record.weights.values()) == pytest.approx(1.0)
        assert record.diagnostics["beta-max"] > 0
        assert record.diagnostics["negative-weights"] >= 0
    assert out.strategy.beta == 0.5
    assert np.isfinite(out.summary["final_metrics"]["acc-mean"])
