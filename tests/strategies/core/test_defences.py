"""Loss-inflation defences: clipping reported losses to median ± k·MAD, capping a share."""

import logging
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fairfl.contract import TrainReply, keys
from fairfl.strategies import QFFL, TERM, FedAvg, FedMGDAPlus, QFedSGD
from fairfl.strategies.core.defences import (
    cap_weights,
    clip_reported_losses,
    mad_clip_range,
    share_capped,
)
from tests.strategies.baseline_helpers import aggregate_round, numbered_replies, round_weights
from tests.strategies.test_qffl import GLOBAL, LOCALS, LR, aggregate

LOSS = keys.LOSS_BEFORE_TRAINING


# --------------------------------------------------------------------------- ranges
@pytest.mark.parametrize(
    ("losses", "k", "expected"),
    [
        # median 3; |f - 3| = (2, 1, 0, 1, 97) -> MAD 1; 3 ± 2
        ([1.0, 2.0, 3.0, 4.0, 100.0], 2.0, (1.0, 5.0)),
        # k = 0: the median alone
        ([1.0, 2.0, 3.0, 4.0, 100.0], 0.0, (3.0, 3.0)),
        # median 0.2, MAD 0.1: 0.2 - 10·0.1 < 0 is floored at 0
        ([0.1, 0.2, 5.0], 10.0, (0.0, 1.2)),
        # even count: median (2 + 3)/2 = 2.5; |f - 2.5| = (1.5, 0.5, 0.5, 1.5) -> MAD 1
        ([1.0, 2.0, 3.0, 4.0], 1.0, (1.5, 3.5)),
        # more than half equal: MAD 0
        ([2.0, 2.0, 2.0, 7.0], 3.0, (2.0, 2.0)),
    ],
)
def test_mad_clip_range_by_hand(losses, k, expected):
    assert mad_clip_range(losses, k) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("losses", "k", "message"),
    [
        ([], 1.0, "losses must be a non-empty finite vector"),
        ([1.0, math.nan], 1.0, "losses must be a non-empty finite vector"),
        ([1.0], -1.0, "k must be a finite number >= 0, got -1.0"),
        ([1.0], math.inf, "k must be a finite number >= 0, got inf"),
    ],
)
def test_mad_clip_range_rejects_bad_input(losses, k, message):
    with pytest.raises(ValueError, match=message):
        mad_clip_range(losses, k)


def _reply(node: int, loss: float | None, h: float | None = None) -> TrainReply:
    metrics: dict = {keys.NUM_EXAMPLES: 10}
    if loss is not None:
        metrics[LOSS] = loss
    if h is not None:
        metrics[keys.QFFL_H] = h
    return TrainReply(node_id=node, num_examples=10, arrays=[], metrics=metrics)


def test_clip_replaces_only_the_outliers_and_drops_their_qffl_h(caplog):
    replies = [_reply(i + 1, f, h=7.0) for i, f in enumerate([1.0, 2.0, 3.0, 4.0, 100.0])]
    replies.append(_reply(6, None))  # no loss: neither counted nor changed
    before = [dict(r.metrics) for r in replies]
    with caplog.at_level(logging.INFO, logger="fairfl"):
        out, clip = clip_reported_losses(replies, LOSS, 2.0)
    assert [r.metrics.get(LOSS) for r in out] == [1.0, 2.0, 3.0, 4.0, 5.0, None]
    assert out[:4] == replies[:4] and out[5] is replies[5]
    assert keys.QFFL_H not in out[4].metrics and out[4].metrics[keys.NUM_EXAMPLES] == 10
    assert [dict(r.metrics) for r in replies] == before  # inputs unchanged
    assert clip is not None
    assert clip.diagnostics() == {
        "loss-clip-low": 1.0,
        "loss-clip-high": 5.0,
        "loss-clipped": 1,
        "loss-reported": {5: 100.0},
    }
    assert "node 5 reported loss-before-training 100, clipped to 5 (median ± 2 MAD)" in (
        caplog.text
    )


def test_clip_off_or_without_losses_returns_the_replies_as_they_are():
    replies = [_reply(1, 1.0), _reply(2, 50.0)]
    assert clip_reported_losses(replies, LOSS, 0.0) == (replies, None)
    bare = [_reply(1, None)]
    assert clip_reported_losses(bare, LOSS, 3.0) == (bare, None)


@settings(max_examples=50, deadline=None)
@given(
    honest=st.lists(st.floats(0.0, 10.0), min_size=3, max_size=10),
    lie=st.floats(0.0, 1e6),
    k=st.floats(0.5, 5.0),
)
def test_property_one_liar_of_three_or_more_gains_at_most_the_honest_range(honest, lie, k):
    replies = [_reply(i + 1, f) for i, f in enumerate([*honest, lie])]
    out, _ = clip_reported_losses(replies, LOSS, k)
    low, high = mad_clip_range([*honest, lie], k)
    clipped = [float(r.metrics[LOSS]) for r in out]
    assert all(low <= f <= high for f in clipped)
    # With one liar among >= 3 honest clients, the median lies within the honest range.
    assert clipped[-1] <= max(honest) + k * (max(honest) - min(honest)) + 1e-9


# --------------------------------------------------------------------------- caps
def test_cap_by_hand_non_negative():
    # 0.5 -> 0.4; the 0.1 excess goes to 0.25 and 0.25 in proportion: 0.3 each
    np.testing.assert_allclose(cap_weights([0.5, 0.25, 0.25], 0.4), [0.4, 0.3, 0.3])
    # sum 2 (q-FFL's Σλ need not be 1): the cap is 0.4 · 2 = 0.8
    np.testing.assert_allclose(cap_weights([1.0, 0.5, 0.5], 0.4), [0.8, 0.6, 0.6])


def test_cap_by_hand_when_every_uncapped_weight_is_negative():
    # VRed extrapolating: (2, 2, -0.5 × 6), sum 1. Cap 0.25: the two get 0.25; the six
    # share 1 - 0.5 = 0.5 equally (none is positive): 1/12 each.
    capped = cap_weights([2.0, 2.0, *[-0.5] * 6], 0.25, allow_negative=True)
    np.testing.assert_allclose(capped, [0.25, 0.25, *[1 / 12] * 6])


def test_cap_by_hand_mixed_signs_goes_to_the_positive_ones():
    # (0.6, 0.3, 0.2, -0.1), cap 0.4: 0.6 -> 0.4, its 0.2 to 0.3 and 0.2 in proportion
    # -> (0.42, 0.28); 0.42 -> 0.4, its 0.02 to 0.28 alone -> 0.30. -0.1 stays.
    capped = cap_weights([0.6, 0.3, 0.2, -0.1], 0.4, allow_negative=True)
    np.testing.assert_allclose(capped, [0.4, 0.4, 0.3, -0.1])


@pytest.mark.parametrize(
    ("weights", "cap", "kwargs", "message"),
    [
        ([1.0], 0.0, {}, r"cap must be in \(0, 1\], got 0.0"),
        ([1.5, -0.5], 1.0, {}, "weights must be >= 0"),
        ([0.5, -0.5], 1.0, {"allow_negative": True}, "weights must sum to > 0"),
    ],
)
def test_cap_rejects_bad_input(weights, cap, kwargs, message):
    with pytest.raises(ValueError, match=message):
        cap_weights(weights, cap, **kwargs)


@settings(max_examples=100, deadline=None)
@given(
    raw=st.lists(st.floats(-1.0, 2.0), min_size=1, max_size=12),
    cap=st.floats(0.05, 1.0),
)
def test_property_cap_keeps_sum_and_order_and_holds(raw, cap):
    weights = np.asarray(raw)
    total = float(weights.sum())
    assume(total > 0.05)
    assume(cap * len(raw) >= 1)
    capped = cap_weights(weights, cap, allow_negative=True)
    assert capped.sum() == pytest.approx(total, rel=1e-9, abs=1e-9)
    assert capped.max() <= cap * total * (1 + 1e-9) + 1e-12
    order = np.argsort(weights, kind="stable")
    assert np.all(np.diff(capped[order]) >= -1e-9)


def test_share_capped_is_none_when_off_or_not_binding():
    weights = np.array([0.5, 0.3, 0.2])
    assert share_capped(weights, 1.0) is None
    assert share_capped(weights, 0.5) is None
    np.testing.assert_allclose(share_capped(weights, 0.4), [0.4, 0.36, 0.24])


# --------------------------------------------------------------------------- strategies
def test_term_reads_the_clipped_loss_and_records_it():
    # α = ln 3, equal n, f = (1, 2, 3, 4, 100) clipped to (1, 2, 3, 4, 5) (k = 2 as above):
    # w ∝ 3^f = (3, 9, 27, 81, 243) / 363. Unclipped the liar would get ~1.
    strategy = TERM(alpha=math.log(3.0), loss_clip_mad=2.0)
    replies = numbered_replies([10] * 5, [1.0, 2.0, 3.0, 4.0, 100.0])
    _, metrics = aggregate_round(strategy, replies)
    np.testing.assert_allclose(round_weights(strategy), np.array([3, 9, 27, 81, 243]) / 363)
    record = strategy.train_records[1]
    assert record.diagnostics["loss-reported"] == {5: 100.0}
    assert metrics["loss-clipped"] == 1 and metrics["loss-clip-high"] == 5.0
    # The reply message itself is left as the client sent it.
    assert replies[4].content["metrics"][LOSS] == 100.0


def test_fedavg_share_cap_by_hand():
    # n = (70, 10, 10, 10): p = (0.7, 0.1, 0.1, 0.1); cap 0.4 -> (0.4, 0.2, 0.2, 0.2).
    # Models all 1, 2, 3, 4 from w^t = 0: 0.4 + 0.2 (2 + 3 + 4) = 2.2
    strategy = FedAvg(max_client_share=0.4)
    arrays, metrics = aggregate_round(strategy, numbered_replies([70, 10, 10, 10], [1.0] * 4))
    np.testing.assert_allclose(round_weights(strategy), [0.4, 0.2, 0.2, 0.2])
    np.testing.assert_allclose(arrays["0"].numpy(), 2.2, rtol=1e-6)
    assert metrics["capped-clients"] == 1 and metrics["lambda-max"] == pytest.approx(0.4)


def test_qffl_share_cap_bypasses_its_fused_sums():
    # test_qffl's hand example: λ = (1/14, 3/14), Σλ = 4/14. Cap 0.6 of Σλ: client 2
    # gets 2.4/14, client 1 1.6/14; w = 1.6/14 (-1, 0) + 2.4/14 (0, -2).
    strategy = QFFL(client_learning_rate=LR, q=1.0, max_client_share=0.6)
    arrays, _ = aggregate(strategy, GLOBAL, LOCALS, [1.0, 3.0])
    assert strategy.train_records[1].weights == pytest.approx({1: 1.6 / 14, 2: 2.4 / 14})
    np.testing.assert_allclose(arrays["0"].numpy(), [-1.6 / 14, -4.8 / 14], rtol=1e-6)


def test_qffl_clipped_reply_with_its_own_h_is_kept_and_uses_the_servers_h():
    # Losses (1, 3): median 2, MAD 1; k = 0.5 clips them to (1.5, 2.5). Both sent the h
    # of their true loss (6 and 22), which the clipping discards. With q = 1, L = 2:
    # h = ‖Δw‖² + 2F = (4 + 3, 16 + 5) = (7, 21), Σh = 28; λ = 2F / 28 = (3/28, 5/28).
    strategy = QFFL(client_learning_rate=LR, q=1.0, loss_clip_mad=0.5)
    extra = {1: {keys.QFFL_H: 6.0}, 2: {keys.QFFL_H: 22.0}}
    arrays, metrics = aggregate(strategy, GLOBAL, LOCALS, [1.0, 3.0], extra=extra)
    assert strategy.train_records[1].dropped == {}
    assert strategy.train_records[1].weights == pytest.approx({1: 3 / 28, 2: 5 / 28})
    np.testing.assert_allclose(arrays["0"].numpy(), [-3 / 28, -10 / 28], rtol=1e-6)
    assert metrics["qffl-client-h"] == 0 and metrics["loss-clipped"] == 2


@pytest.mark.parametrize("rule", [FedMGDAPlus, QFedSGD])
def test_share_cap_is_refused_by_rules_without_lambdas(rule):
    with pytest.raises(ValueError, match=r"max_client_share < 1 caps the weights λ_i"):
        rule(max_client_share=0.5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"loss_clip_mad": -1.0}, "loss_clip_mad must be >= 0, got -1.0"),
        ({"loss_clip_mad": math.nan}, "loss_clip_mad must be a finite number, got nan"),
        ({"max_client_share": 0.0}, "max_client_share must be > 0, got 0.0"),
        ({"max_client_share": 1.5}, "max_client_share must be <= 1, got 1.5"),
    ],
)
def test_defence_settings_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TERM(**kwargs)


def test_defaults_are_off():
    strategy = TERM()
    assert strategy.loss_clip_mad == 0.0 and strategy.max_client_share == 1.0
