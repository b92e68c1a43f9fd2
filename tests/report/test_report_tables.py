"""Table 6 and Table 2 computations against numbers worked by hand."""

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairfl.report.results import RunResult
from fairfl.report.tables import (
    QFFL_COLUMNS,
    Stat,
    markdown_table,
    mean_std,
    paired_comparison,
    pooled_change,
    summarize,
    table2,
    table2_csv,
    table2_markdown,
    table6_csv,
    table6_markdown,
)


def run_with(label, seed, accuracies, rule=None, num_examples=10):
    """A finished run whose last round has these client accuracies (fractions).

    ``num_examples``: every client's test samples, or one count per client.
    """
    counts = [num_examples] * len(accuracies) if isinstance(num_examples, int) else num_examples
    clients = [
        {
            "node_id": 1000 + i,
            "partition_id": i,
            "num_examples": count,
            "eval_acc": acc,
            "eval_loss": 1.0,
        }
        for i, (acc, count) in enumerate(zip(accuracies, counts, strict=True))
    ]
    rounds = [{"round": 1, "clients": clients}]
    return RunResult(label=label, rule=rule or label, seed=seed, path=Path("."), rounds=rounds)


def test_table6_statistics_over_clients_and_seeds_by_hand():
    # Seed 0: 10 clients at 0.1, 0.2, ..., 1.0. Mean 0.55; population variance 0.0825
    # (that of 1..10 is 8.25), std sqrt(0.0825) = 0.287228; worst 0.1; worst 10% =
    # floor(0.1·10) = 1 client -> 0.1; worst 20% = 2 clients -> 0.15; best 10% -> 1.0.
    # Seed 1: every client at 0.3 (std 0).
    seed0 = run_with("fedavg", 0, [i / 10 for i in range(1, 11)])
    seed1 = run_with("fedavg", 1, [0.3] * 10)
    (row,) = summarize({"fedavg": [seed0, seed1]})
    assert row.seeds == (0, 1) and row.ok_seeds == (0, 1)
    # Over seeds: mean (0.55 + 0.3) / 2 = 0.425, population std |0.55 - 0.3| / 2 = 0.125.
    assert row.stats["acc-mean"].mean == pytest.approx(0.425)
    assert row.stats["acc-mean"].std == pytest.approx(0.125)
    assert row.stats["acc-std"].mean == pytest.approx(math.sqrt(0.0825) / 2)
    assert row.stats["acc-worst"].mean == pytest.approx(0.2)  # (0.1 + 0.3) / 2
    assert row.stats["acc-worst-10"].mean == pytest.approx(0.2)
    assert row.stats["acc-worst-20"].mean == pytest.approx(0.225)  # (0.15 + 0.3) / 2
    assert row.stats["acc-best-10"].mean == pytest.approx(0.65)  # (1.0 + 0.3) / 2
    assert row.stats["acc-best-10"].std == pytest.approx(0.35)
    # The Markdown table is for people: percent, and every header says so.
    # Std: 100·sqrt(0.0825)/2 = 14.36 over seeds, ± the same (seed 1 has 0). Every
    # client has 10 test samples, so the pooled accuracy is the mean.
    header, _, line = table6_markdown([row]).splitlines()
    assert header == (
        "| Rule | Mean (%) | Pooled (%) | Std (%) | Worst (%) | Worst 10% (%) "
        "| Worst 20% (%) | Best 10% (%) | Jain | Seeds |"
    )
    # Jain (Σa)² / (n Σa²): seed 0, 5.5² / (10 · 3.85) = 0.785714; seed 1 (all equal) 1;
    # over seeds 0.892857 ± 0.107143, unitless with three digits.
    assert line == (
        "| fedavg | 42.50 ± 12.50 | 42.50 ± 12.50 | 14.36 ± 14.36 | 20.00 ± 10.00 "
        "| 20.00 ± 10.00 | 22.50 ± 7.50 | 65.00 ± 35.00 | 0.893 ± 0.107 | 2/2 |"
    )


def test_pooled_column_weighs_clients_by_test_samples_by_hand():
    # Seed 0: a client with 90 test samples at 0.9 and one with 10 at 0.5: mean 0.70,
    # pooled (81 + 5) / 100 = 0.86. Seed 1: 30 samples at 0.6 and 10 at 0.2: mean 0.40,
    # pooled (18 + 2) / 40 = 0.50. Over seeds: mean 0.55 ± 0.15, pooled 0.68 ± 0.18.
    seed0 = run_with("r", 0, [0.9, 0.5], num_examples=[90, 10])
    seed1 = run_with("r", 1, [0.6, 0.2], num_examples=[30, 10])
    (row,) = summarize({"r": [seed0, seed1]})
    assert row.stats["acc-weighted-mean"].mean == pytest.approx(0.68)
    assert row.stats["acc-weighted-mean"].std == pytest.approx(0.18)
    # Std 0.2 on both seeds; worst, worst 10 % and worst 20 % (one client of two) 0.5
    # and 0.2; best 10 % 0.9 and 0.6.
    line = table6_markdown([row]).splitlines()[2]
    assert line == (
        "| r | 55.00 ± 15.00 | 68.00 ± 18.00 | 20.00 ± 0.00 | 35.00 ± 15.00 "
        "| 35.00 ± 15.00 | 35.00 ± 15.00 | 75.00 ± 15.00 | 0.862 ± 0.062 | 2/2 |"
    )  # Jain 1.4² / (2 · 1.06) = 0.924528 and 0.8² / (2 · 0.4) = 0.8
    csv_header, csv_line = table6_csv([row]).splitlines()
    columns = csv_header.split(",")
    assert columns[4:8] == [
        "acc-mean mean",
        "acc-mean std",
        "acc-weighted-mean mean",
        "acc-weighted-mean std",
    ]
    assert [float(x) for x in csv_line.split(",")[4:8]] == pytest.approx([0.55, 0.15, 0.68, 0.18])


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 1, allow_nan=False), st.integers(1, 1000)), min_size=1, max_size=20
    )
)
def test_pooled_lies_between_the_worst_and_the_best_client(clients):
    accuracies = [acc for acc, _ in clients]
    (row,) = summarize({"r": [run_with("r", 0, accuracies, num_examples=[n for _, n in clients])]})
    pooled = row.stats["acc-weighted-mean"].mean
    assert min(accuracies) - 1e-12 <= pooled <= max(accuracies) + 1e-12
    # Equal test sets: pooled is the unweighted mean.
    (same,) = summarize({"r": [run_with("r", 0, accuracies, num_examples=7)]})
    assert same.stats["acc-weighted-mean"].mean == pytest.approx(same.stats["acc-mean"].mean)


def test_qffl_columns_variance_is_a_fraction_squared_shown_in_percent_squared():
    # Accuracies 0.2 and 0.6: mean 0.4, variance 0.2² = 0.04; q-FFL's table shows
    # np.var(acc)·1e4 = 400 %².
    (row,) = summarize({"q": [run_with("q", 0, [0.2, 0.6])]}, QFFL_COLUMNS)
    assert row.stats["acc-variance"].mean == pytest.approx(0.04)
    assert row.stats["acc-mean"].mean == pytest.approx(0.4)
    header, _, line = table6_markdown([row], QFFL_COLUMNS).splitlines()
    assert header == (
        "| Rule | Average (%) | Worst 10% (%) | Best 10% (%) | Variance (%²) | Seeds |"
    )
    assert line == "| q | 40.00 | 20.00 | 60.00 | 400.00 | 1/1 |"


def test_failed_seed_is_left_out_and_counted():
    good = run_with("afl", 0, [0.5, 0.7])
    failed = RunResult(label="afl", rule="afl", seed=1, path=Path("."), error="diverged")
    diverged = run_with("afl", 2, [math.nan, 0.1])
    (row,) = summarize({"afl": [good, failed, diverged]})
    assert row.ok_seeds == (0,)
    assert row.stats["acc-mean"].mean == pytest.approx(0.6)
    assert (row.stats["acc-mean"].std, row.stats["acc-mean"].count) == (0.0, 1)
    assert "| 1/3 |" in table6_markdown([row])


def test_all_seeds_failed_shows_a_dash():
    failed = RunResult(label="afl", rule="afl", seed=0, path=Path("."), error="boom")
    (row,) = summarize({"afl": [failed]})
    assert table6_markdown([row]).splitlines()[-1] == (
        "| afl | - | - | - | - | - | - | - | - | 0/1 |"
    )


def test_stat_format():
    assert Stat(43.4512, 0.6, 3).format() == "43.45 ± 0.60"
    assert Stat(43.4512, 0.0, 1).format() == "43.45"
    assert Stat(0.64, 0.3, 3).format(signed=True) == "+0.64 ± 0.30"
    assert Stat(math.nan, math.nan, 0).format() == "-"
    # A fraction shown in percent: 0.434512 -> 43.45, std 0.006 -> 0.60.
    assert Stat(0.434512, 0.006, 3).format(scale=100.0) == "43.45 ± 0.60"


def test_mean_std_ignores_non_finite_values():
    assert mean_std([1.0, 3.0, math.nan, math.inf]) == (2.0, 1.0, 2)
    assert all(math.isnan(v) for v in mean_std([math.nan])[:2])


def test_paired_comparison_by_hand():
    # FedAvg 0.4, 0.6, 0.8, 0.2 (mean 0.5): suffering {0, 3}, well-performing {1, 2}.
    # Rule X 0.45, 0.55, 0.8, 0.15: changes +0.05, -0.05, 0, -0.05.
    base = {0: 0.4, 1: 0.6, 2: 0.8, 3: 0.2}
    other = {3: 0.15, 2: 0.8, 1: 0.55, 0: 0.45}  # order does not matter
    result = paired_comparison(base, other)
    assert (result.num_suffering, result.num_well) == (2, 2)
    assert result.improved_share == pytest.approx(0.5)  # client 0 up, client 3 down
    assert result.improved_change == pytest.approx(0.0, abs=1e-12)  # (+0.05 - 0.05) / 2
    assert result.degraded_share == pytest.approx(0.5)  # client 1 down, client 2 equal
    assert result.degraded_change == pytest.approx(-0.025)  # (-0.05 + 0) / 2
    assert result.overall_change == pytest.approx(-0.0125)  # 0.4875 - 0.5


def test_paired_comparison_pairs_by_partition_id_and_ignores_unpaired():
    base = {0: 0.1, 1: 0.3, 7: 0.99}
    other = {0: 0.2, 1: 0.3, 5: 0.0}
    result = paired_comparison(base, other)  # clients 0 and 1 only; mean 0.2
    assert (result.num_suffering, result.num_well) == (1, 1)
    assert result.improved_share == 1.0 and result.improved_change == pytest.approx(0.1)
    assert result.degraded_share == 0.0 and result.overall_change == pytest.approx(0.05)


def test_paired_comparison_clients_at_the_mean_are_in_neither_group():
    result = paired_comparison({0: 0.5, 1: 0.5}, {0: 0.75, 1: 0.25})
    assert (result.num_suffering, result.num_well) == (0, 0)
    assert math.isnan(result.improved_share) and math.isnan(result.degraded_change)
    assert result.overall_change == 0.0


def test_paired_comparison_without_common_clients_raises():
    with pytest.raises(ValueError, match="share no client partition id"):
        paired_comparison({0: 1.0}, {1: 1.0})


def test_table2_pairs_runs_by_seed_and_averages_over_seeds():
    groups = {
        "fedavg": [
            run_with("fedavg", 0, [0.4, 0.6, 0.8, 0.2]),
            run_with("fedavg", 1, [0.4, 0.6]),
        ],
        "semivred": [
            run_with("semivred", 0, [0.45, 0.55, 0.8, 0.15]),  # as in the test above
            run_with("semivred", 1, [0.5, 0.6]),  # suffering client +0.1: share 1, +0.1
            run_with("semivred", 2, [0.9, 0.9]),  # no FedAvg run on seed 2: left out
        ],
    }
    (row,) = table2(groups, "fedavg")
    assert row.label == "semivred" and row.seeds == (0, 1)
    assert row.improved_share.mean == pytest.approx(0.75)  # (0.5 + 1) / 2
    assert row.improved_share.std == pytest.approx(0.25)
    assert row.improved_change.mean == pytest.approx(0.05)  # (0 + 0.1) / 2
    assert row.degraded_share.mean == pytest.approx(0.25)  # (0.5 + 0) / 2
    assert row.overall_change.mean == pytest.approx((-0.0125 + 0.05) / 2)
    # Markdown in percent: shares 75 ± 25 %, changes in points (+5.00, -1.25);
    # overall (-1.25 + 5) / 2 = +1.875 ± 3.125 points (in floats a hair above: .88, .13),
    # pooled the same (every client has 10 test samples);
    # suffering / well clients 2 / 2 on seed 0, 1 / 1 on seed 1 -> 1.5 / 1.5.
    header, _, line = table2_markdown([row], "fedavg").splitlines()
    assert header.startswith(
        "| Rule | Improved suffering clients % (avg Δacc, % points) vs fedavg "
        "| Degraded well-performing clients % (avg Δacc, % points) "
        "| Overall mean Δacc (% points) | Overall pooled Δacc (% points) |"
    )
    assert line == (
        "| semivred | 75.00 ± 25.00 (+5.00) | 25.00 ± 25.00 (-1.25) | +1.88 ± 3.13 "
        "| +1.88 ± 3.13 | 1.5 / 1.5 | 2 |"
    )
    # The CSV holds the same as fractions.
    header_csv, line_csv = table2_csv([row]).splitlines()
    assert header_csv.startswith("label,seeds,improved_share mean,improved_share std")
    assert line_csv.startswith("semivred,0 1,")
    numbers = [float(x) for x in line_csv.split(",")[2:6]]
    assert numbers == pytest.approx([0.75, 0.25, 0.05, 0.05])


def test_table2_pooled_change_can_fall_while_the_mean_rises():
    # FedAvg: 90 test samples at 0.9, 10 at 0.5 -> mean 0.70, pooled 0.86. Rule X: the
    # large client drops to 0.8, the small one rises to 0.9 -> mean 0.85 (+0.15),
    # pooled (72 + 9) / 100 = 0.81 (-0.05).
    groups = {
        "fedavg": [run_with("fedavg", 0, [0.9, 0.5], num_examples=[90, 10])],
        "x": [run_with("x", 0, [0.8, 0.9], num_examples=[90, 10])],
    }
    (row,) = table2(groups, "fedavg")
    assert row.overall_change.mean == pytest.approx(0.15)
    assert row.overall_pooled_change.mean == pytest.approx(-0.05)
    line = table2_markdown([row], "fedavg").splitlines()[2]
    assert "| +15.00 | -5.00 | 1 / 1 | 1 |" in line
    header_csv, line_csv = table2_csv([row]).splitlines()
    columns = header_csv.split(",")
    start = columns.index("overall_change mean")
    assert columns[start : start + 4] == [
        "overall_change mean",
        "overall_change std",
        "overall_pooled_change mean",
        "overall_pooled_change std",
    ]
    values = [float(x) for x in line_csv.split(",")[start : start + 4]]
    assert values == pytest.approx([0.15, 0.0, -0.05, 0.0])


def test_pooled_change_is_the_difference_of_the_pooled_accuracies():
    assert pooled_change({"acc-weighted-mean": 0.86}, {"acc-weighted-mean": 0.81}) == (
        pytest.approx(-0.05)
    )
    assert math.isnan(pooled_change({}, {"acc-weighted-mean": 0.81}))


def test_table2_unknown_baseline_raises():
    with pytest.raises(ValueError, match="baseline must be one of \\['a'\\], got 'fedavg'"):
        table2({"a": [run_with("a", 0, [0.5])]}, "fedavg")


def test_table6_csv_holds_fractions_under_the_metric_names():
    # Accuracies 0.5 and 1.0: mean 0.75, std 0.25, worst and both worst tails 0.5, best 1.
    (row,) = summarize({"fedavg": [run_with("fedavg", 0, [0.5, 1.0])]})
    # Equal test sets (10 samples each): pooled 0.75 too.
    header, line = table6_csv([row]).splitlines()
    assert header == (
        "rule,label,seeds,seeds_ok,acc-mean mean,acc-mean std,"
        "acc-weighted-mean mean,acc-weighted-mean std,acc-std mean,acc-std std,"
        "acc-worst mean,acc-worst std,acc-worst-10 mean,acc-worst-10 std,"
        "acc-worst-20 mean,acc-worst-20 std,acc-best-10 mean,acc-best-10 std,"
        "jain-index mean,jain-index std"
    )
    # Jain 1.5² / (2 · 1.25) = 0.9.
    assert line == (
        "fedavg,fedavg,0,0,0.75,0.0,0.75,0.0,0.25,0.0,0.5,0.0,0.5,0.0,0.5,0.0,1.0,0.0,0.9,0.0"
    )


def test_markdown_table_escapes_pipes():
    assert markdown_table(["a"], [["x|y"]]) == "| a |\n| --- |\n| x\\|y |\n"


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(0, 1, allow_nan=False), min_size=1, max_size=30),
    st.just(0.0) | st.floats(0.001, 0.2) | st.floats(-0.2, -0.001),
)
def test_paired_comparison_constant_shift_properties(accuracies, shift):
    base = dict(enumerate(accuracies))
    other = {k: v + shift for k, v in base.items()}
    result = paired_comparison(base, other)
    assert result.overall_change == pytest.approx(shift, abs=1e-9)
    assert result.num_suffering + result.num_well <= len(accuracies)
    if result.num_suffering:
        assert result.improved_share == (1.0 if shift > 0 else 0.0)
        assert result.improved_change == pytest.approx(shift, abs=1e-9)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0, 1, allow_nan=False), min_size=2, max_size=20), st.randoms())
def test_paired_comparison_is_invariant_to_client_order(accuracies, rng):
    base = dict(enumerate(accuracies))
    other = {k: 1.0 - v for k, v in base.items()}
    keys = list(base)
    rng.shuffle(keys)
    shuffled = paired_comparison({k: base[k] for k in keys}, {k: other[k] for k in keys})
    assert shuffled == paired_comparison(base, other)
    assert np.isfinite(shuffled.overall_change)


def test_group_columns_from_the_clients_group_counts():
    from fairfl.report.tables import GROUP_COLUMNS

    run = run_with("fairfed", 0, [0.75, 0.5])
    # Client 0: A=0 (y, ŷ) 00, 01, 11, 11; A=1 00, 00, 10, 11 (counts 4a + 2y + ŷ).
    # Client 1: A=0 00, 11; A=1 01, 10.
    # Pooled: A=0 selects 3 + 1 = 4 of 6, A=1 1 + 1 = 2 of 6: DP gap 1/3.
    entry = run.rounds[-1]
    entry["clients"][0]["group_counts"] = [1, 1, 0, 2, 2, 0, 1, 1]
    entry["clients"][1]["group_counts"] = [1, 0, 0, 1, 0, 1, 1, 0]
    (row,) = summarize({"fairfed": [run]}, GROUP_COLUMNS)
    assert row.stats["dp-diff"].mean == pytest.approx(4 / 6 - 2 / 6)
    # Correct: client 0 A=0 3 of 4, A=1 3 of 4; client 1 A=0 2 of 2, A=1 0 of 2: 8 of 12.
    assert row.stats["group-acc"].mean == pytest.approx(8 / 12)
    # Accuracy parity: A=0 5 of 6, A=1 3 of 6.
    assert row.stats["acc-parity-diff"].mean == pytest.approx(5 / 6 - 3 / 6)
    header = table6_markdown([row], GROUP_COLUMNS).splitlines()[0]
    assert header.startswith("| Rule | Accuracy (%) | DP gap (%) | EO gap (%) |")
