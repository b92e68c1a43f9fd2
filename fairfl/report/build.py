"""Build a comparison's tables, plots and ``report.md`` from its saved runs.

:func:`build_report` reads only files (``manifest.json`` and each run's
``rounds.jsonl``), so ``fairfl report <dir>`` rebuilds everything without re-running.
Files written into the folder:

- ``table6.md`` / ``table6.csv``: Malekmohammadi & Yu's Table 6 columns and the pooled accuracy,
  mean ± std over seeds;
- ``table_<columns>.md`` / ``.csv``: another column set when one was chosen
  (``qffl``: the q-FFL paper's Average, Worst 10%, Best 10%, Variance);
- ``table2.md`` / ``table2.csv``: Malekmohammadi & Yu's Table 2 against the baseline;
- ``paired.md`` / ``paired.csv``: each rule minus the baseline on the same seed, its 95 %
  interval and paired t-test (:mod:`fairfl.report.paired`; 3 seeds or more);
- ``runs.csv``: every run's final fairness metrics;
- ``curves.png``, ``distribution.png``, ``tradeoff.png``, ``weights.png``;
- ``reference.md``: the paper's numbers next to ours, when the comparison names them;
- ``report.md``: all of the above, linked.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fairfl.metrics import PERCENT
from fairfl.report import paired, plots, tables
from fairfl.report.results import (
    RunResult,
    group_by_label,
    load_runs,
    read_manifest,
    rounds_path,
)

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Report:
    """What :func:`build_report` wrote, and the numbers behind it."""

    folder: Path
    files: dict[str, Path]
    summary: list[tables.SummaryRow]
    table2: list[tables.Table2Row]
    baseline: str | None
    reference_markdown: str

    def text(self) -> str:
        """The main table, then the paper comparison, as Markdown (for the console)."""
        parts = [(self.folder / "table6.md").read_text(encoding="utf-8")]
        for name, path in self.files.items():
            if name.startswith("table_") and name.endswith("md"):
                parts.append(path.read_text(encoding="utf-8"))
        if self.reference_markdown:
            parts.append(self.reference_markdown)
        return "\n".join(parts)


def default_baseline(groups: Mapping[str, Sequence[RunResult]]) -> str | None:
    """``"fedavg"`` if present, else the first variant of rule ``fedavg``, else None."""
    if "fedavg" in groups:
        return "fedavg"
    return next((label for label, runs in groups.items() if runs[0].rule == "fedavg"), None)


def default_weights_label(
    groups: Mapping[str, Sequence[RunResult]], baseline: str | None
) -> str | None:
    """The first variant other than the baseline that recorded aggregation weights."""
    for label, runs in groups.items():
        if label != baseline and any(
            (entry.get("train") or {}).get("weights") for run in runs for entry in run.rounds
        ):
            return label
    return None


def runs_csv(runs: Sequence[RunResult]) -> str:
    """Every run's final fairness metrics, one line per run."""
    metric_names: list[str] = []
    for run in runs:
        for name in run.final_metrics():
            if name not in metric_names:
                metric_names.append(name)
    header = ["label", "rule", "seed", "rounds", "status", *metric_names]
    body = []
    for run in runs:
        final = run.final_metrics()
        status = "ok" if run.ok else (run.error or "no finite accuracies")
        evaluated = run.evaluated_rounds()
        body.append(
            [
                run.label,
                run.rule,
                run.seed,
                evaluated[-1]["round"] if evaluated else "",
                status,
                *[_cell(final.get(name)) for name in metric_names],
            ]
        )
    return tables.csv_text(header, body)


def _cell(value: Any) -> Any:
    return "" if value is None or (isinstance(value, float) and not math.isfinite(value)) else value


def reference_markdown(
    reference: Sequence[Mapping[str, Any]],
    summary: Sequence[tables.SummaryRow],
    table2_rows: Sequence[tables.Table2Row],
    columns: Sequence[tables.Column],
    baseline: str | None = None,
) -> str:
    """The paper's numbers with ours on the line below each paper row.

    Each reference table is ``{"title", "kind": "summary" | "table2", "columns",
    "rows": [{"name", "label", "values"}], "note"}``; ``label`` names our variant to
    show under the paper row (none: the paper row alone). ``summary`` columns are
    titles of ``columns`` (or Table 6's); ``table2`` ones are the three Table 2 cells.
    The papers' values are in percent, so ours are shown in percent too (the unit of
    each column, %² for a variance), and each column header says which. A ``"question"``
    entry is answered from our numbers (:func:`question_markdown`).
    """
    ours = {row.label: row for row in summary}
    ours2 = {row.label: row for row in table2_rows}
    by_title = {c.title: c for c in (*tables.TABLE6_COLUMNS, *columns)}
    parts = []
    for table in reference:
        if table["kind"] == "question":
            parts.append(question_markdown(table, summary, by_title, baseline))
            continue
        titles = list(table["columns"])
        shown = [by_title[t].header if t in by_title else t for t in titles]
        header = ["Rule", "Source", *(shown if table["kind"] == "summary" else titles)]
        body = []
        for row in table["rows"]:
            body.append([row["name"], "paper", *row["values"]])
            label = row.get("label")
            if table["kind"] == "summary" and label in ours:
                stats = ours[label].stats
                cells = [
                    by_title[t].cell(stats[by_title[t].metric])
                    if by_title[t].metric in stats
                    else "n/a"
                    for t in titles
                ]
                body.append([label, "ours", *cells])
            elif table["kind"] == "table2" and label in ours2:
                cells = tables.table2_cells(ours2[label])
                body.append([label, "ours", *cells[: len(titles)]])
        parts.append(f"### {table['title']}\n\n" + tables.markdown_table(header, body))
        if table.get("note"):
            parts.append(table["note"] + "\n")
    return "\n".join(parts)


def question_markdown(
    question: Mapping[str, Any],
    summary: Sequence[tables.SummaryRow],
    by_title: Mapping[str, tables.Column],
    baseline: str | None,
) -> str:
    """A comparison's question answered from its summary, so a rerun rewrites the answer.

    ``question`` is ``{"title", "kind": "question", "lift": {"column", "above",
    "source"}, "keep": {"column"}, "pairs": [[lift column, keep column], ...], "note"}``:
    a variant answers yes when its mean ``lift`` column is above ``above`` (percent, a
    published number) and its mean ``keep`` column is not below the ``baseline``
    variant's. ``pairs`` adds other column pairs (a personalised model's worst and pooled
    accuracy), held against the same two numbers; a variant without numbers in a pair
    has no row for it. "Clear" marks a lift whose mean minus one seed sd is still above ``above``.
    """
    above = float(question["lift"]["above"])
    pairs = [(question["lift"]["column"], question["keep"]["column"])]
    pairs += [(lift, keep) for lift, keep in question.get("pairs", ())]
    header = [
        "Rule",
        "Model",
        f"{pairs[0][0]} (%)",
        f"{pairs[0][1]} (%)",
        f"Worst above {above:g}",
        f"Keeps {baseline}'s {pairs[0][1].lower()} (Δ, points)",
    ]
    # Every model, personal ones too, is held against the baseline's global accuracy.
    base = {row.label: row for row in summary}.get(baseline or "")
    stat = base.stats.get(by_title[pairs[0][1]].metric) if base is not None else None
    floor = stat.mean if stat is not None and stat.count else math.nan
    body: list[list[str]] = []
    yes: list[str] = []
    for lift, keep in pairs:
        model = "personal" if lift != pairs[0][0] else "global"
        for row in summary:
            worst = row.stats.get(by_title[lift].metric)
            pooled = row.stats.get(by_title[keep].metric)
            if worst is None or pooled is None or worst.count == 0 or pooled.count == 0:
                continue
            lifts = PERCENT * worst.mean > above
            clear = PERCENT * (worst.mean - worst.std) > above
            keeps = pooled.mean >= floor
            change = tables.Stat(pooled.mean - floor, 0.0, 1).format(signed=True, scale=PERCENT)
            body.append(
                [
                    row.label,
                    model,
                    worst.format(scale=PERCENT),
                    pooled.format(scale=PERCENT),
                    ("yes, clear" if clear else "yes, within 1 sd") if lifts else "no",
                    f"{'yes' if keeps else 'no'} ({change})",
                ]
            )
            if lifts and keeps:
                yes.append(
                    f"`{row.label}` ({model} model: worst {worst.format(scale=PERCENT)}, "
                    f"{keep.lower()} {pooled.format(scale=PERCENT)})"
                )
    source = question["lift"]["source"]
    answer = (
        f"**Yes** for {len(yes)} of {len(body)} rows: " + "; ".join(yes) + "."
        if yes
        else f"**No**: none of the {len(body)} rows does both."
    )
    text = [
        f"### {question['title']}",
        "",
        f"Judged on the means over seeds: worst above {above:g} ({source}) and "
        f"{pairs[0][1].lower()} not below `{baseline}`'s "
        f"{PERCENT * floor:.2f} % on the same definition. {answer}",
        "",
        tables.markdown_table(header, sorted(body, key=_worst_first)),
    ]
    if question.get("note"):
        text.append(question["note"] + "\n")
    return "\n".join(text)


def _worst_first(cells: Sequence[str]) -> float:
    """Sort key of an answer row: highest worst-centre mean first."""
    return -float(cells[2].split(" ")[0])


def build_report(
    folder: Path,
    *,
    baseline: str | None = None,
    weights_label: str | None = None,
    columns: str | None = None,
    title: str | None = None,
) -> Report:
    """Write the tables, plots and ``report.md`` of a comparison folder.

    Parameters
    ----------
    folder : Path
        A ``fairfl compare`` output folder (or any folder with ``rounds.jsonl`` files).
    baseline : str | None
        Variant label Table 2 compares against (default: the manifest's, else
        :func:`default_baseline`). No Table 2 without one.
    weights_label : str | None
        Variant whose aggregation weights are plotted (first seed); default: the
        manifest's, else :func:`default_weights_label`.
    columns : str | None
        An extra column set of :data:`fairfl.report.tables.COLUMN_SETS` besides Table 6
        (default: the manifest's).
    title : str | None
        Report title (default: the manifest's, else the folder name).

    Raises
    ------
    ValueError
        If ``baseline``, ``weights_label`` or ``columns`` names nothing in the folder.
    """
    manifest = read_manifest(folder) or {}
    runs = load_runs(folder)
    groups = group_by_label(runs)
    baseline = baseline or manifest.get("baseline") or default_baseline(groups)
    if baseline is not None and baseline not in groups:
        raise ValueError(f"baseline must be one of {list(groups)}, got {baseline!r}")
    weights_label = weights_label or manifest.get("weights_label")
    if weights_label is not None and weights_label not in groups:
        raise ValueError(f"weights label must be one of {list(groups)}, got {weights_label!r}")
    weights_label = weights_label or default_weights_label(groups, baseline)
    columns = columns or manifest.get("columns") or "table6"
    if columns not in tables.COLUMN_SETS:
        raise ValueError(f"columns must be one of {sorted(tables.COLUMN_SETS)}, got {columns!r}")
    column_set = tables.COLUMN_SETS[columns]
    title = title or manifest.get("title") or folder.resolve().name

    files: dict[str, Path] = {}

    def write(name: str, text: str) -> None:
        path = folder / name
        path.write_text(text, encoding="utf-8")
        files[name] = path

    # Table 6, with ε beside accuracy and fairness when a run has DP.
    private = any("dp-epsilon" in run.final_metrics() for run in runs)
    main_columns = (*tables.TABLE6_COLUMNS, *((tables.EPSILON_COLUMN,) if private else ()))
    summary = tables.summarize(groups, main_columns)
    write("table6.md", tables.table6_markdown(summary, main_columns))
    write("table6.csv", tables.table6_csv(summary, main_columns))
    if columns != "table6":
        extra = tables.summarize(groups, column_set)
        write(f"table_{columns}.md", tables.table6_markdown(extra, column_set))
        write(f"table_{columns}.csv", tables.table6_csv(extra, column_set))
        summary_for_reference = [
            dataclasses.replace(row, stats={**row.stats, **e.stats})
            for row, e in zip(summary, extra, strict=True)
        ]
    else:
        summary_for_reference = summary
    table2_rows: list[tables.Table2Row] = []
    if baseline is not None and len(groups) > 1:
        table2_rows = tables.table2(groups, baseline)
        write("table2.md", tables.table2_markdown(table2_rows, baseline))
        write("table2.csv", tables.table2_csv(table2_rows))
    pairs = paired.paired_rows(groups, baseline) if baseline is not None else []
    if any(d is not None for row in pairs for d in row.differences.values()):
        write("paired.md", paired.paired_markdown(pairs, baseline or ""))
        write("paired.csv", paired.paired_csv(pairs))
    write("runs.csv", runs_csv(runs))

    plots.plot_curves(groups, folder / "curves.png")
    files["curves.png"] = folder / "curves.png"
    plots.plot_distribution(groups, folder / "distribution.png")
    files["distribution.png"] = folder / "distribution.png"
    plots.plot_tradeoff(groups, folder / "tradeoff.png")
    files["tradeoff.png"] = folder / "tradeoff.png"
    if weights_label is not None:
        chosen = next((run for run in groups[weights_label] if run.ok), groups[weights_label][0])
        same_seed = [r for r in groups.get(baseline or "", []) if r.seed == chosen.seed]
        reference_run = same_seed[0] if same_seed and baseline != weights_label else None
        if plots.plot_weights(chosen, folder / "weights.png", reference=reference_run):
            files["weights.png"] = folder / "weights.png"

    reference = manifest.get("reference") or []
    reference_md = reference_markdown(
        reference, summary_for_reference, table2_rows, column_set, baseline
    )
    if reference_md:
        write("reference.md", reference_md)
    write(
        "report.md",
        _report_markdown(
            folder,
            title,
            manifest,
            runs,
            groups,
            files,
            baseline,
            weights_label,
            columns,
            reference_md,
        ),
    )
    logger.info("build_report: wrote %d files to %s", len(files), folder)
    return Report(
        folder=folder,
        files=files,
        summary=summary,
        table2=table2_rows,
        baseline=baseline,
        reference_markdown=reference_md,
    )


def _report_markdown(
    folder: Path,
    title: str,
    manifest: Mapping[str, Any],
    runs: Sequence[RunResult],
    groups: Mapping[str, Sequence[RunResult]],
    files: Mapping[str, Path],
    baseline: str | None,
    weights_label: str | None,
    columns: str,
    reference_md: str,
) -> str:
    lines = [f"# {title}", ""]
    if manifest.get("description"):
        lines += [manifest["description"], ""]
    if manifest.get("command"):
        lines += ["Command:", "", "```", manifest["command"], "```", ""]
    config = manifest.get("base_config") or {}
    if config:
        settings = ", ".join(f"`{k}={v}`" for k, v in config.items())
        lines += [f"Shared run config: {settings}.", ""]
    seeds = sorted({run.seed for run in runs})
    failed = [run for run in runs if not run.ok]
    timing = []
    if manifest.get("wall_time_s") is not None:
        timing.append(f"wall time {manifest['wall_time_s']:.0f} s")
    if manifest.get("cpu_time_s") is not None:
        timing.append(f"CPU time {manifest['cpu_time_s']:.0f} s (this process and its workers)")
    if manifest.get("engine"):
        timing.append(f"engine `{manifest['engine']}`")
    if manifest.get("workers"):
        timing.append(f"{manifest['workers']} worker process(es)")
    if manifest.get("cpu_count"):
        timing.append(f"{manifest['cpu_count']} CPUs")
    if manifest.get("load_average_before"):
        timing.append(
            "load average (1/5/15 min) before "
            + "/".join(map(str, manifest["load_average_before"]))
            + (
                ", after " + "/".join(map(str, manifest["load_average_after"]))
                if manifest.get("load_average_after")
                else ""
            )
        )
    lines += [
        f"{len(groups)} rule variants x {len(seeds)} seeds ({', '.join(map(str, seeds))}) = "
        f"{len(runs)} runs; {len(failed)} failed."
        + (f" Runs: {'; '.join(timing)}." if timing else ""),
        "",
        _test_sizes_line(runs),
        "",
        "Statistics of the final global model over the clients' local test accuracies "
        "(%), mean ± std over seeds (population std); `Seeds` counts the seeds that "
        "finished with finite accuracies. `Mean` is the unweighted mean over clients, "
        "`Pooled` the accuracy over all clients' test samples together (correct "
        "predictions / test samples, so large clients weigh more). Definitions: "
        "`fairfl/metrics.py`, after Malekmohammadi & Yu, *Semi-Variance Reduction for Fair "
        "Federated Learning* (Table 6, App. B.3) and Li et al., *Fair Resource Allocation "
        "in Federated Learning* (ICLR 2020).",
        "",
        "## Table 6: client accuracy statistics",
        "",
        (files["table6.md"]).read_text(encoding="utf-8"),
        "CSV (fractions in [0, 1], as every results file): [table6.csv](table6.csv). "
        "Per run: [runs.csv](runs.csv).",
        "",
    ]
    if columns != "table6" and f"table_{columns}.md" in files:
        lines += [
            f"## Columns `{columns}`",
            "",
            files[f"table_{columns}.md"].read_text(encoding="utf-8"),
            f"CSV: [table_{columns}.csv](table_{columns}.csv).",
            "",
        ]
    if "table2.md" in files:
        lines += [
            f"## Table 2: who gains and who loses against `{baseline}`",
            "",
            "Runs paired by seed (same partition, split and initial model) and clients by "
            f"partition id. Suffering clients are below `{baseline}`'s mean accuracy on that "
            "seed, well-performing ones above it. Share in % of the group, mean ± std over "
            "seeds; the mean accuracy change of the group in parentheses, in percentage "
            "points. The overall changes are those of the unweighted client mean and of "
            "the pooled accuracy. [table2.csv](table2.csv) holds the same as fractions.",
            "",
            files["table2.md"].read_text(encoding="utf-8"),
            "CSV: [table2.csv](table2.csv).",
            "",
        ]
    if "paired.md" in files:
        lines += [
            f"## Against `{baseline}`, paired by seed",
            "",
            f"Per rule, the mean over seeds of its difference from `{baseline}` on the same "
            "seed (same partition, split and initial model), in percentage points, with the "
            "95 % Student-t interval of that mean and the two-sided paired t-test's p-value "
            f"({paired.MIN_SEEDS} or more seeds with finite values; '-' otherwise). With few "
            "seeds the intervals are wide: an interval that holds 0 does not show a "
            "difference. [paired.csv](paired.csv) holds the same as fractions.",
            "",
            files["paired.md"].read_text(encoding="utf-8"),
        ]
    if reference_md:
        lines += ["## The papers' numbers next to ours", "", reference_md, ""]
    lines += [
        "## Plots",
        "",
        "Mean and worst-10% client accuracy per round (mean over seeds; ± std shaded for up "
        "to 6 variants):",
        "",
        "![curves](curves.png)",
        "",
        "Final client accuracies, sorted (rank-wise mean over seeds):",
        "",
        "![distribution](distribution.png)",
        "",
        "Mean against worst-10% client accuracy (mean over seeds, ± std bars; up and to the "
        "right is better on both):",
        "",
        "![trade-off](tradeoff.png)",
        "",
    ]
    if "weights.png" in files:
        lines += [
            f"Aggregation weights λ per client and round of `{weights_label}` (first seed):",
            "",
            "![weights](weights.png)",
            "",
        ]
    if failed:
        lines += ["## Failed runs", ""]
        lines += [f"- `{run.label}` seed {run.seed}: {run.error}" for run in failed]
        lines.append("")
    lines += [
        "## Runs",
        "",
        "Each run's `rounds.jsonl` (every client's evaluation per round, aggregation "
        "weights, rule diagnostics) and `summary.json`:",
        "",
    ]
    for label, group in groups.items():
        links = ", ".join(
            f"[seed {run.seed}]({Path(os.path.relpath(rounds_path(run.path), folder)).as_posix()})"
            for run in group
        )
        lines.append(f"- `{label}`: {links}")
    lines += ["", "Rebuild this report without re-running: `fairfl report <this folder>`.", ""]
    return "\n".join(lines)


def _test_sizes_line(runs: Sequence[RunResult]) -> str:
    """How many test samples the clients have (DESIGN: small test sets are noisy)."""
    sizes = [
        int(client["num_examples"])
        for run in runs
        for client in (run.evaluated_rounds()[-1:] or [{}])[0].get("clients", [])
        if client.get("num_examples") is not None
    ]
    if not sizes:
        return "Test samples per client: not recorded."
    ordered = sorted(sizes)
    median = ordered[len(ordered) // 2]
    return (
        f"Test samples per client (final round, all runs): min {ordered[0]}, "
        f"median {median}, max {ordered[-1]}; one sample is {100.0 / ordered[0]:.1f} "
        "accuracy points on the smallest client."
    )
