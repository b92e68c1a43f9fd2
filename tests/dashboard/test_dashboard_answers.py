"""The numbers the dashboard shows first: headline, per-client comparison (worked by hand)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fairfl.dashboard import answers
from fairfl.dashboard.follow import RunFollower, parse_entry


def run_of(tmp_path, label, entries) -> RunFollower:
    run = RunFollower(tmp_path, label)
    run.rounds = [parse_entry(entry) for entry in entries]
    return run


def test_headline_names_the_worst_client_and_the_change_since_the_first_round(tmp_path, line):
    # 10 clients: round 1 all at 0.5 except client 3 at 0.1; round 4 client 7 is worst
    first = [0.5] * 10
    first[3] = 0.1
    last = [0.9, 0.8, 0.7, 0.6, 0.9, 0.9, 0.9, 0.2, 0.9, 0.9]
    head = answers.headline(run_of(tmp_path, "qffl", [line(1, first), line(4, last)]))
    assert head is not None
    assert (head.run, head.round, head.first_round, head.clients) == ("qffl", 4, 1, 10)
    assert head.worst_client == 7 and head.worst_accuracy == pytest.approx(0.2)
    # worst 10 % of 10 clients is the single worst: 0.2 now, 0.1 then
    assert head.worst_10 == pytest.approx(0.2) and head.change_worst_10 == pytest.approx(0.1)
    assert head.change_worst == pytest.approx(0.1)  # 0.2 (client 7) - 0.1 (client 3)
    assert head.mean == pytest.approx(7.7 / 10)  # sum of last = 7.7
    assert head.change_mean == pytest.approx(0.77 - 0.46)  # first mean: (9 * 0.5 + 0.1) / 10


def test_headline_ties_go_to_the_smallest_key_and_missing_accuracies_are_left_out(tmp_path, line):
    head = answers.headline(run_of(tmp_path, "a", [line(1, [0.5, None, 0.25, 0.25])]))
    assert head is not None and head.worst_client == 2 and head.clients == 3
    assert head.mean == pytest.approx(1.0 / 3)


def test_no_headline_before_a_client_is_evaluated(tmp_path, line):
    assert answers.headline(run_of(tmp_path, "a", [])) is None
    assert answers.headline(run_of(tmp_path, "a", [line(1, [None, None])])) is None


def test_comparison_pairs_each_clients_latest_accuracy_and_names_gainers_and_losers(tmp_path, line):
    # run A: client 2 is only evaluated in round 1 (0.4); its latest value counts
    second = line(2, [0.5, 0.9, 0.0, 0.3])
    second["clients"] = [c for c in second["clients"] if c["partition_id"] != 2]
    a = run_of(tmp_path, "fedavg", [line(1, [0.1, 0.9, 0.4, 0.3]), second])
    b = run_of(tmp_path, "qffl", [line(1, [0.7, 0.6, 0.4, 0.3, 1.0])])  # client 4 only in B
    comparison = answers.compare_clients(a, b)
    assert comparison.clients.tolist() == [0, 1, 2, 3]
    np.testing.assert_allclose(comparison.accuracy_a, [0.5, 0.9, 0.4, 0.3])
    np.testing.assert_allclose(comparison.gain, [0.2, -0.3, 0.0, 0.0], atol=1e-12)
    gainers, losers = answers.gainers_and_losers(comparison)
    assert [c for c, _ in gainers] == [0] and gainers[0][1] == pytest.approx(0.2)
    assert [c for c, _ in losers] == [1] and losers[0][1] == pytest.approx(-0.3)


def test_gainers_are_ordered_by_change_then_key_and_capped(tmp_path, line):
    a = run_of(tmp_path, "a", [line(1, [0.0] * 6)])
    b = run_of(tmp_path, "b", [line(1, [0.1, 0.3, 0.3, 0.2, 0.5, 0.0])])
    gainers, losers = answers.gainers_and_losers(answers.compare_clients(a, b), count=3)
    assert [c for c, _ in gainers] == [4, 1, 2] and losers == []
    assert all(math.isfinite(g) for _, g in gainers)
