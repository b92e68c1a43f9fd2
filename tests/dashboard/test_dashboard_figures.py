"""The dashboard's figures: one heat-map row per client, percent on the page, orderings."""

from __future__ import annotations

import numpy as np
import pytest

from fairfl.dashboard import facts, figures, labels
from fairfl.dashboard.follow import RunFollower, parse_entry


def follower_with(tmp_path, entries, label="afl seed 0") -> RunFollower:
    run = RunFollower(tmp_path, label)
    run.rounds = [parse_entry(entry) for entry in entries]
    return run


def test_client_matrix_has_a_row_per_client_and_nan_where_absent(line):
    # client 2 answers only in round 2 (client 0 is silent then)
    second = line(2, [0.75, 1.0, 0.5], sizes=[10, 20, 30])
    second["clients"] = second["clients"][1:]
    rounds = [parse_entry(line(1, [0.5, 0.25])), parse_entry(second)]
    round_numbers, clients, matrix, sizes = figures.client_matrix(rounds)
    assert round_numbers.tolist() == [1, 2] and clients.tolist() == [0, 1, 2]
    np.testing.assert_array_equal(matrix, [[0.5, np.nan], [0.25, 1.0], [np.nan, 0.5]])
    assert sizes.tolist() == [10, 20, 30]


def test_orders_by_data_size_and_by_final_accuracy():
    # last-known accuracies: client 0 0.9, client 1 0.2 (absent in the last round),
    # client 2 never evaluated, client 3 0.5
    matrix = np.array([[0.1, 0.9], [0.2, np.nan], [np.nan, np.nan], [0.7, 0.5]])
    sizes = np.array([10.0, 5.0, 30.0, 1.0])
    assert figures.client_order(matrix, sizes, "client").tolist() == [0, 1, 2, 3]
    assert figures.client_order(matrix, sizes, "size").tolist() == [3, 1, 0, 2]
    assert figures.client_order(matrix, sizes, "final").tolist() == [1, 3, 0, 2]
    with pytest.raises(ValueError, match="sort must be one of"):
        figures.client_order(matrix, sizes, "name")


def test_client_heatmap_shows_percent_with_one_row_per_client(tmp_path, line):
    run = follower_with(
        tmp_path,
        [line(1, [0.5, 0.25, 1.0], sizes=[3, 2, 1]), line(2, [0.5, 0.75, 1.0], sizes=[10, 2, 1])],
    )
    heat = figures.client_heatmap(run, "size").data[0]
    assert list(heat.y) == ["client 2 (n=1)", "client 1 (n=2)", "client 0 (n=10)"]
    # client 0's test set was 3 in round 1 and 10 in round 2: the last size counts
    np.testing.assert_allclose(np.asarray(heat.z), [[100, 100], [25, 75], [50, 50]])
    assert heat.zmax == 100


def test_metrics_figure_overlays_runs_in_percent(tmp_path, line):
    one = follower_with(tmp_path, [line(1, [0.5, 1.0]), line(2, [1.0, 1.0])], "afl seed 0")
    two = follower_with(tmp_path, [line(1, [0.0, 1.0])], "afl seed 1")
    figure = figures.metrics_figure({"afl seed 0": one, "afl seed 1": two}, seeds=True)
    by_name = {(t.name, t.yaxis): t for t in figure.data}
    # each seed's line, plus the variant's mean and its band, in each of the 5 rows
    assert {name for name, _ in by_name} >= {"afl seed 0", "afl seed 1", "afl (mean of 2 seeds)"}
    # row 1 mean (%), row 4 std (%), row 5 Jain's index (unitless)
    assert list(by_name[("afl seed 0", "y")].y) == [75.0, 100.0]
    assert list(by_name[("afl seed 0", "y4")].y) == [25.0, 0.0]
    assert by_name[("afl seed 0", "y5")].y[0] == pytest.approx(0.9)
    # seeds of one variant share a colour
    assert by_name[("afl seed 0", "y")].line.color == by_name[("afl seed 1", "y")].line.color
    assert "Mean accuracy (%)" in [a.text for a in figure.layout.annotations]


def test_seeds_of_a_variant_are_one_mean_line_with_a_band(tmp_path, line):
    # seed 0: mean 75 % then 100 %; seed 1: 50 % then 75 %; seed 1 also has round 3
    one = follower_with(tmp_path, [line(1, [0.5, 1.0]), line(2, [1.0, 1.0])], "afl seed 0")
    two = follower_with(
        tmp_path, [line(1, [0.0, 1.0]), line(2, [0.5, 1.0]), line(3, [1.0, 1.0])], "afl seed 1"
    )
    solo = follower_with(tmp_path, [line(1, [0.25, 0.25])], "fedavg")
    figure = figures.metrics_figure({"afl seed 0": one, "afl seed 1": two, "fedavg": solo})
    names = {t.name for t in figure.data if t.showlegend}
    assert names == {"afl (mean of 2 seeds)", "fedavg"}  # no per-seed lines unless asked
    mean = next(t for t in figure.data if t.name == "afl (mean of 2 seeds)" and t.yaxis == "y")
    # only the rounds both seeds evaluated: (75 + 50) / 2 and (100 + 75) / 2
    assert list(mean.x) == [1, 2] and list(mean.y) == [62.5, 87.5]
    band = [t for t in figure.data if t.legendgroup == "afl" and t.fill == "tonexty"]
    assert len(band) == 5 and list(band[0].y) == [50.0, 75.0]  # the lower edge: the minimum
    # 3 rounds or fewer: one tick per round, integers only
    axis = figure.layout.xaxis5
    assert (axis.dtick, axis.tick0, axis.tickformat) == (1, 1, "d")


def test_weights_and_per_client_state(tmp_path, line):
    train = {
        "accepted": 2,
        "dropped": {},
        "weights": [
            {"node_id": 1001, "partition_id": 0, "weight": 0.25},
            {"node_id": 1002, "partition_id": 1, "weight": 0.75},
        ],
        "diagnostics": {"clusters": {"1001": 0, "1002": 1}, "qp-status": "optimal"},
    }
    run = follower_with(tmp_path, [line(1, [0.5, 0.5], train=train)])
    weights = figures.weights_heatmap(run).data[0]
    assert list(weights.y) == ["client 0", "client 1"]
    np.testing.assert_allclose(np.asarray(weights.z), [[0.25], [0.75]])
    assert figures.diagnostic_names(run) == (["qp-status"], ["clusters"])
    clusters = figures.per_client_figure(run, None).data[0]
    np.testing.assert_allclose(np.asarray(clusters.z), [[0], [1]])
    status = figures.diagnostics_figure(run).data[0]
    assert list(status.y) == ["optimal"] and status.mode == "markers"


def test_participation_and_drops(tmp_path, line):
    first = line(1, [0.5, 0.5], train={"accepted": 1, "dropped": {"1003": "contains nan"}})
    first["sampled"] = {"train": 3, "evaluate": 3}
    first["evaluate_dropped"] = {"1003": "timed out"}
    second = line(2, [0.5], train={"accepted": 0, "dropped": {}, "skipped": "|w| > 1e6"})
    run = follower_with(tmp_path, [first, second])
    traces = {t.name: list(t.y) for t in figures.participation_figure(run).data}
    assert traces["train sampled"] == [3, 1]
    assert traces["train aggregated"] == [1, 0]
    assert traces["train dropped"] == [1, 0]
    assert traces["evaluate answered"] == [2, 1]
    assert traces["evaluate dropped"] == [1, 0]
    assert figures.drop_rows(run) == [
        (2, "aggregate", "-", "round skipped: |w| > 1e6"),
        (1, "train", "1003", "contains nan"),
        (1, "evaluate", "1003", "timed out"),
    ]


def test_failed_rounds_and_silenced_clients_are_listed(tmp_path, line):
    # Issue 47: a rule that holds a client at weight 0 (FairFed's clip) says so, and a
    # round that could use no reply is shown as failed, as rounds.jsonl records them.
    first = line(1, [0.5, 0.5], train={"accepted": 2, "dropped": {}, "silenced": [1]})
    second = line(2, [0.5], train={"accepted": 0, "dropped": {"1002": "no reply"}})
    second["failed"] = {"reason": "none of the 1 clients' train replies could be used"}
    run = follower_with(tmp_path, [first, second])
    assert run.rounds[0].silenced == [1] and run.rounds[1].failed is not None
    run.summary = {"silenced_clients": {"1": 1}, "failed_rounds": {"2": "no reply"}}
    shown = facts.run_facts(run, None)["Run"]
    assert shown["clients at weight 0 all run (rounds)"] == "1 (1)"
    assert shown["failed rounds"] == "2"
    assert figures.drop_rows(run) == [
        (2, "train", "1002", "no reply"),
        (2, "train", "-", "round failed: none of the 1 clients' train replies could be used"),
        (1, "aggregate", "client 1", "silenced: weight 0 in the aggregate"),
    ]


def test_run_facts_keep_config_and_mark_the_dashboard_host(tmp_path, line):
    run = follower_with(tmp_path, [line(1, [0.5])])
    run.planned_config = {"num-server-rounds": 30, "strategy": "afl"}
    shown = facts.run_facts(run, {"engine": "inprocess", "cpu_count": 2})
    assert shown["Run"]["planned rounds"] == 30 and shown["Run"]["rule"] == "afl"
    assert shown["Hardware / device"]["comparison engine"] == "inprocess"
    assert shown["Hardware / device"]["comparison cpu count"] == 2
    assert "dashboard host" in shown["Hardware / device"]


def test_empty_runs_give_a_message_not_an_error(tmp_path):
    run = RunFollower(tmp_path / "missing", "later")
    for build in (
        figures.client_heatmap,
        figures.distribution_figure,
        figures.weights_heatmap,
        figures.diagnostics_figure,
        figures.participation_figure,
    ):
        figure = build(run)
        assert figure.layout.annotations[0].text.startswith("later: ")
    assert figures.metrics_figure({}).layout.annotations[0].text == "no round evaluated yet"


@pytest.mark.parametrize(
    ("label", "variant"),
    [("afl seed 2", "afl"), ("semivred[beta=0.5] seed 10", "semivred[beta=0.5]"), ("run", "run")],
)
def test_variant_of(label, variant):
    assert labels.variant_of(label) == variant


def test_distribution_counts_the_latest_round(tmp_path, line):
    run = follower_with(tmp_path, [line(1, [0.0, 0.0]), line(2, [0.5, 1.0, 0.97])])
    histogram = figures.distribution_figure(run).data[0]
    assert sorted(histogram.x) == pytest.approx([50.0, 97.0, 100.0])


def test_group_gaps_are_plotted_for_runs_with_group_counts(tmp_path, line):
    # Client 0 selects 3 of 4 with A=0 and 1 of 4 with A=1; client 1: 1 of 2 and 1 of 2.
    # Pooled: A=0 4 of 6, A=1 2 of 6: demographic-parity gap 1/3 (counts 4a + 2y + ŷ).
    entry = line(1, [0.75, 0.5])
    entry["clients"][0]["group_counts"] = [1, 1, 0, 2, 2, 0, 1, 1]
    entry["clients"][1]["group_counts"] = [1, 0, 0, 1, 0, 1, 1, 0]
    parsed = parse_entry(entry)
    assert parsed.metrics["dp-diff"] == pytest.approx(1 / 3)
    fair = follower_with(tmp_path, [entry], "fairfed")
    figure = figures.metrics_figure({"fairfed": fair})
    titles = [a.text for a in figure.layout.annotations]
    assert titles[-2:] == ["Demographic-parity gap (0-1)", "Equalised-odds gap (0-1)"]
    by_axis = {t.yaxis: t for t in figure.data}
    assert by_axis["y6"].y[0] == pytest.approx(1 / 3)
    # Runs without counts keep the five accuracy rows.
    plain = follower_with(tmp_path, [line(1, [0.75, 0.5])], "fedavg")
    assert len(figures.metrics_figure({"fedavg": plain}).layout.annotations) == 5
