"""Comparison tables: Malekmohammadi & Yu's Table 6 and Table 2, as numbers, Markdown and CSV.

Malekmohammadi & Yu, "Semi-Variance Reduction for Fair Federated Learning" (arXiv:2406.16193,
2024; spec ``docs/specs/spec-vred-qffl.md`` §13, §14):

- **Table 6**: per rule, the fairness statistics of the final global model over the
  clients' local test accuracies (Mean, Std, Worst, Worst 10%, Worst 20%, Best 10%;
  definitions in :mod:`fairfl.metrics`), each as mean ± std over seeds. Beside the
  paper's columns, "Pooled" is the accuracy over all clients' test samples together,
  ``Σ_i n_i a_i / Σ_i n_i`` = correct predictions / test samples (``acc-weighted-mean``),
  which most federated code prints as "the" accuracy: next to the unweighted client
  Mean it shows whether a rule buys the small clients' accuracy with the large ones'.
- **Table 2**: per rule X against FedAvg on the same seed (same partition, split and
  initial model), clients paired by partition id. Suffering clients
  ``S = {i : a_i^FedAvg < mean^FedAvg}``, well-performing ``W = {i : a_i^FedAvg >
  mean^FedAvg}``; "improved" is the share of S with ``a_i^X > a_i^FedAvg`` and the mean
  change over S, "degraded" the share of W with ``a_i^X < a_i^FedAvg`` and the mean
  change over W, "overall" ``mean^X - mean^FedAvg`` and "overall pooled"
  ``pooled^X - pooled^FedAvg`` (the change of the accuracy over all test samples);
  each as mean ± std over seeds.

Units: the numbers (:class:`SummaryRow`, :class:`Table2Row`) and the CSV files are
fractions, as every results file (accuracies and client shares in [0, 1], accuracy
changes in [-1, 1], the variance a fraction squared). The Markdown tables are for people
and show percent, as the papers' tables do, with the unit in every column header.

Notes
-----
The std over seeds is the population std (ddof = 0), as ``np.std`` in the paper's code
(C-pf ``utils/io.py``). A client exactly at FedAvg's mean is in neither S nor W (the
paper leaves the tie open). Seeds whose run failed or has a non-finite statistic are
left out of that row's mean ± std and counted in its ``seeds`` column (``2/3``).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from fairfl.metrics import PERCENT
from fairfl.report.results import RunResult


@dataclass(frozen=True)
class Column:
    """A table column: title, :func:`fairfl.metrics.fairness_metrics` key, shown unit.

    The unit is the one the Markdown table shows the column in: ``"%"``, ``"%²"`` for a
    variance, or ``""`` for a unitless index shown as stored (Jain's). The numbers
    themselves are fractions. ``digits`` after the decimal point.
    """

    title: str
    metric: str
    unit: str = "%"
    digits: int = 2

    @property
    def scale(self) -> float:
        """Factor from the stored fraction to the shown unit (100, 100² for %², 1 for none)."""
        return {"%": PERCENT, "%²": PERCENT**2, "": 1.0}[self.unit]

    @property
    def header(self) -> str:
        """The Markdown column header, with its unit: ``"Worst 10% (%)"``, ``"Jain"``."""
        return f"{self.title} ({self.unit})" if self.unit else self.title

    def cell(self, stat: Stat) -> str:
        """``stat`` in this column's unit and digits: ``"43.45 ± 0.60"``."""
        return stat.format(self.digits, scale=self.scale)


#: Malekmohammadi & Yu's Table 6 columns, with the pooled accuracy after the (unweighted) Mean.
TABLE6_COLUMNS: tuple[Column, ...] = (
    Column("Mean", "acc-mean"),
    Column("Pooled", "acc-weighted-mean"),
    Column("Std", "acc-std"),
    Column("Worst", "acc-worst"),
    Column("Worst 10%", "acc-worst-10"),
    Column("Worst 20%", "acc-worst-20"),
    Column("Best 10%", "acc-best-10"),
    # Jain, Chiu and Hawe's index (Σa)² / (n Σa²) (DEC-TR-301, 1984): 1 when every client
    # is equally accurate, 1/n when one client has all the accuracy.
    Column("Jain", "jain-index", unit="", digits=3),
)

#: ε at the run's δ after its last round (runs with ``dp``; :mod:`fairfl.privacy`).
EPSILON_COLUMN = Column("ε", "dp-epsilon", unit="")

#: The q-FFL paper's (Li et al. 2020) table columns; Variance in %² as the paper shows it.
QFFL_COLUMNS: tuple[Column, ...] = (
    Column("Average", "acc-mean"),
    Column("Worst 10%", "acc-worst-10"),
    Column("Best 10%", "acc-best-10"),
    Column("Variance", "acc-variance", unit="%²"),
)

#: Group fairness over a sensitive attribute (issue 37; runs whose clients send
#: ``group-counts``): pooled accuracy and the four differences of
#: :mod:`fairfl.contract.sensitive`, lower is fairer.
GROUP_COLUMNS: tuple[Column, ...] = (
    Column("Accuracy", "group-acc"),
    Column("DP gap", "dp-diff"),
    Column("EO gap", "eo-diff"),
    Column("EOpp gap", "eop-diff"),
    Column("Acc parity gap", "acc-parity-diff"),
)

#: Ditto's personalised columns: the q-FFL-style statistics of the global model, then
#: those of the clients' personal models (NaN for rules without personal models).
PERSONAL_COLUMNS: tuple[Column, ...] = (
    *QFFL_COLUMNS,
    Column("Personal average", "personal-acc-mean"),
    Column("Personal worst 10%", "personal-acc-worst-10"),
    Column("Personal variance", "personal-acc-variance", unit="%²"),
)

#: FLamby's Fed-Heart-Disease table (Ogier du Terrail et al., NeurIPS 2022 Datasets and
#: Benchmarks): each hospital's test accuracy by client id, the worst hospital, and the
#: accuracy over all test samples together (FLamby's "pooled test").
FLAMBY_HEART_COLUMNS: tuple[Column, ...] = (
    *(Column(f"Centre {centre}", f"acc-client-{centre}") for centre in range(4)),
    Column("Worst centre", "acc-worst"),
    Column("Pooled test", "acc-weighted-mean"),
    Column("Personal worst centre", "personal-acc-worst"),
    Column("Personal pooled test", "personal-acc-weighted-mean"),
)

#: Named column sets (``fairfl compare --columns``).
COLUMN_SETS: dict[str, tuple[Column, ...]] = {
    "table6": TABLE6_COLUMNS,
    "qffl": QFFL_COLUMNS,
    "flamby-heart": FLAMBY_HEART_COLUMNS,
    "group": GROUP_COLUMNS,
    "personal": PERSONAL_COLUMNS,
}


def mean_std(values: ArrayLike) -> tuple[float, float, int]:
    """Mean and population std (ddof = 0) of the finite values, and how many there were.

    ``(nan, nan, 0)`` when no value is finite.
    """
    x = np.asarray(values, dtype=np.float64).ravel()
    x = x[np.isfinite(x)]
    if x.size == 0:
        return math.nan, math.nan, 0
    return float(x.mean()), float(x.std()), int(x.size)


@dataclass(frozen=True)
class Stat:
    """A statistic over seeds: mean, std (ddof = 0) and the number of finite seeds."""

    mean: float
    std: float
    count: int

    @classmethod
    def of(cls, values: ArrayLike) -> Stat:
        """Summarise per-seed values (non-finite ones are left out)."""
        return cls(*mean_std(values))

    def format(self, digits: int = 2, *, signed: bool = False, scale: float = 1.0) -> str:
        """``"43.45 ± 0.60"`` (``"-"`` without data; no ± for a single seed).

        ``scale`` multiplies mean and std first (:data:`fairfl.metrics.PERCENT` shows a
        fraction in percent). A mean that rounds to zero shows without a minus sign
        (a difference of fractions such as 0.45 - 0.4 - 0.05 is -1e-17, not -0).
        """
        if self.count == 0:
            return "-"
        text = _fixed(scale * self.mean, digits, signed=signed)
        return text if self.count == 1 else f"{text} ± {scale * self.std:.{digits}f}"


@dataclass(frozen=True)
class SummaryRow:
    """One Table 6 row: a rule variant's statistics over its seeds."""

    label: str
    rule: str
    seeds: tuple[int, ...]
    ok_seeds: tuple[int, ...]
    stats: dict[str, Stat] = field(default_factory=dict)


def summarize(
    groups: Mapping[str, Sequence[RunResult]], columns: Sequence[Column] = TABLE6_COLUMNS
) -> list[SummaryRow]:
    """Table 6 rows: each column's mean ± std over the seeds of each variant.

    Parameters
    ----------
    groups : Mapping[str, Sequence[RunResult]]
        Runs by variant label (:func:`fairfl.report.results.group_by_label`).
    columns : Sequence[Column]
        The statistics to summarise.
    """
    rows = []
    for label, runs in groups.items():
        finals = [run.final_metrics() if run.ok else {} for run in runs]
        rows.append(
            SummaryRow(
                label=label,
                rule=runs[0].rule,
                seeds=tuple(run.seed for run in runs),
                ok_seeds=tuple(run.seed for run in runs if run.ok),
                stats={
                    c.metric: Stat.of([m.get(c.metric, math.nan) for m in finals]) for c in columns
                },
            )
        )
    return rows


@dataclass(frozen=True)
class PairedComparison:
    """Table 2 quantities of one rule against the baseline on one seed (Malekmohammadi & Yu §5.3).

    Shares are fractions of the group in [0, 1], changes differences of accuracies
    (fractions, in [-1, 1]); NaN where the group is empty.
    """

    num_suffering: int
    num_well: int
    improved_share: float
    improved_change: float
    degraded_share: float
    degraded_change: float
    overall_change: float


def paired_comparison(
    baseline: Mapping[int, float], other: Mapping[int, float]
) -> PairedComparison:
    """Compare two runs' client accuracies, clients paired by partition id.

    Parameters
    ----------
    baseline : Mapping[int, float]
        FedAvg's final accuracy (a fraction) per client.
    other : Mapping[int, float]
        Rule X's final accuracy (a fraction) per client on the same seed.

    Raises
    ------
    ValueError
        If the two runs share no client.
    """
    clients = sorted(set(baseline) & set(other))
    if not clients:
        raise ValueError("the two runs share no client partition id")
    base = np.array([baseline[c] for c in clients], dtype=np.float64)
    new = np.array([other[c] for c in clients], dtype=np.float64)
    change = new - base
    suffering = base < base.mean()
    well = base > base.mean()

    def share(mask: np.ndarray, hits: np.ndarray) -> float:
        return float(hits[mask].mean()) if mask.any() else math.nan

    def mean_of(mask: np.ndarray) -> float:
        return float(change[mask].mean()) if mask.any() else math.nan

    return PairedComparison(
        num_suffering=int(suffering.sum()),
        num_well=int(well.sum()),
        improved_share=share(suffering, change > 0),
        improved_change=mean_of(suffering),
        degraded_share=share(well, change < 0),
        degraded_change=mean_of(well),
        overall_change=float(new.mean() - base.mean()),
    )


@dataclass(frozen=True)
class Table2Row:
    """One Table 2 row: a rule variant against the baseline, over the paired seeds."""

    label: str
    seeds: tuple[int, ...]
    num_suffering: Stat
    num_well: Stat
    improved_share: Stat
    improved_change: Stat
    degraded_share: Stat
    degraded_change: Stat
    overall_change: Stat
    overall_pooled_change: Stat


def table2(groups: Mapping[str, Sequence[RunResult]], baseline: str) -> list[Table2Row]:
    """Table 2 rows for every variant but ``baseline``, runs paired by seed.

    A seed enters a row only when both that variant's run and the baseline's run on
    that seed finished with finite accuracies. The pooled change is that of each run's
    own pooled accuracy (``acc-weighted-mean`` of its final round).

    Raises
    ------
    ValueError
        If ``baseline`` is not one of the labels.
    """
    if baseline not in groups:
        raise ValueError(f"baseline must be one of {list(groups)}, got {baseline!r}")
    base_runs = {run.seed: run for run in groups[baseline] if run.ok}
    rows = []
    for label, runs in groups.items():
        if label == baseline:
            continue
        paired = [run for run in runs if run.ok and run.seed in base_runs]
        values = [
            paired_comparison(base_runs[run.seed].final_accuracies(), run.final_accuracies())
            for run in paired
        ]
        pooled_changes = [
            pooled_change(base_runs[run.seed].final_metrics(), run.final_metrics())
            for run in paired
        ]

        def stat(name: str, values: list[PairedComparison] = values) -> Stat:
            return Stat.of([getattr(v, name) for v in values])

        rows.append(
            Table2Row(
                label=label,
                seeds=tuple(run.seed for run in paired),
                num_suffering=stat("num_suffering"),
                num_well=stat("num_well"),
                improved_share=stat("improved_share"),
                improved_change=stat("improved_change"),
                degraded_share=stat("degraded_share"),
                degraded_change=stat("degraded_change"),
                overall_change=stat("overall_change"),
                overall_pooled_change=Stat.of(pooled_changes),
            )
        )
    return rows


def pooled_change(baseline: Mapping[str, float], other: Mapping[str, float]) -> float:
    """Change of the pooled accuracy, ``pooled^X - pooled^FedAvg`` (a fraction in [-1, 1]).

    ``pooled = Σ_i n_i a_i / Σ_i n_i`` is the accuracy over all test samples together
    (``acc-weighted-mean`` of :func:`fairfl.metrics.fairness_metrics`). NaN when either
    run lacks it.

    Parameters
    ----------
    baseline, other : Mapping[str, float]
        Final-round fairness metrics of FedAvg's run and of rule X's run on one seed.
    """
    return other.get("acc-weighted-mean", math.nan) - baseline.get("acc-weighted-mean", math.nan)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table (``|`` in cells escaped)."""

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(header), line(["---"] * len(header)), *map(line, rows)]) + "\n"


def csv_text(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """CSV with a header line (numbers written in full precision)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def _seeds_cell(row: SummaryRow) -> str:
    return f"{len(row.ok_seeds)}/{len(row.seeds)}"


def table6_markdown(rows: Sequence[SummaryRow], columns: Sequence[Column] = TABLE6_COLUMNS) -> str:
    """Table 6 as Markdown: one row per variant, ``mean ± std`` cells, a seeds column.

    Cells are in each column's unit (percent), named in its header.
    """
    header = ["Rule", *[c.header for c in columns], "Seeds"]
    body = [
        [
            row.label,
            *[c.cell(row.stats[c.metric]) for c in columns],
            _seeds_cell(row),
        ]
        for row in rows
    ]
    return markdown_table(header, body)


def table6_csv(rows: Sequence[SummaryRow], columns: Sequence[Column] = TABLE6_COLUMNS) -> str:
    """Table 6 as CSV: ``<metric> mean`` and ``<metric> std`` per column, as fractions."""
    header = ["rule", "label", "seeds", "seeds_ok"]
    for column in columns:
        header += [f"{column.metric} mean", f"{column.metric} std"]
    body: list[list[object]] = []
    for row in rows:
        line: list[object] = [
            row.rule,
            row.label,
            " ".join(map(str, row.seeds)),
            " ".join(map(str, row.ok_seeds)),
        ]
        for column in columns:
            stat = row.stats[column.metric]
            line += [_number(stat.mean), _number(stat.std)]
        body.append(line)
    return csv_text(header, body)


_TABLE2_FIELDS = (
    "improved_share",
    "improved_change",
    "degraded_share",
    "degraded_change",
    "overall_change",
    "overall_pooled_change",
    "num_suffering",
    "num_well",
)


def table2_markdown(rows: Sequence[Table2Row], baseline: str) -> str:
    """Table 2 as Markdown, in the paper's layout: ``share ± std (mean change)``.

    Shares in % of the group, accuracy changes in percentage points (the headers say so).
    The change of the pooled accuracy follows the paper's overall (mean) change.
    """
    header = [
        "Rule",
        f"Improved suffering clients % (avg Δacc, % points) vs {baseline}",
        "Degraded well-performing clients % (avg Δacc, % points)",
        "Overall mean Δacc (% points)",
        "Overall pooled Δacc (% points)",
        "Suffering / well clients",
        "Seeds",
    ]
    body = []
    for row in rows:
        body.append(
            [
                row.label,
                *table2_cells(row),
                row.overall_pooled_change.format(signed=True, scale=PERCENT),
                f"{_plain(row.num_suffering.mean)} / {_plain(row.num_well.mean)}",
                str(len(row.seeds)),
            ]
        )
    return markdown_table(header, body)


def table2_cells(row: Table2Row) -> list[str]:
    """The three Table 2 cells of a row in percent: improved, degraded, overall."""
    return [
        f"{row.improved_share.format(scale=PERCENT)} "
        f"({_signed(PERCENT * row.improved_change.mean)})",
        f"{row.degraded_share.format(scale=PERCENT)} "
        f"({_signed(PERCENT * row.degraded_change.mean)})",
        row.overall_change.format(signed=True, scale=PERCENT),
    ]


def table2_csv(rows: Sequence[Table2Row]) -> str:
    """Table 2 as CSV: mean and std over seeds of each quantity, as fractions."""
    header = ["label", "seeds"]
    for name in _TABLE2_FIELDS:
        header += [f"{name} mean", f"{name} std"]
    body: list[list[object]] = []
    for row in rows:
        line: list[object] = [row.label, " ".join(map(str, row.seeds))]
        for name in _TABLE2_FIELDS:
            stat: Stat = getattr(row, name)
            line += [_number(stat.mean), _number(stat.std)]
        body.append(line)
    return csv_text(header, body)


def _number(value: float) -> object:
    return "" if not math.isfinite(value) else value


def _signed(value: float) -> str:
    return "-" if not math.isfinite(value) else _fixed(value, 2, signed=True)


def _fixed(value: float, digits: int, *, signed: bool) -> str:
    # Adding 0.0 turns the -0.0 that round() leaves for tiny negatives into 0.0.
    return f"{round(value, digits) + 0.0:{'+' if signed else ''}.{digits}f}"


def _plain(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value:g}"
