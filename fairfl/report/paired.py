"""Each rule against the baseline over seeds: the paired difference, its 95 % interval, a t-test.

Table 6 shows mean ± sd over seeds; with few seeds an sd says little about whether a rule
beats the baseline. Runs on the same seed share the partition, the split and the initial
model, so the differences ``d_s = x_s(rule) − x_s(baseline)`` are paired; with ``n >= 3``
of them the report gives their mean, the 95 % Student-t interval
``d̄ ± t_{0.975, n−1} · s_d / √n`` (``s_d`` with ``n − 1`` in the denominator) and the
two-sided paired t-test's p-value (Student, 1908; Hsu and Lachenbruch, *Paired t Test*,
Wiley StatsRef 2014). Seeds are few, so the intervals are wide: a reader should read them,
not the p-values alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from fairfl.report.results import RunResult
from fairfl.report.tables import Column, csv_text, markdown_table

#: Fewest paired seeds for an interval and a test.
MIN_SEEDS = 3
#: The columns compared: the unweighted mean, the worst 10 % of clients, the pooled accuracy.
PAIRED_COLUMNS: tuple[Column, ...] = (
    Column("Mean", "acc-mean"),
    Column("Worst 10%", "acc-worst-10"),
    Column("Pooled", "acc-weighted-mean"),
)


@dataclass(frozen=True)
class PairedDifference:
    """The mean paired difference over seeds, its 95 % interval and the t-test's p-value.

    Differences of fractions; ``low == high == mean`` and ``p_value`` 0 or 1 when every
    difference is the same (no spread: the interval is the point).
    """

    mean: float
    low: float
    high: float
    p_value: float
    count: int


def paired_difference(baseline: ArrayLike, other: ArrayLike) -> PairedDifference:
    """The paired difference ``other − baseline`` over seeds (both in the same seed order).

    Raises
    ------
    ValueError
        If the shapes differ, a value is not finite, or fewer than :data:`MIN_SEEDS`
        pairs are given.
    """
    base = np.asarray(baseline, dtype=np.float64)
    new = np.asarray(other, dtype=np.float64)
    if base.shape != new.shape or base.ndim != 1:
        raise ValueError(f"paired values must be two 1-d arrays of one length, got {base.shape}")
    if not (np.isfinite(base).all() and np.isfinite(new).all()):
        raise ValueError("paired values must be finite")
    count = int(base.size)
    if count < MIN_SEEDS:
        raise ValueError(f"a paired interval needs >= {MIN_SEEDS} seeds, got {count}")
    d = new - base
    mean = float(d.mean())
    spread = float(d.std(ddof=1))
    if spread == 0.0:  # t is ±∞ (or 0/0 when every difference is 0): no test to run
        return PairedDifference(mean, mean, mean, 1.0 if mean == 0.0 else 0.0, count)
    error = spread / math.sqrt(count)
    half = float(stats.t.ppf(0.975, count - 1)) * error
    p_value = float(2.0 * stats.t.sf(abs(mean) / error, count - 1))
    return PairedDifference(mean, mean - half, mean + half, p_value, count)


@dataclass(frozen=True)
class PairedRow:
    """One rule variant against the baseline: a :class:`PairedDifference` per column."""

    label: str
    seeds: tuple[int, ...]
    differences: dict[str, PairedDifference | None]


def paired_rows(
    groups: Mapping[str, Sequence[RunResult]],
    baseline: str,
    columns: Sequence[Column] = PAIRED_COLUMNS,
) -> list[PairedRow]:
    """Every variant but ``baseline`` on the seeds both finished with finite values.

    A column with fewer than :data:`MIN_SEEDS` such seeds is ``None``.
    """
    base = {run.seed: run.final_metrics() for run in groups[baseline] if run.ok}
    rows = []
    for label, runs in groups.items():
        if label == baseline:
            continue
        mine = {run.seed: run.final_metrics() for run in runs if run.ok and run.seed in base}
        differences: dict[str, PairedDifference | None] = {}
        for column in columns:
            pairs = [
                (base[seed][column.metric], metrics[column.metric])
                for seed, metrics in sorted(mine.items())
                if math.isfinite(base[seed].get(column.metric, math.nan))
                and math.isfinite(metrics.get(column.metric, math.nan))
            ]
            differences[column.metric] = (
                paired_difference(*zip(*pairs, strict=True)) if len(pairs) >= MIN_SEEDS else None
            )
        rows.append(PairedRow(label, tuple(sorted(mine)), differences))
    return rows


def _cell(difference: PairedDifference | None, column: Column) -> str:
    if difference is None:
        return "-"
    scale = column.scale
    return (
        f"{scale * difference.mean:+.2f} [{scale * difference.low:+.2f}, "
        f"{scale * difference.high:+.2f}] p={difference.p_value:.2g}"
    )


def paired_markdown(
    rows: Sequence[PairedRow], baseline: str, columns: Sequence[Column] = PAIRED_COLUMNS
) -> str:
    """The paired table: ``Δ [95 % interval] p`` per column, in percentage points."""
    header = [
        "Rule",
        *[f"Δ {c.title} vs {baseline} (points) [95 % CI] p" for c in columns],
        "Seeds",
    ]
    body = [
        [row.label, *[_cell(row.differences[c.metric], c) for c in columns], str(len(row.seeds))]
        for row in rows
    ]
    return markdown_table(header, body)


def paired_csv(rows: Sequence[PairedRow], columns: Sequence[Column] = PAIRED_COLUMNS) -> str:
    """The paired table as fractions: mean, low, high and p per column."""
    header = ["label", "seeds"]
    for column in columns:
        header += [f"{column.metric} {part}" for part in ("diff", "low", "high", "p")]
    body: list[list[object]] = []
    for row in rows:
        line: list[object] = [row.label, " ".join(map(str, row.seeds))]
        for column in columns:
            d = row.differences[column.metric]
            line += ["", "", "", ""] if d is None else [d.mean, d.low, d.high, d.p_value]
        body.append(line)
    return csv_text(header, body)
