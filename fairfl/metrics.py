"""Fairness metrics over clients' local test results.

Definitions: ``docs/specs/design.md`` and ``docs/specs/spec-vred-qffl.md`` §13.

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
    ``acc-variance`` by 100² (q-FFL's unit), and so are their ``personal-`` forms
    (Ditto's personal models); other metrics are returned unchanged. For
    printed tables and logs only, under a header that says "%": records keep fractions.
    """
    shown = dict(metrics)
    for name, value in metrics.items():
        plain = name.removeprefix("personal-")  # Ditto's personal models' statistics
        if plain.startswith("acc-"):
            shown[name] = value * (PERCENT**2 if plain == "acc-variance" else PERCENT)
    return shown


def tail_count(num_clients: int, fraction: float) -> int:
    """Number of clients in a tail: ``floor(fraction * n)``, at least 1.

    Malekmohammadi & Yu (via its code) and q-FFL use the floor; with fewer than ``1 / fraction``
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
    """Average ``|x_i - x_j|`` over unordered pairs i < j (client disagreement, Equitable FL).

    Computed in O(n log n) from the sorted values: ``Σ_k x_(k) (2k - n + 1)`` over pairs.
    """
    x = np.sort(np.asarray(values, dtype=np.float64))
    n = x.size
    if n < 2:
        return 0.0
    ranks = np.arange(n, dtype=np.float64)
    total = float(np.sum(x * (2.0 * ranks - n + 1.0)))
    return total / (n * (n - 1) / 2.0)


def decile_values(values: ArrayLike) -> tuple[float, float]:
    """The bottom and top decile of the values: ``x_(⌊n/10⌋)`` and ``x_(⌊9n/10⌋)``.

    Order statistics of the sorted values ``x_(0) <= ... <= x_(n-1)`` (0-based), as
    FederatedScope's fairness summary computes ``<metric>_bottom_decile`` and
    ``<metric>_top_decile`` (``federatedscope/core/monitors/monitor.py``,
    ``Monitor.format_eval_res``: ``all_res[all_res.size // 10]`` and
    ``all_res[all_res.size * 9 // 10]``). The *means* of the tails are
    :func:`worst_fraction_mean` and :func:`best_fraction_mean`; they differ from
    FederatedScope's ``bottom10%``/``top10%`` only where n < 10 (FederatedScope's bottom
    tail is then empty, so NaN; here it is the single worst client) or 10 does not
    divide n (FederatedScope's top tail has ``n - ⌊9n/10⌋`` clients, here ``⌊n/10⌋``).
    """
    x = np.sort(np.asarray(values, dtype=np.float64))
    return float(x[x.size // 10]), float(x[x.size * 9 // 10])


def distribution_entropy(values: ArrayLike) -> float:
    """Entropy (nats) of the values normalised to a distribution: ``-Σ p_i ln p_i``.

    ``p_i = x_i / Σ_j x_j`` for values ``x_i >= 0``: ``ln n`` when all are equal (the
    fairest), 0 when one client has everything. FederatedScope's ``<metric>_entropy``
    (``federatedscope/core/monitors/monitor.py``, ``Monitor.format_eval_res``) adds
    ``1e-9`` to every value first so that zeros do not give ``0 ln 0``; here
    ``0 ln 0 = 0`` (its limit) is used instead, and all-zero values count as all equal
    (``ln n``), as in :func:`jain_index`.

    Raises
    ------
    ValueError
        If a value is negative (not a distribution).
    """
    x = np.asarray(values, dtype=np.float64)
    if np.any(x < 0):
        raise ValueError(f"entropy needs values >= 0, got {float(x.min())}")
    largest = float(x.max())
    if largest == 0.0:
        return float(math.log(x.size))
    x = x / largest  # scale-free: Σx cannot overflow for huge values
    p = x / float(x.sum())
    p = p[p > 0]  # 0 ln 0 = 0; also a tiny value whose share underflows to 0
    return float(-np.sum(p * np.log(p)))


def cosine_to_uniform(values: ArrayLike) -> float:
    """Cosine similarity of the values to the all-ones vector: ``mean(x) / sqrt(mean(x²))``.

    ``cos(x, 1) = Σx / (‖x‖ √n)``, which is FederatedScope's ``<metric>_cos1``
    (``federatedscope/core/monitors/monitor.py``, ``Monitor.format_eval_res``:
    ``np.mean(all_res) / np.sqrt(np.mean(all_res ** 2))``). 1 when all values are equal,
    ``1/√n`` when one client has everything; it is the square root of
    :func:`jain_index` for values >= 0. All-zero values count as all equal (1).
    """
    x = np.asarray(values, dtype=np.float64)
    largest = float(np.max(np.abs(x)))
    if largest == 0.0:
        return 1.0
    x = x / largest  # as in jain_index: tiny values must not underflow in x²
    return float(np.mean(x) / math.sqrt(float(np.mean(x * x))))


def gini_coefficient(values: ArrayLike) -> float:
    """Gini coefficient ``Σ_i Σ_j |x_i - x_j| / (2 n² mean(x))`` of values >= 0.

    0 when all values are equal, ``1 - 1/n`` when one client has everything. The
    standard definition (Gini 1912; e.g. Yitzhaki & Schechtman, *The Gini Methodology*,
    Springer 2013, eq. 2.1), computed from :func:`mean_pairwise_gap` (the mean over the
    ``n(n-1)/2`` unordered pairs): ``G = gap (n - 1) / (2 n mean)``. Not in
    FederatedScope's summary; added for issue 22. All-zero values count as all equal (0).

    Raises
    ------
    ValueError
        If a value is negative.
    """
    x = np.asarray(values, dtype=np.float64)
    if np.any(x < 0):
        raise ValueError(f"the Gini coefficient needs values >= 0, got {float(x.min())}")
    largest = float(x.max()) if x.size else 0.0
    if largest == 0.0 or x.size < 2:
        return 0.0
    x = x / largest  # scale-free: the pairwise sums cannot overflow for huge values
    return mean_pairwise_gap(x) * (x.size - 1) / (2.0 * x.size * float(x.mean()))


#: The keys of :func:`fairness_metrics`, in its order: every round's record has all of them.
FAIRNESS_METRICS: tuple[str, ...] = (
    "acc-mean",
    "acc-weighted-mean",
    "acc-std",
    "acc-variance",
    "acc-worst",
    "acc-worst-10",
    "acc-worst-20",
    "acc-best-10",
    "jain-index",
    "loss-mean",
    "loss-gap",
    "num-clients",
    "acc-best",
    "acc-bottom-decile",
    "acc-top-decile",
    "entropy",
    "cosine-uniform",
    "gini-index",
)


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
        ``num-clients``; and FederatedScope's summary with Gini: ``acc-best`` (max),
        ``acc-bottom-decile`` and ``acc-top-decile`` (:func:`decile_values`), and of
        the accuracies ``entropy`` (nats, :func:`distribution_entropy`),
        ``cosine-uniform`` (:func:`cosine_to_uniform`) and ``gini-index``
        (:func:`gini_coefficient`). Accuracy statistics are fractions in [0, 1], as the
        inputs; the last three are unitless (no ``acc-`` prefix, so :func:`in_percent`
        leaves them as they are).

        A round in which no client evaluated (every reply lost or dropped, or no
        evaluation that round) has the same keys: ``num-clients`` 0 and every statistic
        NaN (``null`` in the results files), so each round's record has one shape.

    Raises
    ------
    ValueError
        If the sequences are of different lengths.
    """
    if not len(accuracies) == len(num_examples) == len(losses):
        raise ValueError(
            "accuracies, num_examples and losses must have one entry per client, got "
            f"{len(accuracies)}, {len(num_examples)} and {len(losses)}"
        )
    if not accuracies:
        # No statistic of zero clients exists; the count does.
        return {name: 0.0 if name == "num-clients" else math.nan for name in FAIRNESS_METRICS}
    acc: NDArray[np.float64] = np.asarray(accuracies, dtype=np.float64)
    counts = np.asarray(num_examples, dtype=np.float64)
    bottom_decile, top_decile = decile_values(acc)
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
        "acc-best": float(acc.max()),
        "acc-bottom-decile": bottom_decile,
        "acc-top-decile": top_decile,
        "entropy": distribution_entropy(acc),
        "cosine-uniform": cosine_to_uniform(acc),
        "gini-index": gini_coefficient(acc),
    }
