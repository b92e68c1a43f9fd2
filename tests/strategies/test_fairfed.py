"""FairFed: weights moved by the local-global fairness gap (docs/specs/spec-fairfed.md)."""

from fractions import Fraction as Fr

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from fairfl.contract import TrainReply, keys
from fairfl.strategies.fairfed import FairFed, fairfed_gaps, fairfed_weights, signed_metric
from fairfl.strategies.registry import STRATEGIES, build_strategy
from tests.conftest import make_reply
from tests.strategies.test_bad_replies_all_rules import (
    honest_arrays,
    honest_metrics,
    honest_replies,
    run_round,
)

# Three clients' group counts, cell 4a + 2y + ŷ ((y, ŷ) = 00, 01, 10, 11 per group a).
# Client 1: A=0 (3, 1, 1, 1): 6 samples, 2 selected; A=1 (1, 1, 0, 2): 4 samples, 3 selected.
# Client 2: A=0 (2, 0, 0, 2): 4 samples, 2 selected; A=1 (0, 1, 1, 2): 4 samples, 3 selected.
# Client 3: A=1 only (2, 0, 0, 2): SPD undefined; 4 of 4 correct.
COUNTS = [
    [3, 1, 1, 1, 1, 1, 0, 2],
    [2, 0, 0, 2, 0, 1, 1, 2],
    [0, 0, 0, 0, 2, 0, 0, 2],
]
SIZES = [10, 8, 4]
# By hand (FF1, FF3, FF4):
#   SPD_1 = 2/6 - 3/4 = -5/12,  SPD_2 = 2/4 - 3/4 = -1/4
#   global: A=0 4 of 10 selected, A=1 8 of 12: SPD_g = 2/5 - 2/3 = -4/15
#   Δ_1 = |-4/15 + 5/12| = 3/20,  Δ_2 = |-4/15 + 1/4| = 1/60
#   Acc_g = (4 + 3 + 4 + 2 + 4) / 22 = 17/22, Acc_3 = 1:  Δ_3 = 5/22 (accuracy fallback)
GAPS = [Fr(3, 20), Fr(1, 60), Fr(5, 22)]


def test_signed_metrics_by_hand():
    assert signed_metric(COUNTS[0], "spd") == pytest.approx(-5 / 12)
    # EOD: TPR(A=0) = 1/2 (1 of 2 positives), TPR(A=1) = 2/2: 1/2 - 1 = -1/2
    assert signed_metric(COUNTS[0], "eod") == pytest.approx(-0.5)
    assert np.isnan(signed_metric(COUNTS[2], "spd"))
    with pytest.raises(ValueError, match="metric must be one of"):
        signed_metric(COUNTS[0], "dp")
    with pytest.raises(ValueError, match="binary attribute"):
        signed_metric([1, 2, 3, 4], "spd")


def test_gaps_by_hand():
    gaps, global_metric = fairfed_gaps(COUNTS, "spd")
    assert global_metric == pytest.approx(-4 / 15, abs=1e-15)
    np.testing.assert_allclose(gaps, [float(g) for g in GAPS], atol=1e-15)


def test_weights_by_hand():
    # ω^0 = n_k / n = (10, 8, 4) / 22 (FF5); mean Δ = (3/20 + 1/60 + 5/22) / 3 = 13/99
    # β = 1 (FF6): ω̄_k = ω_k - (Δ_k - 13/99), Σ ω̄ = 1 already.
    mean = sum(GAPS) / 3
    assert mean == Fr(13, 99)
    expected = [Fr(n, 22) - (g - mean) for n, g in zip(SIZES, GAPS, strict=True)]
    assert sum(expected) == 1
    # ω̄ = (0.435858586, 0.478282828, 0.085858586)
    weights = fairfed_weights(np.array(SIZES) / 22, [float(g) for g in GAPS], beta=1.0)
    np.testing.assert_allclose(weights, [float(w) for w in expected], atol=1e-15)
    np.testing.assert_allclose(weights, [0.4358586, 0.4782828, 0.0858586], atol=1e-7)


def test_beta_zero_is_fedavg_and_negative_weights_are_clipped():
    np.testing.assert_allclose(fairfed_weights([0.25, 0.75], [0.9, 0.1], beta=0.0), [0.25, 0.75])
    # β = 1: ω̄ = (0.5 - 0.5, 0.5 + 0.5) = (0, 1); β = 2: (-0.5, 1.5) clipped to (0, 1.5) -> (0, 1)
    np.testing.assert_allclose(fairfed_weights([0.5, 0.5], [1.0, 0.0], beta=1.0), [0.0, 1.0])
    np.testing.assert_allclose(fairfed_weights([0.5, 0.5], [1.0, 0.0], beta=2.0), [0.0, 1.0])
    with pytest.raises(ValueError, match="beta must be >= 0"):
        fairfed_weights([0.5, 0.5], [0.0, 0.0], beta=-1.0)
    with pytest.raises(ValueError, match="summing to 1"):
        fairfed_weights([0.5, 0.6], [0.0, 0.0], beta=1.0)


def test_strategy_keeps_weights_across_rounds_and_asks_for_counts():
    strategy = build_strategy("fairfed", {"fairfed-beta": 0.5}, min_available_nodes=1)
    assert STRATEGIES["fairfed"].defaults() == {"fairfed-beta": 1.0, "fairfed-metric": "spd"}
    assert strategy.train_config(1) == {keys.WANT_GROUP_COUNTS: True}
    assert strategy.required_train_metrics == (keys.GROUP_COUNTS,)
    replies = [
        TrainReply(
            node_id=10 + k,
            num_examples=n,
            arrays=[],
            metrics={keys.GROUP_COUNTS: c, keys.PARTITION_ID: k},
        )
        for k, (n, c) in enumerate(zip(SIZES, COUNTS, strict=True))
    ]
    first = strategy.lambdas(1, replies)
    mean = sum(GAPS) / 3
    expected = [Fr(n, 22) - Fr(1, 2) * (g - mean) for n, g in zip(SIZES, GAPS, strict=True)]
    np.testing.assert_allclose(first, [float(w) for w in expected], atol=1e-15)
    # The weights change no state until the round is accepted (aggregate_train).
    assert strategy.fair_weights == {}
    np.testing.assert_array_equal(strategy.lambdas(1, replies), first)
    strategy.state_updates.discard()
    strategy.lambdas(1, replies)
    strategy.state_updates.apply()
    # Round 2, same counts: one more step of β (Δ - mean Δ) from ω^1.
    second = strategy.lambdas(2, replies)
    np.testing.assert_allclose(
        second, [float(w - Fr(1, 2) * (g - mean)) for w, g in zip(expected, GAPS, strict=True)]
    )
    restored = FairFed()
    restored.load_state_dict(strategy.state_dict())
    assert restored.fair_weights == strategy.fair_weights


def test_a_reply_without_a_binary_attribute_is_dropped_at_intake():
    """Dropped (not the run) before the weights are read: the round is the one without it."""
    rng = np.random.default_rng(0)
    metrics = {**honest_metrics(rng, 99), keys.GROUP_COUNTS: [1] * 12}
    bad = make_reply(99, ArrayRecord({k: Array(v) for k, v in honest_arrays(rng).items()}), metrics)
    attacked, got = run_round("fairfed", [*honest_replies(np.random.default_rng(5)), bad])
    clean, want = run_round("fairfed", honest_replies(np.random.default_rng(5)))
    reason = attacked.train_records[1].dropped[99]
    assert reason.startswith("metrics['group-counts'] FairFed needs a binary sensitive attribute")
    assert "8 counts" in reason and "got [1, 1," in reason
    assert attacked.state_dict() == clean.state_dict()
    for key in want:
        np.testing.assert_array_equal(got[key].numpy(), want[key].numpy())


@pytest.mark.parametrize("rule", ["fairfed", "ditto+fairfed"])
@pytest.mark.parametrize(
    ("counts", "total"),
    [
        ([2**63 - 1] * 8, 8 * (2**63 - 1)),  # wrapped the int64 sum: ValueError out of the round
        ([2**62] * 8, 2**65),  # wrapped each group's total to 0: NaN gaps
        ([0] * 8, 0),  # no sample: NaN accuracy gap
        ([10**9, 0, 0, 0, 0, 0, 0, 1], 10**9 + 1),  # one above max-num-examples = 10^9
    ],
)
def test_counts_that_overflow_or_count_nothing_are_dropped_at_intake(rule, counts, total):
    """Issue 47, item 1: one device's counts ended a FairFed run; now only its reply goes."""
    rng = np.random.default_rng(0)
    metrics = {**honest_metrics(rng, 99), keys.GROUP_COUNTS: counts}
    bad = make_reply(99, ArrayRecord({k: Array(v) for k, v in honest_arrays(rng).items()}), metrics)
    attacked, got = run_round(rule, [*honest_replies(np.random.default_rng(5)), bad])
    clean, want = run_round(rule, honest_replies(np.random.default_rng(5)))
    assert attacked.train_records[1].dropped[99] == (
        f"metrics['group-counts'] must count from 1 to max-num-examples=1000000000 samples, "
        f"got {total}"
    )
    assert attacked.state_dict() == clean.state_dict()
    for key in want:
        np.testing.assert_array_equal(got[key].numpy(), want[key].numpy())
