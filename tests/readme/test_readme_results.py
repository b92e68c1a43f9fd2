"""Figures in the README and the docs site's pages that come from docs/results files agree
with those files.

The pages are the hand-written Markdown of ``docs/site`` (the results pages themselves are
generated from the files when the docs build, so they cannot drift). ``README`` below is
the text of the README and every such page together; a figure may move between them.
"""

import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC_PAGES = sorted(
    page
    for page in (ROOT / "docs" / "site").rglob("*.md")
    if "_generated" not in page.parts and page.name != "README.md"
)
README = "\n\n".join(path.read_text() for path in [ROOT / "README.md", *DOC_PAGES])


def markdown_rows(lines: list[str]) -> list[list[str]]:
    """The cells of a Markdown table's lines (the ``---`` line left out)."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
    return [row for row in rows if set(row[0]) != {"-"}]


def readme_table(first_header_cell_and_next: str) -> list[list[str]]:
    """The README table whose header line starts with the given text."""
    lines = README.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first_header_cell_and_next))
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))
    return markdown_rows(lines[start:end])


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


def runs_csv_cells(folder: str, metric: str) -> dict[str, str]:
    """Each label's ``mean ± std`` over seeds of one metric of a ``runs.csv``, in %.

    Worked from the per-run fractions with NumPy alone (population std, two decimals).
    """
    import csv

    by_label: dict[str, list[float]] = {}
    with (ROOT / "docs/results" / folder / "runs.csv").open() as handle:
        for row in csv.DictReader(handle):
            assert row["status"] == "ok"
            by_label.setdefault(row["label"], []).append(100 * float(row[metric]))
    return {
        label: f"{np.mean(values):.2f} ± {np.std(values):.2f}" for label, values in by_label.items()
    }


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


QFFL_SEEDS = (1, 2, 3, 4, 5)


def test_qffl_table_rounds_the_fractions_of_the_results_csv():
    # docs/results/qffl-synthetic/table_qffl.csv holds fractions (variance: a fraction
    # squared); the README shows them in % (one decimal) and %² (integers).
    import csv

    with (ROOT / "docs/results/qffl-synthetic/table_qffl.csv").open() as handle:
        rows = {row["label"]: row for row in csv.DictReader(handle)}
    readme = {row[0]: row[1:] for row in readme_table("| Synthetic(1, 1) | Average (%) |")}
    for q in ("0", "1"):
        row = rows[f"qffl[q={q}]"]
        assert row["seeds_ok"].split() == [str(seed) for seed in QFFL_SEEDS]

        def cell(metric: str, scale: float, digits: int, row: dict[str, str] = row) -> str:
            mean = round(scale * float(row[f"{metric} mean"]), digits)
            std = round(scale * float(row[f"{metric} std"]), digits)
            return f"{mean:.{digits}f} ± {std:.{digits}f}"

        assert readme[f"ours, q = {q}, round 2,000"][:3] == [
            cell("acc-mean", 100, 1),
            cell("acc-worst-10", 100, 1),
            cell("acc-variance", 1e4, 0),
        ]


def qffl_run(q: int, seed: int, folder: str = "qffl-synthetic") -> list[dict]:
    """The rounds.jsonl lines of one committed q-FFL run."""
    import gzip

    path = ROOT / f"docs/results/{folder}/runs/qffl_q_{q}/seed-{seed}/rounds.jsonl.gz"
    with gzip.open(path, "rt") as handle:
        return [json.loads(line) for line in handle]


def qffl_run_statistics(
    q: int, seed: int, folder: str = "qffl-synthetic"
) -> list[tuple[float, float, float, float]]:
    """(mean %, worst-10 % in %, variance in %², pooled %) of each evaluation of a run.

    Worked from the per-client ``eval_acc`` fractions and test-sample counts in the
    run's ``rounds.jsonl.gz`` with NumPy alone: the unweighted mean, the mean of the
    lowest ``ceil(10 %)`` of clients, the population variance (``fairfl.metrics``
    definitions) and the accuracy over all test samples together.
    """
    statistics = []
    for line in qffl_run(q, seed, folder):
        clients = line.get("clients")
        if not clients:
            continue
        acc = np.array([100.0 * c["eval_acc"] for c in clients])
        samples = np.array([c["num_examples"] for c in clients], dtype=float)
        worst = np.sort(acc)[: int(np.ceil(0.1 * acc.size))]
        pooled = float(np.dot(samples, acc) / samples.sum())
        statistics.append((acc.mean(), worst.mean(), acc.var(), pooled))
    return statistics


def test_qffl_late_round_rows_and_per_seed_figures_come_from_the_runs():
    # The README's pooled column, its "mean of rounds 1,100-2,000" rows and the per-seed
    # figures of the paragraph under the table, from the committed runs.
    readme = {row[0]: row[1:] for row in readme_table("| Synthetic(1, 1) | Average (%) |")}
    last_ten, final = {}, {}
    for q in (0, 1):
        runs = [qffl_run_statistics(q, seed) for seed in QFFL_SEEDS]
        assert all(len(run) == 20 for run in runs)  # every 100 rounds up to 2,000
        last_ten[q] = np.array([np.mean(run[-10:], axis=0) for run in runs])
        final[q] = np.array([run[-1] for run in runs])
        mean, worst, variance, pooled = last_ten[q].mean(axis=0)
        assert readme[f"ours, q = {q}, mean of rounds 1,100–2,000"] == [
            f"{mean:.1f}",
            f"{worst:.1f}",
            f"{variance:.0f}",
            f"{pooled:.1f}",
        ]
        pooled_final = final[q][:, 3]
        assert readme[f"ours, q = {q}, round 2,000"][3] == (
            f"{pooled_final.mean():.1f} ± {pooled_final.std():.1f}"
        )
    paragraph = " ".join(README.split())

    def pairs(values_0: np.ndarray, values_1: np.ndarray, digits: int) -> str:
        return ", ".join(
            f"{a:.{digits}f} → {b:.{digits}f}" for a, b in zip(values_0, values_1, strict=True)
        )

    assert f"every seed ({pairs(final[0][:, 2], final[1][:, 2], 0)} at round 2,000)" in paragraph
    assert f"(pooled, per seed: {pairs(final[0][:, 3], final[1][:, 3], 1)};" in paragraph
    drop = final[0].mean(axis=0) - final[1].mean(axis=0)
    assert f"the average falls {drop[0]:.1f} points and the pooled accuracy {drop[3]:.1f}" in (
        paragraph
    )
    assert not final[0][:, 1].any() and not final[1][:, 1].any()  # worst 10 %: 0 % always
    manifest = json.loads((ROOT / "docs/results/qffl-synthetic/manifest.json").read_text())
    assert manifest["seeds"] == list(QFFL_SEEDS)
    assert f"{round(manifest['wall_time_s']):,} s for the 10 runs on one worker" in paragraph


def test_qffl_worst_devices_claim_comes_from_the_run():
    # "seed 1's ten worst devices (q = 0) hold 10-30 test samples and, drawn in 37-101 of
    # the 2,000 rounds, still score 0 %": from the run's last evaluation and train weights.
    lines = qffl_run(0, 1)
    drawn: dict[int, int] = {}
    for line in lines[1:]:  # round 1 is the census: every device trains
        for weight in line["train"]["weights"]:
            drawn[weight["partition_id"]] = drawn.get(weight["partition_id"], 0) + 1
    last = [line for line in lines if line.get("clients")][-1]
    worst = sorted(last["clients"], key=lambda c: c["eval_acc"])[:10]
    samples = [c["num_examples"] for c in worst]
    counts = [drawn.get(c["partition_id"], 0) for c in worst]
    paragraph = " ".join(README.split())
    assert all(c["eval_acc"] == 0 for c in worst)
    assert (
        f"hold {min(samples)}–{max(samples)} test samples and, drawn in "
        f"{min(counts)}–{max(counts)} of the 2,000 rounds" in paragraph
    )


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


def test_tuned_digits_table_is_the_tuned_reports_table_with_its_command_and_tuning():
    # docs/results/digits-table6-tuned (fairfl compare --recipe digits-table6 --tune ...):
    # the README shows the first five statistics of its table6.md, whose rule labels
    # carry the settings chosen on validation data (tuning.json), and states the
    # command, the tuning and reported seeds, the criterion and the wall time.
    folder = ROOT / "docs/results/digits-table6-tuned"
    report = markdown_rows((folder / "table6.md").read_text().splitlines())
    readme = readme_table("| Rule (chosen setting) | Mean (%) |")
    assert readme[0][1:] == report[0][1:7]
    by_label = {row[0]: row[:7] for row in report[1:]}
    assert sorted(row[0] for row in readme[1:]) == sorted(by_label)
    for row in readme[1:]:
        assert row == by_label[row[0]]
    tuning = json.loads((folder / "tuning.json").read_text())
    assert sorted(c["label"] for c in tuning["chosen"].values()) == sorted(by_label)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["tuning"]["chosen"] == tuning["chosen"]
    assert not set(tuning["tuning_seeds"]) & set(tuning["seeds"])
    assert f"```bash\n{manifest['command']}\n```" in README
    paragraph = " ".join(README.split())
    wall = tuning["wall_time_s"]
    assert (
        f"{round(wall['total']):,} s on {manifest['cpu_count']} cores "
        f"({round(wall['tuning']):,} s tuning, {round(wall['final']):,} s reported runs)"
        in paragraph
    )
    seeds = ", ".join(map(str, tuning["tuning_seeds"]))
    assert f"tuning seeds {seeds}" in paragraph
    assert f"criterion `{tuning['criterion']}`" in paragraph
    assert f"{len(tuning['candidates'])} settings" in paragraph
    baseline = 100 * tuning["baseline_mean"]
    floor = baseline - tuning["tolerance"]
    assert (
        f"FedAvg's validation mean was {baseline:.2f} %, so a setting needed at least "
        f"{floor:.2f} %" in paragraph
    )


def test_tuned_grid_edges_in_the_readme_and_tuning_md_are_those_of_tuning_json(tmp_path):
    # Worked from tuning.json alone: a chosen value is at a grid edge when its axis
    # (a `rule:key=v1,...` grid item) has 3 or more numeric values and the value is the
    # lowest or the highest of them. The README lists every such choice, and the
    # committed tuning.md is what `fairfl report` renders from tuning.json.
    import shutil

    from fairfl.sweep.tune import write_tuning_markdown

    folder = ROOT / "docs/results/digits-table6-tuned"
    tuning = json.loads((folder / "tuning.json").read_text())
    edges = set()
    for item in tuning["grid"]:
        target, values = item.split("=", 1)
        rule, key = target.split(":")
        grid = [float(v) for v in values.split(",")]
        chosen = tuning["chosen"][rule]["overrides"][key]
        if len(set(grid)) >= 3 and chosen in (min(grid), max(grid)):
            edges.add(f"{rule}:{key}={chosen:g}")
    assert edges == {
        "propfair:propfair-m=2",
        "qffl:qffl-q=0.01",
        "qfedsgd:qffl-q=1",
        "vred:vred-beta=1",
        "semivred:semivred-beta=1",
        "fedmgda:fedmgda-epsilon=0.05",
        "fedmgda:fedmgda-global-lr=2",
        "mgda-prox:fedmgda-global-lr=2",
    }
    paragraph = " ".join(README.split())
    start = paragraph.index(f"Here {len(edges)} choices sit at a grid edge (")
    listed = paragraph[start : paragraph.index(")", start)].split("(")[1]
    assert set(listed.replace("`", "").split(", ")) == edges
    committed = (folder / "tuning.md").read_text()
    shutil.copy(folder / "tuning.json", tmp_path)
    assert write_tuning_markdown(tmp_path).read_text() == committed
    assert committed.count("(grid edge)") == 7  # fedmgda's two edges share one row


WIDE = "digits-table6-tuned-wide"


def widened_section() -> str:
    """The "Widened grids" section of the compare how-to, its whitespace collapsed."""
    start = README.index("## Widened grids")
    end = min(i for i in (README.find("\n## ", start + 1), README.find("\n# ", start + 1)) if i > 0)
    return " ".join(README[start:end].split())


def tuning_summary(folder: str) -> dict:
    """The ``tuning.json`` of a committed tuned comparison."""
    return json.loads((ROOT / "docs/results" / folder / "tuning.json").read_text())


def numeric_axes(tuning: dict) -> dict[tuple[str, str], list[float]]:
    """Each ``rule:key=v1,v2,...`` item of a tuning grid as (rule, key) -> its values."""
    axes = {}
    for item in tuning["grid"]:
        target, values = item.split("=", 1)
        rule, key = target.split(":")
        axes[(rule, key)] = [float(v) for v in values.split(",")]
    return axes


def edge_sides(tuning: dict) -> dict[tuple[str, str], str]:
    """The chosen values at an end of an axis of 3 or more values: (rule, key) -> side."""
    sides = {}
    for (rule, key), grid in numeric_axes(tuning).items():
        chosen = tuning["chosen"][rule]["overrides"][key]
        if len(set(grid)) >= 3 and chosen == min(grid):
            sides[(rule, key)] = "lowest"
        elif len(set(grid)) >= 3 and chosen == max(grid):
            sides[(rule, key)] = "highest"
    return sides


def table6_rows(folder: str) -> dict[str, list[str]]:
    """A committed ``table6.md``'s rows by rule (the label's text before ``[``)."""
    text = (ROOT / "docs/results" / folder / "table6.md").read_text()
    return {row[0].split("[")[0]: row for row in markdown_rows(text.splitlines())[1:]}


def test_widened_digits_table_is_the_wide_reports_table_with_its_command_and_wall_time():
    # docs/results/digits-table6-tuned-wide (fairfl compare --recipe digits-table6 --tune
    # --tune-grid ...): the README's "Widened grids" table is the first six statistics of
    # its table6.md; the command, the settings count and the wall times are the manifest's.
    folder = ROOT / "docs/results" / WIDE
    report = markdown_rows((folder / "table6.md").read_text().splitlines())
    readme = readme_table("| Rule (chosen setting, widened grid) | Mean (%) |")
    assert readme[0][1:] == report[0][1:7]
    assert [row[:7] for row in report[1:]] == readme[1:]
    manifest = json.loads((folder / "manifest.json").read_text())
    tuning = tuning_summary(WIDE)
    assert manifest["tuning"] == {k: v for k, v in tuning.items() if k != "candidates"}
    assert f"```bash\n{manifest['command']}\n```" in README
    assert manifest["command"].startswith("fairfl compare --recipe digits-table6 --tune ")
    section = widened_section()
    wall = manifest["tuning"]["wall_time_s"]
    assert (
        f"{len(tuning['candidates'])} settings in {round(wall['total']):,} s on "
        f"{manifest['cpu_count']} cores ({round(wall['tuning']):,} s tuning, "
        f"{round(wall['final']):,} s reported runs), one worker" in section
    )
    assert manifest["workers"] == 1
    seeds = ", ".join(map(str, tuning["tuning_seeds"]))
    assert f"tuning seeds {seeds} and reported seeds {', '.join(map(str, tuning['seeds']))}" in (
        section
    )
    assert f"its validation mean is again {100 * tuning['baseline_mean']:.2f} %" in section


def test_widened_grids_extend_each_paper_grid_edge_and_keep_its_choice():
    # Fair comparison: the widened run tunes exactly the axes whose paper-grid choice was
    # at an edge, each axis holds that choice and reaches past it on the edge's side, the
    # rules are those axes' rules plus the baseline, and everything else (seeds, split,
    # criterion, run config) is the paper-grid run's, so a setting in both runs gives the
    # same validation numbers.
    paper, wide = tuning_summary("digits-table6-tuned"), tuning_summary(WIDE)
    paper_edges = edge_sides(paper)
    wide_axes = numeric_axes(wide)
    assert sorted(wide_axes) == sorted(paper_edges)
    for (rule, key), side in paper_edges.items():
        chosen = paper["chosen"][rule]["overrides"][key]
        grid = wide_axes[(rule, key)]
        assert chosen in grid
        assert min(grid) < chosen if side == "lowest" else max(grid) > chosen
    assert set(wide["chosen"]) == {"fedavg"} | {rule for rule, _ in paper_edges}
    for field in ("criterion", "tolerance", "baseline_rule", "validation_fraction"):
        assert wide[field] == paper[field]
    assert (wide["tuning_seeds"], wide["seeds"]) == (paper["tuning_seeds"], paper["seeds"])
    manifests = [
        json.loads((ROOT / "docs/results" / folder / "manifest.json").read_text())
        for folder in ("digits-table6-tuned", WIDE)
    ]
    assert manifests[0]["base_config"] == manifests[1]["base_config"]
    paper_stats = {c["label"]: (c["mean"], c["worst10"]) for c in paper["candidates"]}
    shared = [c for c in wide["candidates"] if c["label"] in paper_stats]
    assert {paper["chosen"][rule]["label"] for rule in wide["chosen"]} <= {
        c["label"] for c in shared
    }
    for candidate in shared:
        assert (candidate["mean"], candidate["worst10"]) == paper_stats[candidate["label"]]


def test_widened_grid_comparison_and_new_edge_in_the_readme_come_from_the_results(tmp_path):
    # The README's differences are those of the two committed table6.md files' means (in
    # points, to two decimals, − for a loss); its validation figures are tuning.json's;
    # the collapsed seed is runs.csv's; the one new edge is worked from tuning.json as in
    # the paper-grid test above, and q-FFL cannot go below q = 0.
    import csv
    import shutil

    from fairfl.strategies.qffl import QFFL
    from fairfl.sweep.tune import write_tuning_markdown

    section = widened_section()
    paper_rows, wide_rows = table6_rows("digits-table6-tuned"), table6_rows(WIDE)

    def first(cell: str) -> float:
        return float(cell.split(" ± ")[0])

    def points(difference: float) -> str:
        return f"{difference:+.2f}".replace("-", "−")

    for rule, row in wide_rows.items():
        if rule == "fedavg":
            continue
        old = paper_rows[rule]
        mean = points(first(row[1]) - first(old[1]))
        worst = points(first(row[5]) - first(old[5]))
        assert f"`{row[0]}` against `{old[0]}`: mean {mean}, worst 10 % {worst}" in section
    assert (
        f"its pooled accuracy, {wide_rows['fedmgda'][2].split(' ± ')[0]} %, now passes "
        f"FedAvg's {wide_rows['fedavg'][2].split(' ± ')[0]} %" in section
    )
    wide = tuning_summary(WIDE)
    validation = {c["label"]: c for c in wide["candidates"]}

    def val(label: str, statistic: str) -> str:
        return f"{100 * validation[label][statistic]:.2f}"

    assert (
        f"worst 10 % {val('vred[beta=1.5]', 'worst10')} % at β = 1.5 against "
        f"{val('vred[beta=1]', 'worst10')} % at β = 1; {val('semivred[beta=2]', 'worst10')} % "
        f"at β = 2 against {val('semivred[beta=1]', 'worst10')} %" in section
    )
    assert (
        f"β = 3 gives a validation mean of {val('vred[beta=3]', 'mean')} % and "
        f"{val('semivred[beta=3]', 'mean')} %" in section
    )
    floor = wide["baseline_mean"] - wide["tolerance"] / 100
    for rule in ("qffl", "qfedsgd"):
        means = [c["mean"] for c in wide["candidates"] if c["rule"] == rule]
        assert max(means) < floor and wide["chosen"][rule]["mean"] == max(means)
    with (ROOT / "docs/results" / WIDE / "runs.csv").open() as handle:
        seed_1 = next(
            row
            for row in csv.DictReader(handle)
            if row["label"] == "vred[beta=1.5]" and row["seed"] == "1"
        )
    mean, worst = (100 * float(seed_1[m]) for m in ("acc-mean", "acc-worst-10"))
    assert f"collapsed on seed 1 ({mean:.2f} % mean, {worst:.2f} % worst 10 %)" in section
    edges = {
        f"{rule}:{key}={wide['chosen'][rule]['overrides'][key]:g}" for rule, key in edge_sides(wide)
    }
    assert edges == {"qffl:qffl-q=0"}
    assert "One choice is again at a grid edge, `qffl:qffl-q=0`, the lowest value" in section
    with pytest.raises(ValueError, match="q must be >= 0"):
        QFFL(q=-0.001)
    lowest = [validation[f"qffl[q={q}]"] for q in ("0", "0.001", "0.003")]
    assert len({c["worst10"] for c in lowest}) == 1
    spread = max(round(100 * c["mean"], 2) for c in lowest) - min(
        round(100 * c["mean"], 2) for c in lowest
    )
    assert (
        f"q = 0, 0.001 and 0.003 have the same validation worst 10 %, "
        f"{100 * lowest[0]['worst10']:.2f} %, and means {spread:.2f} points apart" in section
    )
    committed = (ROOT / "docs/results" / WIDE / "tuning.md").read_text()
    shutil.copy(ROOT / "docs/results" / WIDE / "tuning.json", tmp_path)
    assert write_tuning_markdown(tmp_path).read_text() == committed
    assert committed.count("(grid edge)") == 1


QFFL_OPTIMUM = ROOT / "docs/results/qffl-synthetic-optimum.json"
#: The README's row names of the optima table, by σ.
QFFL_OPTIMUM_ROWS = {2.0: "σ = 2 (`synthetic`)", 0.75: "σ = 0.75 (`synthetic-1-1-sigma0.75`)"}


def qffl_optimum() -> dict:
    """docs/results/qffl-synthetic-optimum.json (experiments/qffl_synthetic_optimum.py)."""
    return json.loads(QFFL_OPTIMUM.read_text())


def qffl_optimum_runs(result: dict, sigma: float, q: int) -> list[dict]:
    """The runs of one (σ, q), checked to be seeds 1-5 in order."""
    runs = [run for run in result["runs"] if run["sigma"] == sigma and run["q"] == q]
    assert [run["seed"] for run in runs] == list(QFFL_SEEDS)
    return runs


def qffl_optimum_statistics(run: dict) -> dict[str, float]:
    """A run's statistics in % (variance %²) from its per-device correct test counts.

    NumPy alone, q-FFL's definitions: the unweighted device mean, the means of the 10
    lowest and 10 highest of the 100 device accuracies, their population variance, and
    the correct predictions over all test samples together.
    """
    correct = np.array(run["test_correct"], dtype=float)
    samples = np.array(run["test_samples"], dtype=float)
    accuracy = 100.0 * correct / samples
    assert accuracy.size == 100
    return {
        "acc-mean": accuracy.mean(),
        "acc-worst-10": np.sort(accuracy)[:10].mean(),
        "acc-best-10": np.sort(accuracy)[-10:].mean(),
        "acc-variance": accuracy.var(),
        "acc-weighted-mean": 100.0 * correct.sum() / samples.sum(),
    }


def signed(value: float, digits: int) -> str:
    """``+3.4`` / ``−1.1``: a signed number with the README's minus sign."""
    return f"{value:+.{digits}f}".replace("-", "−")


def in_words(items: list[str]) -> str:
    """``a, b and c``."""
    return ", ".join(items[:-1]) + " and " + items[-1]


def test_qffl_optimum_statistics_are_the_per_device_counts_on_the_recipes_test_splits():
    # Each run's stored metrics (fairfl.metrics.fairness_metrics, fractions) are the
    # statistics of its per-device counts, and for σ = 2 the per-device test sizes are
    # those of the committed qffl-synthetic runs (same splits).
    result = qffl_optimum()
    assert result["config"]["seeds"] == list(QFFL_SEEDS)
    assert result["config"]["datasets"] == {"2": "synthetic", "0.75": "synthetic-1-1-sigma0.75"}
    assert len(result["runs"]) == 20
    for run in result["runs"]:
        for metric, value in qffl_optimum_statistics(run).items():
            scale = 1e4 if metric == "acc-variance" else 100.0
            assert scale * run["metrics"][metric] == pytest.approx(value, rel=1e-12, abs=1e-9)
    for seed in QFFL_SEEDS:
        clients = [line for line in qffl_run(0, seed) if line.get("clients")][-1]["clients"]
        sizes = {c["partition_id"]: c["num_examples"] for c in clients}
        for q in (0, 1):
            run = qffl_optimum_runs(result, 2.0, q)[seed - 1]
            assert run["test_samples"] == [sizes[k] for k in range(100)]


def test_qffl_optimum_runs_converged():
    # Every run stopped before maxiter, and continuing it changed no accuracy; the
    # README quotes the largest final gradient norm.
    result = qffl_optimum()
    assert not any(run["reached_maxiter"] for run in result["runs"])
    assert all(run["iterations"] < result["config"]["maxiter"] for run in result["runs"])
    assert all(run["continued"]["accuracies_unchanged"] for run in result["runs"])
    largest = max(run["gradient_norm"] for run in result["runs"])
    assert largest < 1e-6
    paragraph = " ".join(README.split())
    assert f"the largest final gradient norm is {largest:.1e}" in paragraph
    assert "continuing every solution for as many iterations again changes no device's" in (
        paragraph
    )


def test_qffl_optimum_table_and_paragraph_come_from_the_results_file():
    # The README's optima table (mean ± population std over seeds 1-5 of the statistics
    # worked from the per-device counts) and every number of the paragraph under it.
    from fairfl.sweep.recipes import QFFL_SYNTHETIC

    result = qffl_optimum()
    table = readme_table("| Optimum of f_q, test accuracy, mean ± std over seeds |")
    assert table[0][1:] == ["Average (%)", "Worst 10 % (%)", "Variance (%²)", "Pooled (%)"]
    rows = {row[0]: row[1:] for row in table[1:]}
    assert sorted(rows) == sorted(
        f"{name}, q = {q}" for name in QFFL_OPTIMUM_ROWS.values() for q in (0, 1)
    )
    means: dict[tuple[float, int], dict[str, float]] = {}
    for sigma, name in QFFL_OPTIMUM_ROWS.items():
        for q in (0, 1):
            stats = [qffl_optimum_statistics(r) for r in qffl_optimum_runs(result, sigma, q)]

            def cell(metric: str, digits: int, stats: list = stats) -> str:
                values = np.array([s[metric] for s in stats])
                return f"{values.mean():.{digits}f} ± {values.std():.{digits}f}"

            assert rows[f"{name}, q = {q}"] == [
                cell("acc-mean", 1),
                cell("acc-worst-10", 1),
                cell("acc-variance", 0),
                cell("acc-weighted-mean", 1),
            ]
            means[(sigma, q)] = {m: np.mean([s[m] for s in stats]) for m in stats[0]}
    paragraph = " ".join(README.split())
    assert f"```bash\n{result['command']}\n```" in README
    assert f"{round(result['wall_time_s'])} s on {result['cpu_count']} cores" in paragraph

    # "All four optima score above both of the paper's rows on the average and the worst
    # 10 % and below them on the variance": against the recipe's copy of the paper table.
    reference = QFFL_SYNTHETIC.reference[0]
    paper = {
        row["name"]: {
            column: float(value.split(" ± ")[0])
            for column, value in zip(reference["columns"], row["values"], strict=True)
        }
        for row in reference["rows"]
    }
    for mean in means.values():
        for row in paper.values():
            assert mean["acc-mean"] > row["Average"]
            assert mean["acc-worst-10"] > row["Worst 10%"]
            assert mean["acc-variance"] < row["Variance"]
    assert "All four optima score above both of the paper's rows on the average and the " in (
        paragraph
    )

    # Paired by seed, q = 1's optimum minus q = 0's.
    def paired(sigma: float, metric: str) -> np.ndarray:
        zero, one = (
            [qffl_optimum_statistics(r)[metric] for r in qffl_optimum_runs(result, sigma, q)]
            for q in (0, 1)
        )
        return np.array(one) - np.array(zero)

    def listed(values: np.ndarray, digits: int) -> str:
        return ", ".join(signed(v, digits) for v in values)

    worst, variance, average = (
        {sigma: paired(sigma, m) for sigma in QFFL_OPTIMUM_ROWS}
        for m in ("acc-worst-10", "acc-variance", "acc-mean")
    )
    assert (worst[2.0] > 0).all() and (variance[2.0] < 0).all() and (variance[0.75] < 0).all()
    assert (
        f"With σ = 2 it raises the worst 10 % in every seed ({listed(worst[2.0], 1)} points) "
        f"and lowers the variance in every seed ({listed(variance[2.0], 0)} %²), the average "
        f"changing by {signed(average[2.0].mean(), 1)} points; with σ = 0.75 it lowers the "
        f"variance in every seed ({listed(variance[0.75], 0)} %²) and raises the worst 10 % "
        f"in {int((worst[0.75] > 0).sum())} of the 5 ({listed(worst[0.75], 1)}), the average "
        f"changing by {signed(average[0.75].mean(), 1)} (the paper: "
        f"{signed(paper['q = 1']['Worst 10%'] - paper['q = 0']['Worst 10%'], 1)} worst 10 %, "
        f"{signed(paper['q = 1']['Variance'] - paper['q = 0']['Variance'], 0)} %², "
        f"{signed(paper['q = 1']['Average'] - paper['q = 0']['Average'], 1)} average)." in paragraph
    )

    # Device sizes, per seed.
    def sizes(sigma: float) -> str:
        rows = [s for s in result["sizes"] if s["sigma"] == sigma]
        assert [s["seed"] for s in rows] == list(QFFL_SEEDS)
        totals = in_words([f"{s['total_samples']:,}" for s in rows])
        largest = in_words([f"{s['largest_samples']:,}" for s in rows])
        shares = in_words([f"{100 * s['largest_samples'] / s['total_samples']:.1f}" for s in rows])
        return (
            f"hold {totals}{' samples' if sigma == 2.0 else ''}, the largest device {largest}"
            f"{' of them' if sigma == 2.0 else ''} ({shares} %)"
        )

    assert f"with σ = 2 the federations {sizes(2.0)}; with σ = 0.75 they {sizes(0.75)}." in (
        paragraph
    )


def test_qffl_optimum_report_is_what_the_experiment_renders_from_the_json():
    # docs/results/qffl-synthetic-optimum.md is render_markdown of the committed JSON.
    import importlib.util
    import sys

    name = "qffl_synthetic_optimum"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(
            name, ROOT / "experiments" / "qffl_synthetic_optimum.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # its dataclass looks the module up there
        spec.loader.exec_module(module)
    committed = QFFL_OPTIMUM.with_suffix(".md").read_text()
    assert module.render_markdown(qffl_optimum()) == committed


QFFL_LIGHT = "qffl-synthetic-light"


def qffl_light_manifest() -> dict:
    """The light-tailed comparison's manifest (its seeds, runs and their wall times)."""
    return json.loads((ROOT / f"docs/results/{QFFL_LIGHT}/manifest.json").read_text())


def qffl_light_statistics(q: int) -> np.ndarray:
    """(seeds, 40 evaluations, 4) statistics of the committed light-tailed runs of q.

    Evaluations every 500 rounds up to 20,000; the statistics of
    :func:`qffl_run_statistics` (mean, worst 10 %, variance, pooled).
    """
    seeds = qffl_light_manifest()["seeds"]
    runs = np.array([qffl_run_statistics(q, seed, QFFL_LIGHT) for seed in seeds])
    assert runs.shape == (len(seeds), 40, 4)
    return runs


def test_qffl_light_table_and_paragraph_come_from_the_runs_and_the_optima():
    # The σ = 0.75 table: rounds 2,000 and 20,000 (mean ± population std over seeds), the
    # mean of the last four evaluations, and the optimum of f_q on the same devices and
    # splits (docs/results/qffl-synthetic-optimum.json); then the paragraph's figures.
    table = readme_table("| Synthetic(1, 1), σ = 0.75, mean ± std over seeds |")
    assert table[0][1:] == ["Average (%)", "Worst 10 % (%)", "Variance (%²)", "Pooled (%)"]
    rows = {row[0]: row[1:] for row in table[1:]}
    optimum = qffl_optimum()
    digits = (1, 1, 0, 1)

    def cells(values: np.ndarray) -> list[str]:
        return [
            f"{m:.{d}f} ± {s:.{d}f}"
            for m, s, d in zip(values.mean(axis=0), values.std(axis=0), digits, strict=True)
        ]

    manifest = qffl_light_manifest()
    assert manifest["seeds"] == list(QFFL_SEEDS)
    runs, optima = {}, {}
    for q in (0, 1):
        runs[q] = qffl_light_statistics(q)
        stats = [
            qffl_optimum_statistics(qffl_optimum_runs(optimum, 0.75, q)[seed - 1])
            for seed in manifest["seeds"]
        ]
        optima[q] = np.array(
            [
                [s[m] for m in ("acc-mean", "acc-worst-10", "acc-variance", "acc-weighted-mean")]
                for s in stats
            ]
        )
        assert rows[f"ours, q = {q}, round 2,000"] == cells(runs[q][:, 3])
        assert rows[f"ours, q = {q}, round 20,000"] == cells(runs[q][:, -1])
        late = runs[q][:, -4:].mean(axis=1).mean(axis=0)
        assert rows[f"ours, q = {q}, mean of rounds 18,500–20,000"] == [
            f"{v:.{d}f}" for v, d in zip(late, digits, strict=True)
        ]
        assert rows[f"optimum of f_{q}"] == cells(optima[q])
    assert len(rows) == 8

    # The runs' devices and test splits are the optimum's: same test sizes per device.
    for seed in manifest["seeds"]:
        clients = [line for line in qffl_run(0, seed, QFFL_LIGHT) if line.get("clients")][-1]
        sizes = {c["partition_id"]: c["num_examples"] for c in clients["clients"]}
        run = qffl_optimum_runs(optimum, 0.75, 0)[seed - 1]
        assert run["test_samples"] == [sizes[k] for k in range(100)]

    paragraph = " ".join(README.split())
    times = [run["wall_time_s"] for run in manifest["runs"]]
    assert all(time > 0 for time in times)
    # "seeds 4 and 5 ... added to seeds 1–3 by running the same command again with
    # --skip-existing": the manifest of that second run skipped seeds 1-3 and ran 4 and 5.
    statuses = {run["dir"]: run["status"] for run in manifest["runs"]}
    assert statuses == {
        f"runs/qffl_q_{q}/seed-{seed}": "skipped" if seed <= 3 else "ok"
        for q in (0, 1)
        for seed in QFFL_SEEDS
    }
    assert manifest["command"].endswith("--skip-existing")
    assert (
        "seeds 1–5, evaluated every 500 rounds" in paragraph
        and "seeds 4 and 5 beside a run of the whole test suite; they were added to seeds 1–3 "
        "by running the same command again with `--skip-existing`"
        in paragraph
    )
    assert f"each run took {min(times):,.0f}–{max(times):,.0f} s" in paragraph
    assert (
        f"```bash\nfairfl compare --recipe {QFFL_LIGHT} --out docs/results/{QFFL_LIGHT} "
        "--no-models --compress-runs\n```" in README
    )

    final = {q: runs[q][:, -1] for q in (0, 1)}

    def pairs(metric: int, digits: int) -> str:
        return ", ".join(
            f"{a:.{digits}f} → {b:.{digits}f}"
            for a, b in zip(final[0][:, metric], final[1][:, metric], strict=True)
        )

    assert (final[1][:, 1] > final[0][:, 1]).all()  # worst 10 % up in every seed
    assert (final[1][:, 2] < final[0][:, 2]).all()  # variance down in every seed
    assert f"raises the worst 10 % in every seed ({pairs(1, 1)})" in paragraph
    assert f"lowers the variance in every seed ({pairs(2, 0)})" in paragraph
    change = final[1].mean(axis=0) - final[0].mean(axis=0)
    assert (
        f"at a cost of {-change[0]:.1f} points of average and {-change[3]:.1f} of pooled accuracy"
        in paragraph
    )
    gap = {q: optima[q].mean(axis=0) - final[q].mean(axis=0) for q in (0, 1)}
    assert (
        f"the average {gap[0][0]:.1f} and {gap[1][0]:.1f} points below it and the worst 10 % "
        f"{gap[0][1]:.1f} and {gap[1][1]:.1f}" in paragraph
    )
    # From round 6,000 on, the seed-mean worst 10 % of each q stays within a band.
    for q in (0, 1):
        band = runs[q][:, 11:, 1].mean(axis=0)
        assert f"q = {q} between {band.min():.1f} and {band.max():.1f} %" in paragraph
