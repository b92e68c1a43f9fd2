"""Group fairness over a per-sample sensitive attribute, from counts (wire contract v1).

A client never sends its predictions. It sends ``group-counts``: how many of its samples
fall in each cell (attribute value a, label y, prediction ŷ) of a binary classifier, as
one flat list of non-negative ints, cell ``4 a + 2 y + ŷ`` for a = 0 .. G-1 and
y, ŷ ∈ {0, 1} (length 4 G). Counts add up: the server sums the clients' lists and gets
the counts of the pooled predictions, so every metric below computed from the sum is the
metric of the pooled data, as a central library (fairlearn) computes it.

The metrics, for groups g = 0 .. G-1 with rates read from the counts (fairlearn's
definitions, ``fairlearn.metrics``; the difference of a rate is its max minus its min
over the groups):

- demographic-parity difference: of the selection rate P(ŷ=1 | A=g);
- equal-opportunity difference: of the true-positive rate P(ŷ=1 | y=1, A=g);
- equalised-odds difference: the larger of the true-positive-rate and the
  false-positive-rate P(ŷ=1 | y=0, A=g) differences (fairlearn's ``worst_case``);
- accuracy parity (difference): of the accuracy P(ŷ=y | A=g).

Both sides import this module: the ClientApp to count, the server and FairFed
(:mod:`fairfl.strategies.fairfed`) to compute the metrics from the counts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Final

import numpy as np
from numpy.typing import ArrayLike, NDArray

#: Cells per attribute value: (y, ŷ) ∈ {0, 1}², in the order 2 y + ŷ.
CELLS_PER_GROUP: Final = 4

#: Metric names, as they appear in records (``rounds.jsonl``'s ``metrics``).
DEMOGRAPHIC_PARITY: Final = "dp-diff"
EQUALIZED_ODDS: Final = "eo-diff"
EQUAL_OPPORTUNITY: Final = "eop-diff"
ACCURACY_PARITY: Final = "acc-parity-diff"
GROUP_METRICS: Final = (DEMOGRAPHIC_PARITY, EQUALIZED_ODDS, EQUAL_OPPORTUNITY, ACCURACY_PARITY)


def group_counts(
    attribute: ArrayLike, labels: ArrayLike, predictions: ArrayLike, num_groups: int
) -> list[int]:
    """Count samples per (attribute value, label, prediction): the ``group-counts`` list.

    Parameters
    ----------
    attribute : ArrayLike
        Each sample's sensitive attribute, ints in [0, ``num_groups``).
    labels : ArrayLike
        Each sample's label, 0 or 1.
    predictions : ArrayLike
        Each sample's predicted label, 0 or 1.
    num_groups : int
        G >= 1, the number of attribute values (the list has 4 G entries, zeros for a
        value this client lacks).

    Returns
    -------
    list[int]
        Entry ``4 a + 2 y + ŷ`` counts the samples with A = a, y, ŷ.

    Raises
    ------
    ValueError
        If the arrays are not 1-D of one length, or a value is out of its range.
    """
    a = np.asarray(attribute)
    y = np.asarray(labels)
    p = np.asarray(predictions)
    if num_groups < 1:
        raise ValueError(f"num_groups must be >= 1, got {num_groups}")
    if a.ndim != 1 or a.shape != y.shape or a.shape != p.shape:
        raise ValueError(
            "attribute, labels and predictions must be 1-D of one length, got shapes "
            f"{a.shape}, {y.shape} and {p.shape}"
        )
    ranges = (("attribute", a, num_groups), ("labels", y, 2), ("predictions", p, 2))
    for name, values, high in ranges:
        if values.size and (values.min() < 0 or values.max() >= high):
            raise ValueError(f"{name} must be ints in [0, {high}), got {np.unique(values)}")
    cells = CELLS_PER_GROUP * a.astype(np.int64) + 2 * y.astype(np.int64) + p.astype(np.int64)
    counts = np.bincount(cells, minlength=CELLS_PER_GROUP * num_groups)
    return [int(c) for c in counts]


def as_count_table(counts: ArrayLike) -> NDArray[np.object_]:
    """The flat ``group-counts`` list as a (G, 2, 2) table of Python ints indexed [a, y, ŷ].

    The cells are Python ints, not int64: a sum over cells or clients never wraps
    (eight counts of 2^63 - 1 would wrap an int64 sum to a negative number), and a
    rate is the correctly rounded quotient of two exact integers.

    Raises
    ------
    ValueError
        If the length is not a positive multiple of 4 or a count is negative or not
        an integer.
    """
    flat = np.asarray(counts, dtype=object)
    if (
        flat.ndim != 1
        or flat.size == 0
        or flat.size % CELLS_PER_GROUP
        or not all(_is_int(c) for c in flat)
    ):
        kinds = sorted({type(c).__name__ for c in flat.ravel()})
        raise ValueError(
            f"group-counts must be a flat list of ints of length 4 G, got shape {flat.shape} "
            f"of {', '.join(kinds) or 'nothing'}"
        )
    cells = [int(c) for c in flat]
    if min(cells) < 0:
        raise ValueError(f"group-counts must be >= 0, got {cells}")
    table: NDArray[np.object_] = np.array(cells, dtype=object).reshape(-1, 2, 2)
    return table


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def sum_counts(lists: Sequence[ArrayLike]) -> list[int]:
    """Sum clients' ``group-counts`` lists exactly: the counts of the pooled predictions.

    Raises
    ------
    ValueError
        If there are none or their lengths differ.
    """
    tables = [as_count_table(c) for c in lists]
    if not tables or len({t.shape for t in tables}) != 1:
        raise ValueError(
            f"need one or more group-counts lists of one length, got {[t.size for t in tables]}"
        )
    return [int(c) for c in np.sum(tables, axis=0).ravel()]


def _difference(numerators: NDArray[np.object_], denominators: NDArray[np.object_]) -> float:
    """The max minus the min of the rates whose denominator is > 0; NaN with fewer than two."""
    defined = denominators > 0
    if defined.sum() < 2:
        return math.nan
    rates = numerators[defined] / denominators[defined]
    return float(rates.max() - rates.min())


def group_fairness(counts: ArrayLike) -> dict[str, float]:
    """The four group-fairness differences of the samples ``counts`` describes.

    Parameters
    ----------
    counts : ArrayLike
        A ``group-counts`` list (one client's, or the sum of several: :func:`sum_counts`).

    Returns
    -------
    dict[str, float]
        :data:`DEMOGRAPHIC_PARITY`, :data:`EQUALIZED_ODDS`, :data:`EQUAL_OPPORTUNITY` and
        :data:`ACCURACY_PARITY`, each in [0, 1]; NaN where fewer than two groups have a
        defined rate (a client holding one attribute value only: FairFed calls its local
        metric undefined).

    Notes
    -----
    A group enters a rate's difference only where the rate's denominator is positive (a
    group with no positive label has no true-positive rate). fairlearn instead scores an
    undefined rate as 0 (scikit-learn's ``zero_division``); the two agree wherever every
    group has samples of both labels.
    """
    table = as_count_table(counts)
    per_group = table.sum(axis=(1, 2))
    selected = table[:, :, 1].sum(axis=1)
    positives = table[:, 1, :].sum(axis=1)
    negatives = table[:, 0, :].sum(axis=1)
    true_positives = table[:, 1, 1]
    false_positives = table[:, 0, 1]
    correct = table[:, 0, 0] + table[:, 1, 1]
    tpr = _difference(true_positives, positives)
    fpr = _difference(false_positives, negatives)
    return {
        DEMOGRAPHIC_PARITY: _difference(selected, per_group),
        EQUALIZED_ODDS: max(tpr, fpr) if not (math.isnan(tpr) or math.isnan(fpr)) else math.nan,
        EQUAL_OPPORTUNITY: tpr,
        ACCURACY_PARITY: _difference(correct, per_group),
    }


def accuracy_of_counts(counts: ArrayLike) -> float:
    """Accuracy P(ŷ = y) of the samples ``counts`` describes (NaN for none)."""
    table = as_count_table(counts)
    total = int(table.sum())
    return math.nan if total == 0 else float((table[:, 0, 0] + table[:, 1, 1]).sum() / total)


def defined_metrics(metrics: Mapping[str, float]) -> dict[str, float]:
    """``metrics`` without its undefined (NaN) entries."""
    return {name: value for name, value in metrics.items() if not math.isnan(value)}


#: Metric name of the accuracy of pooled counts (a check on the sample-weighted accuracy).
GROUP_ACCURACY: Final = "group-acc"


def pooled_group_metrics(
    lists: Sequence[Sequence[int]],
) -> tuple[dict[str, float], list[int], list[int]]:
    """The group metrics of several clients' ``group-counts`` pooled.

    Lists of another length than the first one's (another number of attribute values)
    are left out of the sum.

    Returns
    -------
    tuple[dict[str, float], list[int], list[int]]
        :func:`group_fairness` of the sum with :data:`GROUP_ACCURACY`; the summed
        counts; the indices of the lists left out.

    Raises
    ------
    ValueError
        If ``lists`` is empty or a list is not a ``group-counts`` list.
    """
    if not lists:
        raise ValueError("need one or more group-counts lists")
    width = len(lists[0])
    kept = [counts for counts in lists if len(counts) == width]
    total = sum_counts(kept)
    metrics = group_fairness(total)
    metrics[GROUP_ACCURACY] = accuracy_of_counts(total)
    return metrics, total, [i for i, counts in enumerate(lists) if len(counts) != width]
