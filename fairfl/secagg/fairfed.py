"""FairFed's math that a client computes itself under SecAgg+: its gap and its weight.

Ezzeldin, Yan, He, Ferrara and Avestimehr, *FairFed: Enabling Group Fairness in
Federated Learning*, AAAI 2023, https://arxiv.org/abs/2110.00857 (formulas FF1-FF6 as
numbered in ``docs/specs/spec-fairfed.md``). The clear rule
(:class:`fairfl.strategies.fairfed.FairFed`) calls the same functions on every client's
counts; under secure aggregation each client calls them on its own counts and the
securely summed ones (:func:`fairfl.secagg.forms.client_part`), so both compute the
same Δ_k from the same integers. Here, not in the strategies: the client half of
SecAgg+ loads without the strategies.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from fairfl.contract.sensitive import accuracy_of_counts, as_count_table

__all__ = ["METRICS", "Metric", "fairness_gap", "moved_weight", "signed_metric"]

Metric = Literal["spd", "eod"]
#: The paper's two group-fairness metrics (§3): statistical parity and equal opportunity.
METRICS: tuple[Metric, ...] = ("spd", "eod")


def signed_metric(counts: ArrayLike, metric: str) -> float:
    """The paper's signed group-fairness metric F of binary-attribute ``group-counts``.

    ``"spd"``: P(ŷ=1 | A=0) - P(ŷ=1 | A=1) (FF1); ``"eod"``: the same of the
    true-positive rate, P(ŷ=1 | A=0, y=1) - P(ŷ=1 | A=1, y=1) (FF2). A = 0 is the
    unprivileged group, so F < 0 favours A = 1.

    Returns
    -------
    float
        F in [-1, 1]; NaN where a rate is undefined (no sample of a group, or, for
        ``"eod"``, no positive of a group).

    Raises
    ------
    ValueError
        If ``metric`` is neither, or the counts are not those of a binary attribute.
    """
    table = as_count_table(counts)
    if table.shape[0] != 2:
        raise ValueError(f"FairFed needs a binary attribute (8 counts), got {table.size}")
    if metric == "spd":
        numerators, denominators = table[:, :, 1].sum(axis=1), table.sum(axis=(1, 2))
    elif metric == "eod":
        numerators, denominators = table[:, 1, 1], table[:, 1, :].sum(axis=1)
    else:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    if (denominators == 0).any():
        return float("nan")
    return float(numerators[0] / denominators[0] - numerators[1] / denominators[1])


def fairness_gap(counts: ArrayLike, total: ArrayLike, metric: str) -> float:
    """One client's Δ_k (FF4) from its ``group-counts`` and the summed ones (FF3).

    ``Δ_k = |F_global - F_k|``, F_global the :func:`signed_metric` of the summed counts;
    ``|Acc_global - Acc_k|`` where F_k or F_global is undefined, as Algorithm 1 says.
    In [0, 2].
    """
    global_metric, local = signed_metric(total, metric), signed_metric(counts, metric)
    if math.isnan(local) or math.isnan(global_metric):
        return abs(accuracy_of_counts(total) - accuracy_of_counts(counts))
    return abs(global_metric - local)


def moved_weight(previous: float, gap: float, mean_gap: float, beta: float) -> float:
    """One client's ``ω̄_k = max(ω_k^{t-1} - β (Δ_k - mean Δ), 0)`` (FF6, before normalising).

    ``previous`` is ω_k^{t-1} normalised over the round's participants. The clipping at
    0 is fairfl's (:func:`fairfl.strategies.fairfed.fairfed_weights`, Notes).
    """
    return float(np.maximum(previous - beta * (gap - mean_gap), 0.0))
