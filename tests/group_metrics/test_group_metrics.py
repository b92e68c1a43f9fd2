"""Group metrics of planted-group runs: NMI, accuracy per group/cluster, disagreement."""

import pytest

from fairfl.group_metrics import (
    clustering_nmi,
    group_means,
    round_group_report,
    run_group_report,
)


def test_nmi_is_one_for_the_same_partition_under_any_names():
    assert clustering_nmi([1, 1, 0, 0], [0, 0, 1, 1]) == pytest.approx(1.0)
    assert clustering_nmi([0, 1, 0, 1], [0, 0, 1, 1]) == pytest.approx(0.0)


def test_nmi_is_undefined_with_one_planted_group():
    assert clustering_nmi([0, 1, 1], [3, 3, 3]) is None


def test_nmi_rejects_different_lengths():
    with pytest.raises(
        ValueError, match="found and planted must have the same length, got 2 and 3"
    ):
        clustering_nmi([0, 1], [0, 1, 1])


def test_group_means():
    assert group_means([10, 20, 30], [1, 0, 1]) == {0: 20.0, 1: 20.0}


def entry(clusters, accs, losses, participants=(11, 12, 13)):
    # Node 10 + p is partition p; planted groups below are [0, 0, 1, 1].
    return {
        "round": 1,
        "clients": [
            {"node_id": 10 + p, "partition_id": p, "eval_acc": a, "eval_loss": loss}
            for p, (a, loss) in enumerate(zip(accs, losses, strict=True))
        ],
        "train": {
            "weights": [
                {"node_id": n, "partition_id": n - 10, "weight": 1 / 3} for n in participants
            ],
            "diagnostics": {"clusters": {str(n): c for n, c in clusters.items()}},
        },
    }


PLANTED = [0, 0, 1, 1]


def test_round_report_by_hand():
    e = entry({11: 0, 12: 1, 13: 1}, [0.5, 0.7, 0.9, 0.8], [1.0, 0.5, 0.25, 0.25])
    report = round_group_report(e, PLANTED)
    assert report["acc-group"] == pytest.approx({0: 0.60, 1: 0.85})
    # All four losses: |1-.5| + |1-.25|·2 + |.5-.25|·2 + 0 = 2.5 over 6 pairs.
    assert report["disagreement-all"] == pytest.approx(2.5 / 6)
    # Participants 11, 12, 13: losses .5, .25, .25 -> (.25 + .25 + 0) / 3.
    assert report["disagreement-participants"] == pytest.approx(0.5 / 3)
    # Found {11} vs {12, 13}; planted {11} in group 0, {12, 13} in group 1: NMI 1.
    assert report["nmi"] == pytest.approx(1.0)
    assert report["acc-cluster"] == pytest.approx({0: 0.70, 1: 0.85})
    assert "nmi-registry" not in report


def test_round_report_one_planted_group_and_fedavg_rounds():
    e = entry({12: 0, 13: 1}, [0.5, 0.7, 0.9, 0.8], [1.0, 0.5, 0.25, 0.25], (12, 13))
    assert round_group_report(e, PLANTED)["nmi"] is None
    fedavg = entry({}, [0.5, 0.7, 0.9, 0.8], [1.0, 0.5, 0.25, 0.25])
    fedavg["train"]["diagnostics"] = {}
    report = round_group_report(fedavg, PLANTED)
    assert "nmi" not in report and "acc-cluster" not in report


def test_run_report_averages_over_rounds():
    good = entry({11: 0, 12: 1, 13: 1}, [0.5, 0.7, 0.9, 0.8], [1.0, 0.5, 0.25, 0.25])
    bad = entry({11: 0, 12: 0, 13: 1}, [0.1, 0.1, 0.9, 0.9], [2.0, 2.0, 0.5, 0.5])
    bad["train"]["diagnostics"]["registry-clusters"] = {"10": 0, "11": 0, "12": 1, "13": 1}
    summary = run_group_report([good, bad], PLANTED)
    nmi_bad = clustering_nmi([0, 0, 1], [0, 1, 1])
    assert summary["nmi-mean"] == pytest.approx((1.0 + nmi_bad) / 2)
    assert summary["nmi-rounds"] == 2
    assert summary["nmi-registry-mean"] == pytest.approx(1.0)
    assert summary["cma"]["acc-group"] == pytest.approx({0: 0.35, 1: 0.875})
    assert summary["final"]["acc-group"] == pytest.approx({0: 0.10, 1: 0.90})
    assert summary["tail"] == summary["cma"]
    last = run_group_report([good, bad], PLANTED, tail=1)["tail"]
    assert last["acc-group"] == pytest.approx({0: 0.10, 1: 0.90})
    assert last["disagreement-participants"] == pytest.approx(1.5 * 2 / 3)
