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
    summarize,
    table2,
    table2_csv,
    table2_markdown,
    table6_csv,
    table6_markdown,
)


def run_with(label, seed, accuracies, rule=None, num_examples=10):
    """A finished run whose last round has these client accuracies (fractions)."""
    clients = [
        {
            "node_id": 1000 + i,
            "partition_id": i,
            "num_examples": num_examples,
            "eval_acc": acc,
            "eval_loss": 1.0,
        }
        for i, acc in enumerate(accuracies)
    ]
    rounds = [{"round": 1, "clients": clients}]
    return RunResult(label=label, rule=rule or label, seed=seed, path=Path("."), rounds=rounds)


def test_table6_statistics_over_clients_and_seeds_by_hand():
    # Seed 0: 10 clients at 10, 20, ..., 100 %. Mean 55; population std sqrt(825) = 28.7228;
    # worst 10; worst 10% = floor(0.1·10) = 1 client -> 10; worst 20% = 2 clients -> 15;
    # best 10% -> 100. Seed 1: every client at 30 % (std 0).
    seed0 = run_with("fedavg", 0, [i / 10 for i in range(1, 11)])
    seed1 = run_with("fedavg", 1, [0.3] * 10)
    (row,) = summarize({"fedavg": [seed0, seed1]})
    assert row.seeds == (0, 1) and row.ok_seeds == (0, 1)
    # Over seeds: mean (55 + 30) / 2 = 42.5, population std |55 - 30| / 2 = 12.5.
    assert row.stats["acc-mean"].mean == pytest.approx(42.5)
    assert row.stats["acc-mean"].std == pytest.approx(12.5)
    assert row.stats["acc-std"].mean == pytest.approx(math.sqrt(825) / 2)
    assert row.stats["acc-worst"].mean == pytest.approx(20.0)  # (10 + 30) / 2
    assert row.stats["acc-worst-10"].mean == pytest.approx(20.0)
    assert row.stats["acc-worst-20"].mean == pytest.approx(22.5)  # (15 + 30) / 2
    assert row.stats["acc-best-10"].mean == pytest.approx(65.0)  # (100 + 30) / 2
    assert row.stats["acc-best-10"].std == pytest.approx(35.0)


def test_qffl_columns_variance_is_in_percent_squared():
    # Accuracies 0.2 and 0.6: variance of (20, 60) % = 400 %²; q-FFL's np.var(acc)·1e4.
    (row,) = summarize({"q": [run_with("q", 0, [0.2, 0.6])]}, QFFL_COLUMNS)
    assert row.stats["acc-variance"].mean == pytest.approx(400.0)
    assert row.stats["acc-mean"].mean == pytest.approx(40.0)


def test_failed_seed_is_left_out_and_counted():
    good = run_with("afl", 0, [0.5, 0.7])
    failed = RunResult(label="afl", rule="afl", seed=1, path=Path("."), error="diverged")
    diverged = run_with("afl", 2, [math.nan, 0.1])
    (row,) = summarize({"afl": [good, failed, diverged]})
    assert row.ok_seeds == (0,)
    assert row.stats["acc-mean"] == Stat(60.0, 0.0, 1)
    assert "| 1/3 |" in table6_markdown([row])


def test_all_seeds_failed_shows_a_dash():
    failed = RunResult(label="afl", rule="afl", seed=0, path=Path("."), error="boom")
    (row,) = summarize({"afl": [failed]})
    assert table6_markdown([row]).splitlines()[-1] == "| afl | - | - | - | - | - | - | 0/1 |"


def test_stat_format():
    assert Stat(43.4512, 0.6, 3).format() == "43.45 ± 0.60"
    assert Stat(43.4512, 0.0, 1).format() == "43.45"
    assert Stat(0.64, 0.3, 3).format(signed=True) == "+0.64 ± 0.30"
    assert Stat(math.nan, math.nan, 0).format() == "-"


def test_mean_std_ignores_non_finite_values():
    assert mean_std([1.0, 3.0, math.nan, math.inf]) == (2.0, 1.0, 2)
    assert all(math.isnan(v) for v in mean_std([math.nan])[:2])


def test_paired_comparison_by_hand():
    # FedAvg 40, 60, 80, 20 (mean 50): suffering {0, 3}, well-performing {1, 2}.
    # Rule X 45, 55, 80, 15: changes +5, -5, 0, -5.
    base = {0: 40.0, 1: 60.0, 2: 80.0, 3: 20.0}
    other = {3: 15.0, 2: 80.0, 1: 55.0, 0: 45.0}  # order does not matter
    result = paired_comparison(base, other)
    assert (result.num_suffering, result.num_well) == (2, 2)
    assert result.improved_share == pytest.approx(50.0)  # client 0 up, client 3 down
    assert result.improved_change == pytest.approx(0.0)  # (+5 - 5) / 2
    assert result.degraded_share == pytest.approx(50.0)  # client 1 down, client 2 equal
    assert result.degraded_change == pytest.approx(-2.5)  # (-5 + 0) / 2
    assert result.overall_change == pytest.approx(-1.25)  # 48.75 - 50


def test_paired_comparison_pairs_by_partition_id_and_ignores_unpaired():
    base = {0: 10.0, 1: 30.0, 7: 99.0}
    other = {0: 20.0, 1: 30.0, 5: 0.0}
    result = paired_comparison(base, other)  # clients 0 and 1 only; mean 20
    assert (result.num_suffering, result.num_well) == (1, 1)
    assert result.improved_share == 100.0 and result.improved_change == 10.0
    assert result.degraded_share == 0.0 and result.overall_change == 5.0


def test_paired_comparison_clients_at_the_mean_are_in_neither_group():
    result = paired_comparison({0: 50.0, 1: 50.0}, {0: 60.0, 1: 40.0})
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
            run_with("semivred", 1, [0.5, 0.6]),  # suffering client +10: 100 %, +10
            run_with("semivred", 2, [0.9, 0.9]),  # no FedAvg run on seed 2: left out
        ],
    }
    (row,) = table2(groups, "fedavg")
    assert row.label == "semivred" and row.seeds == (0, 1)
    assert row.improved_share.mean == pytest.approx(75.0)  # (50 + 100) / 2
    assert row.improved_share.std == pytest.approx(25.0)
    assert row.improved_change.mean == pytest.approx(5.0)  # (0 + 10) / 2
    assert row.degraded_share.mean == pytest.approx(25.0)  # (50 + 0) / 2
    assert row.overall_change.mean == pytest.approx((-1.25 + 5.0) / 2)
    markdown = table2_markdown([row], "fedavg")
    assert "| semivred | 75.00 ± 25.00 (+5.00) | 25.00 ± 25.00 (-1.25) | +1.88 ± 3.12 |" in markdown
    csv_lines = table2_csv([row]).splitlines()
    assert csv_lines[0].startswith("label,seeds,improved_share mean,improved_share std")
    assert csv_lines[1].startswith("semivred,0 1,75.0,25.0,5.0,5.0")


def test_table2_unknown_baseline_raises():
    with pytest.raises(ValueError, match="baseline must be one of \\['a'\\], got 'fedavg'"):
        table2({"a": [run_with("a", 0, [0.5])]}, "fedavg")


def test_table6_csv_has_mean_and_std_columns():
    (row,) = summarize({"fedavg": [run_with("fedavg", 0, [0.5, 1.0])]})
    header, line = table6_csv([row]).splitlines()
    assert header == (
        "rule,label,seeds,seeds_ok,Mean mean,Mean std,Std mean,Std std,Worst mean,Worst std,"
        "Worst 10% mean,Worst 10% std,Worst 20% mean,Worst 20% std,Best 10% mean,Best 10% std"
    )
    assert line == "fedavg,fedavg,0,0,75.0,0.0,25.0,0.0,50.0,0.0,50.0,0.0,50.0,0.0,100.0,0.0"


def test_markdown_table_escapes_pipes():
    assert markdown_table(["a"], [["x|y"]]) == "| a |\n| --- |\n| x\\|y |\n"


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(0, 100, allow_nan=False), min_size=1, max_size=30),
    st.just(0.0) | st.floats(0.01, 20) | st.floats(-20, -0.01),
)
def test_paired_comparison_constant_shift_properties(accuracies, shift):
    base = dict(enumerate(accuracies))
    other = {k: v + shift for k, v in base.items()}
    result = paired_comparison(base, other)
    assert result.overall_change == pytest.approx(shift, abs=1e-9)
    assert result.num_suffering + result.num_well <= len(accuracies)
    if result.num_suffering:
        assert result.improved_share == (100.0 if shift > 0 else 0.0)
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
