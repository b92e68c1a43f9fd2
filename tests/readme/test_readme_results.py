"""Figures in the README and the docs site's pages that come from docs/results files agree
with those files: the digits tables, the adversarial, q-FedSGD, loss-inflation, baseline,
RC-FL and Semi-VRed results (the q-FFL ones: ``test_readme_qffl.py``; the tuned digits
tables: ``test_readme_tuned.py``; the text read: ``readme_text.py``).
"""

import json

import numpy as np
import pytest

from tests.readme.readme_text import README, ROOT, markdown_rows, readme_table, runs_csv_cells


def test_digits_table_is_the_reports_table_in_percent_with_units_in_the_header():
    # docs/results/digits-table6/table6.md (fairfl compare --recipe digits-table6 ...):
    # the README shows its first six statistics (Mean and Pooled first) for every rule,
    # in the report's unit.
    report = markdown_rows((ROOT / "docs/results/digits-table6/table6.md").read_text().splitlines())
    readme = readme_table("| Rule | Mean (%) |")
    assert readme[0] == report[0][:7]
    assert readme[0][1:3] == ["Mean (%)", "Pooled (%)"]
    by_label = {row[0]: row[:7] for row in report[1:]}
    assert sorted(row[0] for row in readme[1:]) == sorted(by_label)
    for row in readme[1:]:
        assert row == by_label[row[0]]


@pytest.mark.parametrize(
    ("folder", "header"),
    [
        ("digits-table6", "| Rule | Mean (%) |"),
        ("digits-table6-tuned", "| Rule (chosen setting) |"),
        ("digits-table6-tuned-wide", "| Rule (chosen setting, widened grid) |"),
    ],
)
def test_digits_mean_and_pooled_columns_come_from_the_runs(folder, header):
    # Mean: acc-mean (the unweighted client mean); Pooled: acc-weighted-mean (correct
    # predictions / test samples over all clients) of each run's final round in
    # runs.csv, mean ± population std over the 3 seeds.
    readme = readme_table(header)
    means = runs_csv_cells(folder, "acc-mean")
    pooled = runs_csv_cells(folder, "acc-weighted-mean")
    for label, mean, pooled_cell, *_ in readme[1:]:
        assert (mean, pooled_cell) == (means[label], pooled[label])


def test_digits_rules_with_pooled_below_mean_are_the_ones_the_readme_names():
    # "Where Pooled is below Mean, ...: here `fedavg-n`, ..." from runs.csv.
    means = runs_csv_cells("digits-table6", "acc-mean")
    pooled = runs_csv_cells("digits-table6", "acc-weighted-mean")

    def first(cell: str) -> float:
        return float(cell.split(" ± ")[0])

    below = {label for label in means if first(pooled[label]) < first(means[label])}
    paragraph = " ".join(README.split())
    start = paragraph.index("Where Pooled is below Mean")
    named = paragraph[start : paragraph.index(".", start)].split(": here ")[1]
    assert set(named.replace(" and ", ", ").replace("`", "").split(", ")) == below
    assert "FedMGDA+'s pooled accuracy (82.92 %) stays below FedAvg's (83.36 %)" in paragraph
    tuned = runs_csv_cells("digits-table6-tuned", "acc-weighted-mean")
    assert first(tuned["fedmgda[epsilon=0.05,global-lr=2]"]) == 82.92
    assert first(tuned["fedavg"]) == 83.36


@pytest.mark.parametrize(
    "folder", ["digits-table6", "digits-table6-tuned", "digits-table6-tuned-wide", "qffl-synthetic"]
)
def test_committed_tables_are_what_the_report_renders_from_the_committed_runs(folder):
    # `fairfl report` on the folder would write the same table6.md / table2.md: the
    # committed tables are not stale (rebuilt in memory, nothing is written).
    from fairfl.report import tables
    from fairfl.report.results import group_by_label, load_runs, read_manifest

    path = ROOT / "docs/results" / folder
    groups = group_by_label(load_runs(path))
    baseline = read_manifest(path)["baseline"]
    summary = tables.summarize(groups)
    assert tables.table6_markdown(summary) == (path / "table6.md").read_text()
    table2 = tables.table2_markdown(tables.table2(groups, baseline), baseline)
    assert table2 == (path / "table2.md").read_text()


def test_adversarial_table_is_the_results_file():
    # docs/results/adversarial.md (experiments/adversarial.py --out ...), indented in a list.
    result = (ROOT / "docs/results/adversarial.md").read_text().splitlines()
    lines = [line.strip() for line in README.splitlines()]
    start = lines.index(result[0])
    assert lines[start : start + len(result)] == result
    assert "(%)" in result[0]  # a table for people says its unit


def test_qfedsgd_comparison_is_the_results_file():
    # docs/results/qfedsgd-synthetic/results.json (scripts/qfedsgd_synthetic.py): the
    # README's table is its per-round curves at the last round (fractions shown in %, %²),
    # and the rounds each run first reaches each worst-10% level; command and wall time.
    result = json.loads((ROOT / "docs/results/qfedsgd-synthetic/results.json").read_text())
    assert f"```bash\n{result['command']}\n```" in README
    assert f"wall time {round(result['wall_time_s']['total']):,} s" in README
    table = readme_table("| Synthetic(1, 1), q = 1, round")
    assert table[0][0] == f"Synthetic(1, 1), q = 1, round {result['final_round']:,}"
    assert table[0][4:] == [
        f"rounds to worst 10 % ≥ {level * 100:g} %" for level in result["levels"]
    ]
    rows = {row[0]: row[1:] for row in table[1:]}
    assert sorted(rows) == ["q-FedAvg (E = 1, batch 10)", "q-FedSGD"]
    for rule, label in (("qfedsgd", "q-FedSGD"), ("qffl", "q-FedAvg (E = 1, batch 10)")):
        curves = list(result["curves"][rule].values())
        assert all(points[-1]["round"] == result["final_round"] for points in curves)

        def cell(metric: str, scale: float, digits: int, curves: list = curves) -> str:
            values = scale * np.array([points[-1][metric] for points in curves])
            return f"{values.mean():.{digits}f} ± {values.std():.{digits}f}"

        def reached(level: float, curves: list = curves) -> str:
            firsts = [
                next((p["round"] for p in points if p["worst-10"] >= level), None)
                for points in curves
            ]
            return ", ".join("not reached" if r is None else f"{r:,}" for r in firsts)

        assert rows[label] == [
            cell("average", 100, 1),
            cell("worst-10", 100, 1),
            cell("variance", 1e4, 0),
            *[reached(level) for level in result["levels"]],
        ]


def test_loss_inflation_table_is_the_results_files_two_liars_times_100():
    # docs/results/loss-inflation/results.md (experiments/loss_inflation.py): the README
    # shows, for 2 liars, the clean cell and the x100 cell without and with each defence.
    text = (ROOT / "docs/results/loss-inflation/results.md").read_text()
    two_liars = text[text.index("## 2 liars of 10") :].splitlines()
    cells: dict[tuple[str, str], list[str]] = {}
    for row in markdown_rows([line for line in two_liars if line.startswith("|")])[1:]:
        cells[(row[0], row[1])] = row[2:]  # clean, x10, x100, const-1e5
    readme = readme_table("| rule | clean | ×100 | ×100, loss-clip-mad=3 |")
    assert readme[0] == [
        "rule",
        "clean",
        "×100",
        "×100, loss-clip-mad=3",
        "×100, max-client-share=0.2",
    ]
    assert sorted(row[0] for row in readme[1:]) == sorted({rule for rule, _ in cells})
    for rule, clean, times_100, clipped, capped in readme[1:]:
        assert clean == cells[(rule, "none")][0]
        assert times_100 == cells[(rule, "none")][2]
        assert clipped == cells[(rule, "loss-clip-mad=3")][2]
        assert capped == cells[(rule, "max-client-share=0.2")][2]


def test_baselines_table_is_the_results_file():
    # docs/results/baselines-digits.md (experiments/baselines_digits.py --results ...).
    result = markdown_rows(
        [
            line
            for line in (ROOT / "docs/results/baselines-digits.md").read_text().splitlines()
            if line.startswith("|")
        ]
    )
    assert readme_table("| rule | mean (%) | worst (%) | worst-20% (%) | std (%) |") == result


def test_rcfl_table_is_the_results_file():
    # docs/results/rcfl-synthetic.md (experiments/rcfl_synthetic.py --results ...).
    text = (ROOT / "docs/results/rcfl-synthetic.md").read_text()
    result = markdown_rows([line for line in text.splitlines() if line.startswith("|")])
    assert readme_table("| rule | mean acc (%) | worst-10% (%) | worst-20% (%) |") == result


def test_semivred_digits_paragraph_is_the_results_file():
    # docs/results/semivred-digits.json (experiments/reproduce_qffl_semivred.py semivred
    # --results docs/results/semivred-digits.md): the README's digits VRed / Semi-VRed
    # paragraph, worked from the per-seed final metrics (fractions) with NumPy alone:
    # mean ± population std over seeds in %, and per-seed differences to FedAvg.
    result = json.loads((ROOT / "docs/results/semivred-digits.json").read_text())
    runs = result["results"]
    assert result["seeds"] == [0, 1, 2, 3, 4]
    assert result["config"]["num-server-rounds"] == 100
    paragraph = " ".join(README.split())

    def percent(rule: str, metric: str) -> np.ndarray:
        return 100.0 * np.array([run[metric] for run in runs[rule]])

    def paired(rule: str, metric: str) -> str:
        diff = percent(rule, metric) - percent("FedAvg", metric)
        return f"{diff.mean():+.2f} ± {diff.std():.2f}"

    means = ", ".join(
        f"{rule} {percent(rule, 'acc-mean').mean():.1f} ± {percent(rule, 'acc-mean').std():.1f}"
        for rule in ("FedAvg", "VRed", "Semi-VRed")
    )
    worst = ", ".join(
        f"{percent(rule, 'acc-worst-10').mean():.1f}" for rule in ("FedAvg", "VRed", "Semi-VRed")
    )
    assert f"mean accuracy (%) {means}; worst-10 % {worst}." in paragraph
    for rule in ("VRed", "Semi-VRed"):
        assert (
            f"{rule} − FedAvg = {paired(rule, 'acc-mean')} mean, "
            f"{paired(rule, 'acc-worst-10')} worst-10 %" in paragraph
        )
    assert f"`{result['command']}`" in paragraph
    assert f"{round(result['wall_time_s'])} s on {result['cpu_count']} cores" in paragraph
    assert "| Semi-VRed |" in (ROOT / "docs/results/semivred-digits.md").read_text()
