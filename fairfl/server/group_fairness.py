"""Group fairness of a round from the clients' ``group-counts`` (issue 37).

The server sums the counts of every client that sent them (the pooled predictions'
counts) and computes the four differences of :mod:`fairfl.contract.sensitive`, globally
and per client. They join the round's record in ``rounds.jsonl``: the global ones in
``metrics`` (so summary, telemetry, the dashboard and ``fairfl compare`` see them beside
the accuracy statistics), each client's counts and differences in its ``clients`` entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fairfl.contract.replies import EvaluateReply
from fairfl.contract.sensitive import defined_metrics, group_fairness, pooled_group_metrics


def add_group_fairness(entry: dict[str, Any], evaluations: Sequence[EvaluateReply]) -> None:
    """Add the round's group fairness to ``entry`` (a ``rounds.jsonl`` record) in place.

    ``entry["clients"]`` must list ``evaluations`` in order. Nothing is added when no
    client sent ``group-counts``; a client whose counts have another length than the
    first sender's (another number of attribute values) is left out of the sum and
    named in ``entry["group_fairness_skipped"]``.

    Parameters
    ----------
    entry : dict[str, Any]
        The round's record, with ``clients`` and ``metrics``.
    evaluations : Sequence[EvaluateReply]
        The round's validated evaluate replies.
    """
    senders = [(i, r) for i, r in enumerate(evaluations) if r.group_counts is not None]
    if not senders:
        return
    lists = [list(r.group_counts or ()) for _, r in senders]
    for (index, _), counts in zip(senders, lists, strict=True):
        client = entry["clients"][index]
        client["group_counts"] = counts
        client.update(defined_metrics(group_fairness(counts)))
    metrics, total, skipped = pooled_group_metrics(lists)
    entry["metrics"].update(metrics)
    entry["group_counts"] = total
    if skipped:
        entry["group_fairness_skipped"] = [senders[i][1].node_id for i in skipped]
