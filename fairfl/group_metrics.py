"""Metrics of runs with planted client groups (Equitable FL; its spec's §5.1).

Spec: ``docs/specs/spec-activation-clustering.md``.

They read a round of ``rounds.jsonl`` (:mod:`fairfl.server.results`) and the planted
group of every partition (:func:`fairfl.data.groups.planted_groups`):

- accuracy per planted group and per found cluster (mean over the clients in it, a
  fraction in [0, 1] as the clients' ``eval_acc``);
- client disagreement Δ, the mean pairwise test-loss gap (eq. 9 of [Equitable FL]), over the
  round's participants (the paper's) and over all evaluated clients;
- NMI between the clusters a rule found (``train.diagnostics["clusters"]``) and the
  planted groups, over the participants; only in rounds with >= 2 planted groups among
  them (spec §5.1), since NMI against a single class is 0 whatever was found.

The planted groups are evaluation data only: no strategy reads them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from fairfl.metrics import mean_pairwise_gap


def clustering_nmi(found: ArrayLike, planted: ArrayLike) -> float | None:
    """Normalised mutual information (arithmetic mean) of two labellings.

    Returns ``None`` when ``planted`` has fewer than two groups: the score is then
    undefined as a measure of recovery (scikit-learn returns 0 or 1).

    Raises
    ------
    ValueError
        If the labellings have different lengths.
    """
    from sklearn.metrics import normalized_mutual_info_score

    found_arr, planted_arr = np.asarray(found), np.asarray(planted)
    if found_arr.shape != planted_arr.shape:
        raise ValueError(
            f"found and planted must have the same length, got {found_arr.size} and "
            f"{planted_arr.size}"
        )
    if np.unique(planted_arr).size < 2:
        return None
    return float(normalized_mutual_info_score(planted_arr, found_arr))


def group_means(values: ArrayLike, groups: ArrayLike) -> dict[int, float]:
    """Mean of ``values`` in each group, by group id (sorted)."""
    v, g = np.asarray(values, dtype=np.float64), np.asarray(groups)
    return {int(k): float(v[g == k].mean()) for k in np.unique(g)}


def round_group_report(entry: Mapping[str, Any], planted: Sequence[int]) -> dict[str, Any]:
    """Group metrics of one ``rounds.jsonl`` entry.

    Parameters
    ----------
    entry : Mapping[str, Any]
        One line of ``rounds.jsonl``.
    planted : Sequence[int]
        Planted group of each partition id.

    Returns
    -------
    dict[str, Any]
        ``acc-group`` ({group: accuracy}), ``disagreement-all``, and when the round
        trained: ``disagreement-participants``, and for clustered rules ``acc-cluster``
        ({cluster: accuracy} over participants), ``nmi`` (or ``None``) and, in registry
        mode, ``nmi-registry`` over every client in the registry. Accuracies are
        fractions in [0, 1], as the clients' ``eval_acc``.
    """
    clients = entry.get("clients", [])
    report: dict[str, Any] = {}
    acc = {c["node_id"]: c["eval_acc"] for c in clients}
    loss = {c["node_id"]: c["eval_loss"] for c in clients}
    partition = {c["node_id"]: c["partition_id"] for c in clients}
    train = entry.get("train") or {}
    for w in train.get("weights", []):
        if w.get("partition_id") is not None:
            partition.setdefault(w["node_id"], w["partition_id"])
    known = [n for n in acc if partition.get(n) is not None]
    if known:
        report["acc-group"] = group_means(
            [acc[n] for n in known], [planted[partition[n]] for n in known]
        )
        report["disagreement-all"] = mean_pairwise_gap([loss[n] for n in known])
    participants = [w["node_id"] for w in train.get("weights", []) if w["node_id"] in loss]
    if participants:
        report["disagreement-participants"] = mean_pairwise_gap([loss[n] for n in participants])
    diagnostics = train.get("diagnostics", {})
    clusters = {int(n): int(c) for n, c in diagnostics.get("clusters", {}).items()}
    nodes = [n for n in clusters if partition.get(n) is not None]
    if nodes:
        found = [clusters[n] for n in nodes]
        report["nmi"] = clustering_nmi(found, [planted[partition[n]] for n in nodes])
        evaluated = [n for n in nodes if n in acc]
        if evaluated:
            report["acc-cluster"] = group_means(
                [acc[n] for n in evaluated], [clusters[n] for n in evaluated]
            )
    registry = {int(n): int(c) for n, c in diagnostics.get("registry-clusters", {}).items()}
    in_registry = [n for n in registry if partition.get(n) is not None]
    if in_registry:
        report["nmi-registry"] = clustering_nmi(
            [registry[n] for n in in_registry], [planted[partition[n]] for n in in_registry]
        )
    return report


def run_group_report(
    rounds: Sequence[Mapping[str, Any]], planted: Sequence[int], tail: int = 10
) -> dict[str, Any]:
    """Summarise :func:`round_group_report` over a run.

    Parameters
    ----------
    rounds : Sequence[Mapping[str, Any]]
        The lines of ``rounds.jsonl``, in order.
    planted : Sequence[int]
        Planted group of each partition id.
    tail : int (default: 10)
        Rounds averaged in ``tail``.

    Returns
    -------
    dict[str, Any]
        ``nmi-mean`` (over rounds where it is defined) and ``nmi-rounds`` (how many),
        ``nmi-registry-mean`` likewise; ``final`` (the last round's report); ``cma``:
        the mean over all rounds of each group's accuracy and of both disagreements
        (the paper plots cumulative moving averages, §5.2); ``tail``: the same means
        over the last ``tail`` rounds only.
    """
    reports = [round_group_report(entry, planted) for entry in rounds]
    summary: dict[str, Any] = {"final": reports[-1] if reports else {}}
    for key in ("nmi", "nmi-registry"):
        values = [r[key] for r in reports if r.get(key) is not None]
        summary[f"{key}-mean"] = float(np.mean(values)) if values else None
        summary[f"{key}-rounds"] = len(values)
    summary["cma"] = _means(reports)
    summary["tail"] = _means(reports[-tail:])
    return summary


def _means(reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    means: dict[str, Any] = {}
    groups = sorted({g for r in reports for g in r.get("acc-group", {})})
    means["acc-group"] = {
        g: float(np.mean([r["acc-group"][g] for r in reports if g in r.get("acc-group", {})]))
        for g in groups
    }
    for key in ("disagreement-all", "disagreement-participants"):
        values = [r[key] for r in reports if key in r]
        means[key] = float(np.mean(values)) if values else None
    return means
