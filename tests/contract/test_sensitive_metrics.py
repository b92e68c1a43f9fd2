"""Group fairness from clients' counts (fairfl.contract.sensitive) = fairlearn's on the pool."""

import math

import numpy as np
import pytest

from fairfl.contract import sensitive
from fairfl.contract.sensitive import (
    ACCURACY_PARITY,
    DEMOGRAPHIC_PARITY,
    EQUAL_OPPORTUNITY,
    EQUALIZED_ODDS,
    accuracy_of_counts,
    group_counts,
    group_fairness,
    sum_counts,
)


def test_counts_layout_and_metrics_worked_by_hand():
    # Group 0: (y, ŷ) = (0,0), (0,1), (1,1), (1,1) -> selection 3/4, TPR 2/2, FPR 1/2, acc 3/4.
    # Group 1: (0,0), (0,0), (1,0), (1,1)           -> selection 1/4, TPR 1/2, FPR 0/2, acc 3/4.
    a = [0, 0, 0, 0, 1, 1, 1, 1]
    y = [0, 0, 1, 1, 0, 0, 1, 1]
    p = [0, 1, 1, 1, 0, 0, 0, 1]
    counts = group_counts(a, y, p, num_groups=2)
    # cell 4a + 2y + ŷ
    assert counts == [1, 1, 0, 2, 2, 0, 1, 1]
    metrics = group_fairness(counts)
    assert metrics[DEMOGRAPHIC_PARITY] == pytest.approx(0.5)  # 3/4 - 1/4
    assert metrics[EQUAL_OPPORTUNITY] == pytest.approx(0.5)  # 1 - 1/2
    assert metrics[EQUALIZED_ODDS] == pytest.approx(0.5)  # max(1/2, 1/2 - 0)
    assert metrics[ACCURACY_PARITY] == pytest.approx(0.0)  # 3/4 - 3/4
    assert accuracy_of_counts(counts) == pytest.approx(6 / 8)


def test_one_group_only_is_undefined():
    metrics = group_fairness(group_counts([1, 1], [0, 1], [0, 1], num_groups=2))
    assert all(math.isnan(v) for v in metrics.values())


@pytest.mark.parametrize("bad", [[1, 2, 3], [0, 0, 0, -1], [0.5, 0, 0, 0], [True, 0, 0, 0], []])
def test_bad_counts_refused(bad):
    with pytest.raises(ValueError, match="group-counts"):
        sensitive.as_count_table(bad)


def test_sum_needs_one_length():
    with pytest.raises(ValueError, match="one length"):
        sum_counts([[0] * 4, [0] * 8])


@pytest.mark.parametrize("seed", range(6))
def test_federated_metrics_equal_fairlearns_on_pooled_predictions(seed):
    fairlearn_metrics = pytest.importorskip("fairlearn.metrics")
    from sklearn.metrics import accuracy_score

    rng = np.random.default_rng(seed)
    num_groups = int(rng.integers(2, 4))
    clients = []
    for _ in range(int(rng.integers(2, 9))):
        n = int(rng.integers(5, 200))
        # Skewed attribute mix per client, some clients with a single group.
        mix = rng.dirichlet(np.full(num_groups, 0.5))
        a = rng.choice(num_groups, size=n, p=mix)
        y = (rng.random(n) < 0.3 + 0.1 * a).astype(int)
        p = np.where(rng.random(n) < 0.7, y, 1 - y)
        clients.append((a, y, p))
    # Every group holds both labels in the pool, so every rate is defined.
    a_all, y_all, p_all = (np.concatenate(parts) for parts in zip(*clients, strict=True))
    for g in range(num_groups):
        for label in (0, 1):
            a_all = np.append(a_all, g)
            y_all = np.append(y_all, label)
            p_all = np.append(p_all, label)
    clients.append((a_all[-2 * num_groups :], y_all[-2 * num_groups :], p_all[-2 * num_groups :]))

    total = sum_counts([group_counts(a, y, p, num_groups) for a, y, p in clients])
    ours = group_fairness(total)

    dp = fairlearn_metrics.demographic_parity_difference(y_all, p_all, sensitive_features=a_all)
    eo = fairlearn_metrics.equalized_odds_difference(y_all, p_all, sensitive_features=a_all)
    eop = fairlearn_metrics.equal_opportunity_difference(y_all, p_all, sensitive_features=a_all)
    frame = fairlearn_metrics.MetricFrame(
        metrics=accuracy_score, y_true=y_all, y_pred=p_all, sensitive_features=a_all
    )
    assert ours[DEMOGRAPHIC_PARITY] == pytest.approx(dp, abs=1e-12)
    assert ours[EQUALIZED_ODDS] == pytest.approx(eo, abs=1e-12)
    assert ours[EQUAL_OPPORTUNITY] == pytest.approx(eop, abs=1e-12)
    assert ours[ACCURACY_PARITY] == pytest.approx(frame.difference(), abs=1e-12)
    assert accuracy_of_counts(total) == pytest.approx(accuracy_score(y_all, p_all), abs=1e-12)


def test_group_counts_travel_in_evaluate_and_train_replies():
    from google.protobuf import json_format

    from fairfl._proto.fairfl.v1 import contract_pb2
    from fairfl.contract import keys, read_evaluate_reply, write_evaluate_reply, write_train_reply
    from tests.conftest import arrays_of, make_reply

    content = write_evaluate_reply(
        num_examples=8, eval_loss=0.5, eval_acc=0.75, group_counts=[1, 1, 0, 2, 2, 0, 1, 1]
    )
    metrics = dict(content[keys.METRICS])
    json_format.ParseDict(metrics, contract_pb2.EvaluateMetrics())  # an unknown key raises
    reply = read_evaluate_reply(make_reply(3, metrics=metrics))
    assert reply.group_counts == (1, 1, 0, 2, 2, 0, 1, 1)
    train = write_train_reply(
        arrays_of([np.zeros(1, np.float32)]), num_examples=8, group_counts=[0] * 4
    )
    json_format.ParseDict(dict(train[keys.METRICS]), contract_pb2.TrainMetrics())


@pytest.mark.parametrize(
    ("counts", "reason"),
    [
        ([1, 2, 3], "multiple of 4 entries, got 3"),
        ([0, 0, 0, -1], "must be >= 0"),
        ([0.5, 0.0, 0.0, 0.0], "only ints"),
        ([], "non-empty list of ints"),
    ],
)
def test_bad_group_counts_in_a_reply_are_named(counts, reason):
    from fairfl.contract import ReplyError, keys, read_evaluate_reply
    from tests.conftest import make_reply

    metrics = {keys.NUM_EXAMPLES: 4, keys.EVAL_LOSS: 0.1, keys.EVAL_ACC: 0.5}
    metrics[keys.GROUP_COUNTS] = counts
    with pytest.raises(ReplyError, match=reason) as error:
        read_evaluate_reply(make_reply(7, metrics=metrics))
    assert "group-counts" in str(error.value) and "7" in str(error.value)


def test_sums_and_rates_never_wrap():
    # Issue 47: int64 sums wrapped (8 x (2^63 - 1) turned negative; 4 x 2^62 turned 0).
    # Python ints: the sum is exact and the rates are those of the exact counts.
    big = [2**63 - 1] * 8
    assert sum_counts([big, big]) == [2**64 - 2] * 8
    # Each group: half selected, half positive, TPR 1/2, accuracy 1/2: every difference 0.
    assert group_fairness([2**62] * 8) == {
        DEMOGRAPHIC_PARITY: 0.0,
        EQUALIZED_ODDS: 0.0,
        EQUAL_OPPORTUNITY: 0.0,
        ACCURACY_PARITY: 0.0,
    }
    assert accuracy_of_counts([2**62] * 8) == 0.5
