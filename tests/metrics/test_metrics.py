import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairfl.metrics import (
    FAIRNESS_METRICS,
    best_fraction_mean,
    fairness_metrics,
    in_percent,
    jain_index,
    mean_pairwise_gap,
    tail_count,
    worst_fraction_mean,
)


def test_tail_count_uses_floor_with_at_least_one_client():
    # spec §13: n = 50 -> 5 / 10 clients; n = 20 -> 2 / 4.
    assert tail_count(50, 0.1) == 5
    assert tail_count(50, 0.2) == 10
    assert tail_count(20, 0.1) == 2
    assert tail_count(20, 0.2) == 4
    assert tail_count(9, 0.1) == 1  # floor would be 0: keep the single worst client
    assert tail_count(10, 0.1) == 1


def test_fairness_metrics_by_hand():
    # Five clients, accuracies 0.2, 0.4, 0.6, 0.8, 1.0: every statistic is a fraction too.
    # mean 0.6; population var = (.4²+.2²+0+.2²+.4²)/5 = .4/5 = 0.08 -> std 0.282843.
    # weighted mean with counts 1,1,1,1,6: (.2+.4+.6+.8+6)/10 = 0.8.
    # worst-10%/20%/best-10% over n=5 -> 1 client: 0.2, 0.2, 1.0.
    # Jain: 3² / (5 · (.04+.16+.36+.64+1)) = 9 / 11 = 0.818181...
    # losses 1, 2, 3, 4, 5: pairwise |diffs| sum = 4·1+3·2+2·3+1·4 = 20 over 10 pairs = 2.
    m = fairness_metrics([0.2, 0.4, 0.6, 0.8, 1.0], [1, 1, 1, 1, 6], [1, 2, 3, 4, 5])
    assert m["acc-mean"] == pytest.approx(0.6)
    assert m["acc-weighted-mean"] == pytest.approx(0.8)
    assert m["acc-variance"] == pytest.approx(0.08)
    assert m["acc-std"] == pytest.approx(math.sqrt(0.08))
    assert m["acc-worst"] == pytest.approx(0.2)
    assert m["acc-worst-10"] == pytest.approx(0.2)
    assert m["acc-worst-20"] == pytest.approx(0.2)
    assert m["acc-best-10"] == pytest.approx(1.0)
    assert m["jain-index"] == pytest.approx(9 / 11)
    assert m["loss-mean"] == pytest.approx(3.0)
    assert m["loss-gap"] == pytest.approx(2.0)
    assert m["num-clients"] == 5


def test_worst_and_best_tails_of_twenty_clients():
    # 20 clients with accuracies 1..20: worst-10% = mean(1, 2) = 1.5,
    # worst-20% = mean(1..4) = 2.5, best-10% = mean(19, 20) = 19.5.
    values = list(range(20, 0, -1))
    assert worst_fraction_mean(values, 0.1) == pytest.approx(1.5)
    assert worst_fraction_mean(values, 0.2) == pytest.approx(2.5)
    assert best_fraction_mean(values, 0.1) == pytest.approx(19.5)


def test_variance_is_a_fraction_squared_and_percent_squared_for_people():
    # Accuracies 0.5 and 0.7: np.var = 0.01. q-FFL's table shows np.var(acc) * 1e4 = 100 %².
    m = fairness_metrics([0.5, 0.7], [1, 1], [0, 0])
    assert m["acc-variance"] == pytest.approx(0.01)
    assert in_percent(m)["acc-variance"] == pytest.approx(100.0)


def test_in_percent_scales_accuracy_statistics_only():
    # acc-* times 100, acc-variance times 100², everything else as it was.
    shown = in_percent(
        {
            "acc-mean": 0.6,
            "acc-worst-10": 0.25,
            "acc-variance": 0.08,
            "jain-index": 0.9,
            "loss-mean": 1.5,
            "num-clients": 5.0,
        }
    )
    assert shown == pytest.approx(
        {
            "acc-mean": 60.0,
            "acc-worst-10": 25.0,
            "acc-variance": 800.0,
            "jain-index": 0.9,
            "loss-mean": 1.5,
            "num-clients": 5.0,
        }
    )


def test_jain_index_extremes():
    assert jain_index([3, 3, 3]) == pytest.approx(1.0)
    assert jain_index([1, 0, 0, 0]) == pytest.approx(0.25)
    assert jain_index([0, 0]) == 1.0


def test_jain_index_of_tiny_values():
    # Squares of 1e-170 underflow to 0; the index is scale-free: (1+1+3)² / (3·11) = 25/33.
    assert jain_index([1e-170, 1e-170, 3e-170]) == pytest.approx(25 / 33)
    assert jain_index([5e-324, 5e-324]) == pytest.approx(1.0)


def test_fairness_metrics_rejects_bad_input():
    with pytest.raises(ValueError, match="one entry per client"):
        fairness_metrics([0.5], [1, 2], [0.1])
    with pytest.raises(ValueError, match="one entry per client"):
        fairness_metrics([], [1], [])


def test_a_round_without_clients_has_every_key_zero_clients_and_nan_statistics():
    # Issue 41: no client evaluated, yet the record has the shape of every other round.
    empty = fairness_metrics([], [], [])
    two = fairness_metrics([0.5, 1.0], [1, 3], [0.2, 0.4])
    assert list(empty) == list(two) == list(FAIRNESS_METRICS)
    assert empty["num-clients"] == 0.0 and two["num-clients"] == 2.0
    assert all(math.isnan(v) for k, v in empty.items() if k != "num-clients")
    # (0.5·1 + 1.0·3) / 4 = 0.875; the pair's loss gap |0.2 − 0.4| = 0.2.
    assert two["acc-weighted-mean"] == pytest.approx(0.875)
    assert two["loss-gap"] == pytest.approx(0.2)


@given(st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=40))
def test_pairwise_gap_matches_quadratic_definition(values):
    x = np.array(values)
    n = len(x)
    brute = np.mean([abs(x[i] - x[j]) for i in range(n) for j in range(i + 1, n)]) if n > 1 else 0.0
    assert mean_pairwise_gap(values) == pytest.approx(brute, rel=1e-9, abs=1e-6)


@given(st.lists(st.floats(0, 1), min_size=1, max_size=60))
def test_tails_bracket_the_mean(accs):
    m = fairness_metrics(accs, [1] * len(accs), [0.0] * len(accs))
    tol = 1e-9
    for name in ("acc-mean", "acc-weighted-mean", "acc-std", "acc-worst", "acc-best-10"):
        assert -tol <= m[name] <= 1 + tol  # fractions in, fractions out
    assert -tol <= m["acc-variance"] <= 0.25 + tol  # a fraction squared: at most 1/4
    assert m["acc-worst"] <= m["acc-worst-10"] + tol
    assert m["acc-worst-10"] <= m["acc-worst-20"] + tol
    assert m["acc-worst-20"] <= m["acc-mean"] + tol
    assert m["acc-mean"] <= m["acc-best-10"] + tol
    assert 0 < m["jain-index"] <= 1 + tol
