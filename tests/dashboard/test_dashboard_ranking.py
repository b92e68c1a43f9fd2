"""Runs side by side without a browser: labels, seeds grouped by rule, ranking, the address.

Every number is worked by hand from two clients per run (worst 10 % of two clients is
the worse one; std is the population std; Jain's index is (Σx)² / (n Σx²)).
"""

from __future__ import annotations

import json

import pytest

from fairfl.dashboard import comparison, facts, ranking
from fairfl.dashboard.follow import Registry, RunFollower, parse_entry
from fairfl.dashboard.labels import run_label, variant_of
from fairfl.dashboard.plotting import PALETTE


def run_of(tmp_path, label, *rounds, summary=None) -> RunFollower:
    run = RunFollower(tmp_path, label)
    run.rounds = [parse_entry(entry) for entry in rounds]
    run.summary = summary
    return run


@pytest.fixture
def runs(tmp_path, line):
    """AFL seeds 0 and 1 (clients at 40/60 % and 60/80 %), FedAvg once (20/100 %)."""
    return {
        "fedavg": run_of(tmp_path, "fedavg", line(1, [0.2, 1.0])),
        "afl seed 0": run_of(tmp_path, "afl seed 0", line(1, [0.1, 0.1]), line(2, [0.4, 0.6])),
        "afl seed 1": run_of(tmp_path, "afl seed 1", line(2, [0.6, 0.8])),
    }


def test_a_label_is_the_rule_and_the_keys_the_user_set():
    given = {"strategy": "qffl", "qffl-q": 1.0, "lr": 0.1, "out-dir": "out", "seed": 3}
    assert run_label("qffl", given) == "qffl (lr=0.1, qffl-q=1) seed 3"
    assert run_label("fedavg", {"checkpoint": False}) == "fedavg (checkpoint=false)"
    assert run_label("term", {}) == "term"
    assert variant_of("qffl (lr=0.1, qffl-q=1) seed 3") == "qffl (lr=0.1, qffl-q=1)"


def test_a_run_folder_is_named_by_its_rule_never_by_its_folder(tmp_path, line, lines):
    folder = tmp_path / "2026-11-29-072012-qffl"
    folder.mkdir()
    registry = Registry([tmp_path])
    registry.refresh(0.0)
    assert list(registry.runs()) == []  # nothing to show yet
    (folder / "rounds.jsonl").write_bytes(lines(line(1, [0.5], strategy="qffl")))
    registry.refresh(10.0)
    assert list(registry.runs()) == ["qffl"]  # the rule its lines name
    summary = {
        "strategy": "qffl",
        "config_given": {"strategy": "qffl", "qffl-q": 5, "seed": 1, "out-dir": str(folder)},
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    registry.refresh(20.0)
    assert list(registry.runs()) == ["qffl (qffl-q=5) seed 1"]
    # a comparison's names (its variant and seed) are kept as they are
    assert RunFollower(folder, "afl seed 0").label == "afl seed 0"


def test_rules_are_ranked_by_worst_10_percent_as_means_over_their_seeds(runs):
    afl, fedavg = ranking.rule_rows(runs)
    assert (afl.name, afl.seeds, fedavg.name, fedavg.seeds) == ("afl", 2, "fedavg", 1)
    # AFL, latest rounds: seed 0 at 40/60 %, seed 1 at 60/80 %
    assert afl.worst_10 == pytest.approx((0.4 + 0.6) / 2)
    assert afl.mean == pytest.approx((0.5 + 0.7) / 2)
    assert afl.std == pytest.approx(0.1)  # 0.1 in both seeds
    # Jain: 1.0² / (2 (0.16 + 0.36)) = 0.961538..., 1.4² / (2 (0.36 + 0.64)) = 0.98
    assert afl.jain == pytest.approx((1 / 1.04 + 0.98) / 2)
    # FedAvg: worst 20 %, mean 60 %, std 40 points, Jain 1.2² / (2 (0.04 + 1)) = 0.6923
    assert (fedavg.worst_10, fedavg.mean, fedavg.std) == pytest.approx((0.2, 0.6, 0.4))
    assert fedavg.jain == pytest.approx(1.44 / 2.08)
    assert [h.run for h in afl.members] == ["afl seed 0", "afl seed 1"]


def test_a_tie_in_worst_10_percent_goes_to_the_higher_mean(tmp_path, line):
    rows = ranking.rule_rows(
        {
            "a": run_of(tmp_path, "a", line(1, [0.5, 0.5])),
            "b": run_of(tmp_path, "b", line(1, [0.5, 0.9])),
            "c": run_of(tmp_path, "c"),  # no client evaluated yet: not ranked
        }
    )
    assert [r.name for r in rows] == ["b", "a"]


def test_rules_with_seeds_are_compared_by_each_clients_mean_over_seeds(runs, tmp_path, line):
    groups = ranking.group_runs(list(runs))
    assert groups == {"fedavg": ["fedavg"], "afl": ["afl seed 0", "afl seed 1"]}
    compared = ranking.compare_rules(
        "fedavg", [runs["fedavg"]], "afl", [runs[n] for n in groups["afl"]]
    )
    assert (compared.run_a, compared.run_b) == ("fedavg", "afl (mean of 2 seeds)")
    # client 0: AFL (0.4 + 0.6) / 2 = 0.5 against 0.2; client 1: (0.6 + 0.8) / 2 = 0.7 vs 1.0
    assert compared.clients.tolist() == [0, 1]
    assert compared.gain.tolist() == pytest.approx([0.3, -0.3])
    # a client that one seed did not evaluate is left out
    third = run_of(tmp_path, "afl seed 2", line(2, [0.6, 0.8, 0.9]))
    assert sorted(ranking.seed_mean_accuracy([runs["afl seed 1"], third])) == [0, 1]


def test_the_baseline_is_the_comparisons_else_fedavg_else_the_first():
    assert ranking.default_baseline(["afl", "fedavg (lr=0.1)"]) == "fedavg (lr=0.1)"
    # a run's summary.json names the rule as the strategy does (FedAvg, q-FFL)
    assert ranking.default_baseline(["q-FFL", "FedAvg"]) == "FedAvg"
    assert ranking.default_baseline(["afl", "fedavg"], named="afl") == "afl"
    assert ranking.default_baseline(["fedavg-n", "term"], named="gone") == "fedavg-n"
    assert ranking.default_baseline([]) is None


def test_the_compared_rule_is_the_best_ranked_other_than_the_baseline(runs):
    rows = ranking.rule_rows(runs)
    assert ranking.default_other(rows, "fedavg") == "afl"
    assert ranking.default_other(rows, "afl") == "fedavg"
    assert ranking.default_other(rows[:1], "afl") is None


def test_the_address_carries_run_baseline_and_compared_rule():
    search = "?run=afl+seed+0&baseline=fedavg&token=x&baseline=afl&compare="
    assert ranking.parse_choices(search) == {"run": "afl seed 0", "baseline": "fedavg"}
    assert ranking.parse_choices(None) == {} and ranking.parse_choices("") == {}
    choices = {"compare": "qffl (qffl-q=1)", "run": "fedavg seed 0", "baseline": "fedavg"}
    search = ranking.choices_search(choices)
    assert search == "?run=fedavg+seed+0&baseline=fedavg&compare=qffl+%28qffl-q%3D1%29"
    assert ranking.parse_choices(search) == choices
    assert ranking.choices_search({"run": None}) == ""


def test_epsilon_secure_aggregation_and_revision_are_shown(tmp_path, line):
    train = {"accepted": 2, "diagnostics": {"dp-epsilon": 0.75, "dp-delta": 1e-5}}
    run = run_of(tmp_path, "qffl", line(1, [0.5, 0.5], train=train), line(2, [0.5, 0.5]))
    run.planned_config = {"secure-aggregation": "secagg+"}
    # the latest round whose record holds ε (round 2 released none)
    assert facts.epsilon(run) == (0.75, 1e-5, 1)
    assert facts.privacy_fact(run) == "ε = 0.75 at δ = 1e-05 (central DP, after round 1)"
    run.summary = {
        "privacy": {"epsilon": 1.5, "delta": 1e-5},
        "environment": {"revision": {"commit": "abc123", "modified": True}},
    }
    assert facts.epsilon(run) == (1.5, 1e-5, 2)  # summary.json's final ε
    assert facts.revision_fact(run) == "abc123 (tracked files modified)"
    shown = facts.standing(run, worst_10=0.25, mean=0.5, jain=1.0)
    assert shown["worst 10 %"] == "25.0 %" and shown["Jain's index"] == "1.000"
    assert shown["aggregation"].startswith("secure (secagg+)")
    assert shown["differential privacy"].startswith("ε = 1.5 at δ = 1e-05")
    (row,) = ranking.rule_rows({"qffl": run})
    assert (row.epsilon, row.secure) == (1.5, "secagg+")
    run.summary = {"environment": {"revision": None, "versions": {"fairfl": "0.9.0"}}}
    assert facts.revision_fact(run) == "no git checkout: installed fairfl 0.9.0"
    plain = run_of(tmp_path, "fedavg", line(1, [0.5]))
    assert facts.privacy_fact(plain) == "none (no differential privacy)"
    assert facts.revision_fact(plain).startswith("unknown")
    assert ranking.rule_rows({"fedavg": plain})[0].secure is None


def test_the_tradeoff_has_a_point_per_run_and_a_rules_mean_with_error_bars(runs):
    figure = comparison.tradeoff_figure(ranking.rule_rows(runs), order=["fedavg", "afl"])
    by_name = {trace.name: trace for trace in figure.data}
    assert set(by_name) == {"afl", "afl (2 seeds)", "fedavg"}
    # AFL's seeds at worst 10 % 40 and 60, mean 50 and 70; their mean (50, 60) with bars
    # of 10 points either way on both axes
    assert list(by_name["afl"].x) == pytest.approx([40, 60])
    assert list(by_name["afl"].y) == pytest.approx([50, 70])
    mean = by_name["afl (2 seeds)"]
    assert (mean.x[0], mean.y[0]) == pytest.approx((50, 60))
    assert (mean.error_x.array[0], mean.error_x.arrayminus[0]) == pytest.approx((10, 10))
    assert (mean.error_y.array[0], mean.error_y.arrayminus[0]) == pytest.approx((10, 10))
    assert by_name["fedavg"].error_x.array is None  # one run: no bars
    # colours follow the page's order of rules, not the ranking (AFL ranks first)
    assert by_name["fedavg"].marker.color == PALETTE[0]
    assert by_name["afl"].marker.color == mean.marker.color == PALETTE[1]
