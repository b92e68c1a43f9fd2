"""The tuned and widened digits tables of the README and the docs site's pages agree with
their docs/results files: the reports' tables, the commands, the tuning and its grid edges.
"""

import json

import pytest

from tests.readme.readme_text import README, ROOT, markdown_rows, readme_table


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
