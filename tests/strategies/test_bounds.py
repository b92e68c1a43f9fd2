"""Bounds with a reason (issue 21 item 2).

Reported scalars outside their documented range (:mod:`fairfl.contract.bounds`) drop
the reply, naming node, field and bound; the rules that exponentiate or project stay
finite on every accepted input (property tests from 1e-300 to 1e300); rule settings
out of range fail naming the run-config key; a new global model that breaks
``max_abs_weight`` is not committed and the skip is recorded.
"""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairfl.contract import ModelLayout, ReplyError, keys, read_evaluate_reply, read_train_reply
from fairfl.contract.bounds import MAX_LOSS
from fairfl.server.results import RoundLog
from fairfl.strategies import AFL, VRed, build_strategy
from fairfl.strategies.afl import afl_lambda_update, project_to_simplex
from fairfl.strategies.deltafl import cvar_weights
from fairfl.strategies.gifair import gifair_lambda, gifair_weights
from fairfl.strategies.rcfl import RCFL
from fairfl.strategies.rcfl_dual import (
    aggregate_eta,
    effective_weights,
    eta_reach,
    smoothed_optimal_eta,
)
from fairfl.strategies.semivred import semivred_weights
from fairfl.strategies.term import term_weights, tilted_loss
from fairfl.strategies.vred import MAX_BETA, clip_negative_weights, vred_weights
from tests.conftest import arrays_of, make_reply
from tests.strategies.baseline_helpers import (
    aggregate_models,
    aggregate_round,
    configure,
    local,
    loss_reply,
    shares,
)
from tests.strategies.reference import qfedavg_lambdas

WEIGHTS = [np.zeros((2, 2), np.float32)]
LAYOUT = ModelLayout.of(arrays_of(WEIGHTS))

# Magnitudes across float64: the edges the issue names and the values in between.
EDGES = [0.0, 1e-300, 1e-10, 0.5, 1.0, 3.0, 1e6, 1e16, 1e17, 1e100, 1e300]
MAGNITUDE = st.one_of(st.sampled_from(EDGES), st.floats(min_value=0.0, max_value=1e300))
SIGNED = st.one_of(MAGNITUDE, MAGNITUDE.map(lambda v: -v))
COUNTS = st.lists(st.integers(1, 1000), min_size=1, max_size=8)


def on_simplex(weights):
    assert np.all(np.isfinite(weights))
    assert np.all(weights >= 0)
    assert math.isclose(float(weights.sum()), 1.0, rel_tol=1e-9)


# --------------------------------------------------------------- reported values
@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (keys.LOSS_BEFORE_TRAINING, 2e6, r"must be <= 1e\+06 \(max_loss\), got 2e\+06"),
        (keys.TRAIN_LOSS, 1e17, r"must be <= 1e\+06 \(max_loss\), got 1e\+17"),
        (keys.LOSS_BEFORE_TRAINING, -0.5, r"must be >= 0, got -0\.5"),
        (keys.RCFL_ETA, -3e6, r"must be >= -1e\+06 \(max_loss\), got -3e\+06"),
        (keys.RCFL_ETA, 279e4, r"must be <= 1e\+06 \(max_loss\), got 2\.79e\+06"),
        (keys.QFFL_H, 1e301, r"must be <= 1e\+300, got 1e\+301"),
        (keys.ACTIVATION, [0.5, -2e6], r"must be >= -1e\+06, got -2e\+06"),
        (keys.ACTIVATION, [0.5, math.inf], r"is inf"),
    ],
)
def test_a_reported_value_out_of_range_is_a_reply_error_naming_node_field_and_bound(
    key, value, reason
):
    reply = make_reply(7, WEIGHTS, {keys.NUM_EXAMPLES: 3, key: value})
    with pytest.raises(ReplyError, match=rf"node 7: metrics\['{key}'\] {reason}"):
        read_train_reply(reply, LAYOUT)


def test_max_loss_raises_the_loss_and_eta_bounds_and_names_the_app_loss_key():
    metrics = {keys.NUM_EXAMPLES: 3, keys.TRAIN_LOSS: 2e6, keys.RCFL_ETA: -2e6, "my-loss": 5e6}
    reply = read_train_reply(
        make_reply(1, WEIGHTS, metrics), LAYOUT, max_loss=1e7, loss_key="my-loss"
    )
    assert reply.metrics["my-loss"] == 5e6
    only_mine = {keys.NUM_EXAMPLES: 3, "my-loss": 5e6}
    with pytest.raises(ReplyError, match=r"metrics\['my-loss'\] must be <= 1e\+06 \(max_loss\)"):
        read_train_reply(make_reply(1, WEIGHTS, only_mine), LAYOUT, loss_key="my-loss")
    assert MAX_LOSS == 1e6


def test_eval_loss_has_no_upper_bound_but_must_be_finite_and_non_negative():
    # A wrecked global model gives honest clients huge losses: their evaluation is kept
    # (it drives no rule state), so the round still reports its accuracy.
    huge = make_reply(4, None, {keys.NUM_EXAMPLES: 3, keys.EVAL_LOSS: 5e10, keys.EVAL_ACC: 0.1})
    assert read_evaluate_reply(huge).eval_loss == 5e10
    for value, reason in ((-1.0, "must be >= 0"), (float("inf"), "is inf")):
        bad = make_reply(4, None, {keys.NUM_EXAMPLES: 3, keys.EVAL_LOSS: value, keys.EVAL_ACC: 0.1})
        with pytest.raises(ReplyError, match=rf"node 4: metrics\['eval_loss'\].*{reason}"):
            read_evaluate_reply(bad)


def test_a_strategy_drops_the_absurd_loss_and_aggregates_the_rest():
    # Node 2 reports 1e17 (AFL raised IndexError on it, issue 21): dropped, named; node
    # 1 alone is aggregated, so the new model is its model (all ones).
    strategy = AFL(max_loss=100.0)
    arrays, metrics = aggregate_round(
        strategy, [loss_reply(1, 5, 1.0, 1.0), loss_reply(2, 5, 1e17)]
    )
    assert strategy.train_records[1].dropped == {
        2: "metrics['loss-before-training'] must be <= 100 (max_loss), got 1e+17"
    }
    assert metrics["dropped-replies"] == 1
    np.testing.assert_array_equal(arrays["0"].numpy(), np.ones((2, 3), np.float32))


@pytest.mark.parametrize("value", [0.0, -1.0, math.inf, math.nan])
def test_max_loss_must_be_a_finite_number_above_zero(value):
    with pytest.raises(ValueError, match="max_loss must be"):
        VRed(max_loss=value)


# ------------------------------------------------------------ overflow-safe rules
def test_afl_at_loss_1e17_projects_instead_of_raising():
    # y = (0.5 + 1e16, 0.5 + 0.1): the first entry is above the second by far more
    # than 1, so the projection is (1, 0). Before the shift, u_1 + (1 - u_1) rounded
    # to 0 and no index was found (IndexError).
    np.testing.assert_array_equal(afl_lambda_update([0.5, 0.5], [1e17, 1.0], 0.1), [1.0, 0.0])
    np.testing.assert_array_equal(project_to_simplex([1e17, 3.0, 1e17]), [0.5, 0.0, 0.5])
    # The strategy, with max_loss raised to accept it: λ moves all mass to node 2.
    strategy = AFL(max_loss=1e18)
    aggregate_round(strategy, [loss_reply(1, 5, 1.0), loss_reply(2, 5, 1e17)])
    assert strategy.train_records[1].weights == {1: 0.0, 2: 1.0}


@settings(max_examples=200, deadline=None)
@given(st.lists(SIGNED, min_size=1, max_size=10))
def test_projection_lands_on_the_simplex_for_any_finite_input(values):
    on_simplex(project_to_simplex(values))


@settings(max_examples=200, deadline=None)
@given(COUNTS, st.data(), MAGNITUDE)
def test_afl_update_stays_on_the_simplex(counts, data, lambda_lr):
    losses = data.draw(st.lists(MAGNITUDE, min_size=len(counts), max_size=len(counts)))
    on_simplex(afl_lambda_update(shares(counts), losses, lambda_lr))


@settings(max_examples=200, deadline=None)
@given(COUNTS, st.data(), MAGNITUDE)
def test_term_weights_and_tilted_loss_are_finite(counts, data, alpha):
    losses = data.draw(st.lists(MAGNITUDE, min_size=len(counts), max_size=len(counts)))
    p = shares(counts)
    on_simplex(term_weights(p, losses, alpha))
    value = tilted_loss(p, losses, alpha)
    mean = float(np.dot(p, losses))
    assert min(mean, max(losses)) * (1 - 1e-12) <= value <= max(losses)


@settings(max_examples=200, deadline=None)
@given(
    COUNTS,
    st.data(),
    st.floats(min_value=0.0, max_value=100.0),
    st.sampled_from([1e-300, 1e-3, 1.0, 10.0, 1e300]),
    st.booleans(),
)
def test_qffl_lambdas_are_finite_non_negative_and_sum_to_at_most_one(
    counts, data, q, lipschitz, weighted
):
    size = len(counts)
    losses = data.draw(st.lists(MAGNITUDE, min_size=size, max_size=size))
    distances = data.draw(st.lists(MAGNITUDE, min_size=size, max_size=size))
    lam, h = qfedavg_lambdas(
        losses, distances, q=q, lipschitz=lipschitz, weights=shares(counts) if weighted else None
    )
    assert np.all(np.isfinite(lam)) and np.all(lam >= 0)
    assert lam.sum() <= 1 + 1e-9
    assert not np.any(np.isnan(h)) and np.all(h >= 0)  # h may underflow to 0 or pass 1e308


def test_qffl_lambdas_where_h_overflows_match_the_small_case():
    # Losses 1e6 and 2e6 at q = 60: (F + ε)^q is 1e360 and 2^60·1e360, beyond float64.
    # Without distances λ_k = F_k^q / Σ_j F_j^q = (1, 2^60) / (1 + 2^60), as for
    # losses 1 and 2, where nothing overflows.
    lam, _ = qfedavg_lambdas([1e6, 2e6], [0.0, 0.0], q=60.0, lipschitz=1.0)
    small, _ = qfedavg_lambdas([1.0, 2.0], [0.0, 0.0], q=60.0, lipschitz=1.0, epsilon=0.0)
    np.testing.assert_allclose(lam, [1 / (1 + 2.0**60), 2.0**60 / (1 + 2.0**60)], rtol=1e-9)
    np.testing.assert_allclose(lam, small, rtol=1e-9)


@settings(max_examples=200, deadline=None)
@given(
    COUNTS, st.data(), st.one_of(st.sampled_from([0.0, 0.1, 0.5, MAX_BETA]), st.floats(0, MAX_BETA))
)
def test_vred_and_semivred_weights_are_finite_and_sum_to_one(counts, data, beta):
    losses = data.draw(st.lists(MAGNITUDE, min_size=len(counts), max_size=len(counts)))
    p = shares(counts)
    for rule in (vred_weights, semivred_weights):
        weights = rule(p, losses, beta)
        assert np.all(np.isfinite(weights))
        # They sum to 1 up to rounding relative to their size (huge weights extrapolate).
        assert abs(weights.sum() - 1.0) <= 1e-9 + 1e-12 * np.abs(weights).sum()
        if np.any(weights > 0):
            on_simplex(clip_negative_weights(weights))


@settings(max_examples=100, deadline=None)
@given(COUNTS, st.data(), st.floats(0.0, 1.0))
def test_gifair_and_deltafl_weights_are_finite_at_any_loss(counts, data, level):
    # Both only rank or sort the losses: no arithmetic on them that could overflow.
    losses = data.draw(st.lists(MAGNITUDE, min_size=len(counts), max_size=len(counts)))
    p = shares(counts)
    gifair = gifair_weights(p, losses, gifair_lambda(p, level))
    assert np.all(np.isfinite(gifair)) and math.isclose(gifair.sum(), 1.0, rel_tol=1e-9)
    on_simplex(cvar_weights(p, losses, max(level, 1e-3)))


def test_vred_beta_above_its_bound_is_refused():
    with pytest.raises(ValueError, match=r"beta must be in \[0, 1e\+06\], got 2000000.0"):
        vred_weights([1.0], [1.0], 2e6)
    with pytest.raises(ValueError, match=r"beta must be <= 1e\+06, got 2000000.0"):
        VRed(beta=2e6)


@settings(max_examples=100, deadline=None)
@given(
    COUNTS,
    st.data(),
    st.sampled_from([1e-300, 0.05, 1.0, 1e6]),
    st.sampled_from([0.01, 0.5, 1.0]),
)
def test_rcfl_eta_and_q_are_finite(counts, data, mu, alpha):
    size = len(counts)
    losses = data.draw(st.lists(MAGNITUDE, min_size=size, max_size=size))
    etas = data.draw(st.lists(SIGNED, min_size=size, max_size=size))
    p = shares(counts)
    assert np.all(np.isfinite(effective_weights(losses, etas[0], alpha, mu)))
    averaged = aggregate_eta(etas, p)
    # A convex combination, up to rounding: each p_k η_k and each partial sum may round by
    # eps relative and, below the normal range, by one subnormal step absolute
    # (0.5 · 5e-324 rounds to 0, under the smallest η).
    tol = size * (np.finfo(float).eps * max(abs(e) for e in etas) + math.ulp(0.0))
    assert min(etas) - tol <= averaged <= max(etas) + tol
    eta_star = smoothed_optimal_eta(losses, p, np.full(size, alpha), mu)
    assert eta_star is None or math.isfinite(eta_star)


def test_rcfl_eta_probe_at_losses_of_1e17_terminates_between_the_losses():
    # f = (1e17, 2e17), p = (1/2, 1/2), α = 1/2: caps p/α = (1, 1), and Σ σ((f - η)/μ) = 1
    # at η = 1.5e17 (the two terms are σ(x) and σ(-x)). The bracket used to step by μ
    # from f.max() + 40μ, which rounds to f.max(): an endless loop.
    eta = smoothed_optimal_eta([1e17, 2e17], [0.5, 0.5], [0.5, 0.5], 0.05)
    assert eta == pytest.approx(1.5e17, rel=1e-9)


def test_eta_reach_by_hand():
    # η^t = 2, β_η = 0.1, κ = 5, α = 0.5: a step moves η by -0.1 (1 - q), q in [0, 2],
    # so by [-0.1, 0.1]; five steps reach [1.5, 2.5], widened by 1e-5 · (2 + 0.5 + 0.5).
    low, high = eta_reach(2.0, 0.1, 5, 0.5)
    assert low == pytest.approx(1.5 - 3e-5, abs=1e-12)
    assert high == pytest.approx(2.5 + 3e-5, abs=1e-12)
    # α = 1 (FedAvg): q <= 1, η can only fall.
    assert eta_reach(0.0, 0.1, 5, 1.0)[1] == pytest.approx(0.5e-5)


def test_rcfl_drops_an_eta_no_local_steps_can_reach():
    # Issue 21: reported values drove η from 2 to 279. From η^t = 2 (lr 0.1, κ = 5,
    # α = 0.5) an honest client reaches [1.5, 2.5]: 279 is dropped, 2.3 kept.
    strategy = RCFL(alpha=0.5, eta_init=2.0, eta_probe=False, check_eta_reach=True)
    configure(strategy, [1, 2])
    replies = [
        make_reply(1, local(1.0), {keys.NUM_EXAMPLES: 10, keys.RCFL_ETA: 2.3}),
        make_reply(2, local(5.0), {keys.NUM_EXAMPLES: 10, keys.RCFL_ETA: 279.0}),
    ]
    arrays, _ = strategy.aggregate_train(1, replies)
    reason = strategy.train_records[1].dropped[2]
    assert reason.startswith("metrics['rcfl-eta'] is 279, outside [1.49997, 2.50003] that 5 SGD")
    assert strategy.eta == pytest.approx(2.3)
    np.testing.assert_array_equal(arrays["0"].numpy(), np.ones((2, 3), np.float32))


# ---------------------------------------------------------- run-config bounds
@pytest.mark.parametrize(
    ("rule", "key", "value", "message"),
    [
        ("term", "term-alpha", -1.0, r"alpha must be >= 0, got -1\.0"),
        ("afl", "afl-lambda-lr", math.inf, r"lambda_lr must be a finite number, got inf"),
        ("qffl", "qffl-q", -1.0, r"q must be >= 0, got -1\.0"),
        ("qffl", "lr", 0.0, r"client_learning_rate must be > 0, got 0\.0"),
        ("vred", "vred-beta", 2e6, r"beta must be <= 1e\+06"),
        ("rcfl", "rcfl-mu", 0.0, r"mu must be > 0, got 0\.0"),
        ("rcfl", "rcfl-eta-lr-scale", -1.0, r"eta_lr_scale must be > 0"),
        ("propfair", "propfair-epsilon", -0.2, r"epsilon must be"),
        ("equitable", "equitable-activation-dp-clip", -1.0, r"activation_dp_clip must be"),
    ],
)
def test_a_rule_setting_out_of_range_names_the_run_config_key(rule, key, value, message):
    with pytest.raises(ValueError, match=rf"^run config {key} \(rule {rule}\): {message}"):
        build_strategy(rule, {key: value})


# ------------------------------------------------------------- the new global model
def test_an_aggregate_beyond_max_abs_weight_is_skipped_and_recorded(caplog, tmp_path):
    # VRed, β = 2, the hand round of test_vred: p = (1/4, 1/4, 1/2), f = (1, 2, 3),
    # f̄ = 2.25, so w = p (1 + 4 (f - f̄)) = (-1, 0, 2). Local models -0.5, 0, 0.9 are
    # within max_abs_weight = 1, their combination -1·(-0.5) + 2·0.9 = 2.3 is not.
    strategy = VRed(beta=2.0, max_abs_weight=1.0)
    before = [np.zeros(1, np.float32)]
    arrays, metrics = aggregate_models(
        strategy, before, [[[-0.5]], [[0.0]], [[0.9]]], [1, 1, 2], [1.0, 2.0, 3.0]
    )
    assert arrays is None  # Flower's start() keeps the previous model, bit for bit
    assert metrics["skipped-aggregate"] == 1
    record = strategy.train_records[1]
    assert record.weights == {1: -1.0, 2: 0.0, 3: 2.0}
    assert record.skipped == "the new global model has |w| 2.3 > max_abs_weight 1 in '0'"
    assert "round 1 skipped: the new global model has |w| 2.3" in caplog.text
    # rounds.jsonl and summary.json say so.
    log = RoundLog(tmp_path, strategy, {}, checkpoint=False, run_id="bounds")
    log.on_round_end(1, arrays_of(before))
    summary = log.finish(strategy.settings())
    line = json.loads((tmp_path / "rounds.jsonl").read_text().splitlines()[-1])
    assert line["train"]["skipped"] == record.skipped
    assert line["train"]["diagnostics"]["skipped-aggregate"] == 1
    assert summary["skipped_rounds"] == {"1": record.skipped}


def test_a_skipped_round_leaves_the_rules_state_as_it_was():
    # An AFL whose aggregate is scaled past the bound: λ must not move in that round.
    class Overshooting(AFL):
        def aggregate(self, server_round, global_arrays, replies):
            arrays, diagnostics = super().aggregate(server_round, global_arrays, replies)
            return [a * 1e9 for a in arrays], diagnostics

    strategy = Overshooting(lambda_lr=1.0)
    arrays, _ = aggregate_round(strategy, [loss_reply(1, 5, 1.0, 1.0), loss_reply(2, 5, 3.0, 1.0)])
    assert arrays is None
    assert strategy.state_dict() == AFL().state_dict()
    assert strategy.train_records[1].skipped.startswith("the new global model has |w| 1e+09")


def test_a_non_finite_aggregate_is_skipped_naming_the_array():
    class Exploding(VRed):
        def aggregate(self, server_round, global_arrays, replies):
            arrays, diagnostics = super().aggregate(server_round, global_arrays, replies)
            return [np.full_like(a, np.inf) for a in arrays], diagnostics

    strategy = Exploding(max_abs_weight=None)
    arrays, metrics = aggregate_round(strategy, [loss_reply(1, 5, 1.0), loss_reply(2, 5, 1.0)])
    assert arrays is None and metrics["skipped-aggregate"] == 1
    assert strategy.train_records[1].skipped == "the new global model is not finite (Inf in '0')"
