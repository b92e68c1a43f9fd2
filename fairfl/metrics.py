"""Fairness metrics over clients' local test results (DESIGN.md, spec-vred-qffl §13).

One unit throughout: accuracies enter as fractions in [0, 1] (Flower's ``eval_acc``) and
every accuracy statistic is returned as a fraction too; the variance is a fraction
squared. Results files (``rounds.jsonl``, ``summary.json``, ``runs.csv``) and the
strategies' MetricRecords hold these values under the same names (``acc-mean``,
``acc-variance``). Only tables and plots for people show percent, and they say so in the
column header or axis label (:mod:`fairfl.report`): the papers' tables are in percent,
and q-FFL's variance in %² is ``acc-variance * 1e4``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

#: Multiply an accuracy (a fraction) by this to show it in percent.
PERCENT: float = 100.0


def in_percent(metrics: Mapping[str, float]) -> dict[str, float]:
    """The metrics for people: accuracy statistics in percent, ``acc-variance`` in %².

    Every ``acc-*`` value of :func:`fairness_metrics` is multiplied by 100 and
    ``acc-variance`` by 100² (q-FFL's unit); other metrics are returned unchanged. For
    printed tables and logs only, under a header that says "%": records keep fractions.
    """
    shown = dict(metrics)
    for name, value in metrics.items():
        if name.startswith("acc-"):
            shown[name] = value * (PERCENT**2 if name == "acc-variance" else PERCENT)
    return shown


def tail_count(num_clients: int, fraction: float) -> int:
    """Number of clients in a tail: ``floor(fraction * n)``, at least 1.

    Paper 000 (via its code) and q-FFL use the floor; with fewer than ``1 / fraction``
    clients the floor is 0, and here the tail is then the single worst (or best) client.
    """
    return max(1, math.floor(fraction * num_clients + 1e-9))


def worst_fraction_mean(values: ArrayLike, fraction: float) -> float:
    """Mean of the ``tail_count(n, fraction)`` smallest values."""
    sorted_values = np.sort(np.asarray(values, dtype=np.float64))
    return float(sorted_values[: tail_count(sorted_values.size, fraction)].mean())


def best_fraction_mean(values: ArrayLike, fraction: float) -> float:
    """Mean of the ``tail_count(n, fraction)`` largest values."""
    sorted_values = np.sort(np.asarray(values, dtype=np.float64))
    return float(sorted_values[-tail_count(sorted_values.size, fraction) :].mean())


def jain_index(values: ArrayLike) -> float:
    """Jain's fairness index ``(Σx)² / (n Σx²)``: 1 when all equal, 1/n when one has all.

    All-zero values are perfectly equal, so the index is 1 there (0/0 otherwise). The
    values are scaled by their largest magnitude first: the index does not change, and
    tiny values no longer underflow in ``x²`` (which pushed it above 1).
    """
    x = np.asarray(values, dtype=np.float64)
    largest = float(np.max(np.abs(x)))
    if largest == 0.0:
        return 1.0
    x = x / largest
    return float(np.sum(x) ** 2 / (x.size * np.sum(x * x)))


def mean_pairwise_gap(values: ArrayLike) -> float:
    """Average ``|x_i - x_j|`` over unordered pairs i < j (client disagreement, paper 003).

    Computed in O(n log n) from the sorted values: ``Σ_k x_(k) (2k - n + 1)`` over pairs.
    """
    x = np.sort(np.asarray(values, dtype=np.float64))
    n = x.size
    if n < 2:
        return 0.0
    ranks = np.arange(n, dtype=np.float64)
    total = float(np.sum(x * (2.0 * ranks - n + 1.0)))
    return total / (n * (n - 1) / 2.0)


def fairness_metrics(
    accuracies: Sequence[float],
    num_examples: Sequence[int],
    losses: Sequence[float],
) -> dict[str, float]:
    """Fairness statistics of one evaluation round.

    Parameters
    ----------
    accuracies : Sequence[float]
        Each client's test accuracy as a fraction in [0, 1].
    num_examples : Sequence[int]
        Each client's number of test samples (for the sample-weighted mean).
    losses : Sequence[float]
        Each client's test loss.

    Returns
    -------
    dict[str, float]
        ``acc-mean`` (unweighted across clients), ``acc-weighted-mean``, ``acc-std``
        (population), ``acc-variance`` (population, a fraction squared), ``acc-worst``,
        ``acc-worst-10``, ``acc-worst-20``, ``acc-best-10`` (tail means), ``jain-index``
        (of accuracies), ``loss-mean``, ``loss-gap`` (mean pairwise test-loss gap) and
        ``num-clients``. Accuracy statistics are fractions in [0, 1], as the inputs.

    Raises
    ------
    ValueError
        If the sequences are empty or of different lengths.
    """
    if not accuracies:
        raise ValueError("accuracies must not be empty")
    if not len(accuracies) == len(num_examples) == len(losses):
        raise ValueError(
            "accuracies, num_examples and losses must have one entry per client, got "
            f"{len(accuracies)}, {len(num_examples)} and {len(losses)}"
        )
    acc: NDArray[np.float64] = np.asarray(accuracies, dtype=np.float64)
    counts = np.asarray(num_examples, dtype=np.float64)
    return {
        "acc-mean": float(acc.mean()),
        "acc-weighted-mean": float(np.dot(acc, counts) / counts.sum()),
        "acc-std": float(acc.std()),
        "acc-variance": float(acc.var()),
        "acc-worst": float(acc.min()),
        "acc-worst-10": worst_fraction_mean(acc, 0.1),
        "acc-worst-20": worst_fraction_mean(acc, 0.2),
        "acc-best-10": best_fraction_mean(acc, 0.1),
        "jain-index": jain_index(acc),
        "loss-mean": float(np.mean(losses)),
        "loss-gap": mean_pairwise_gap(losses),
        "num-clients": float(acc.size),
    }
