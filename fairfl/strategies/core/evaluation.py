"""What an evaluation round returns: the kept results in order and their metrics.

:meth:`~fairfl.strategies.core.base.FairStrategy.aggregate_evaluate` reads the replies
(:mod:`~fairfl.strategies.core.intake`), keeps the results per round and returns
:func:`evaluation_metrics` of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fairfl.contract import EvaluateReply, client_key, client_key_order, keys
from fairfl.metrics import fairness_metrics


def ordered_results(
    kept: Mapping[int, EvaluateReply], dropped: Mapping[int, str]
) -> list[EvaluateReply]:
    """The kept replies not dropped, in client-key order (the same sums whatever the ids)."""
    return sorted(
        (reply for node, reply in kept.items() if node not in dropped),
        key=lambda r: client_key_order(client_key(r.node_id, r.partition_id)),
    )


def evaluation_metrics(results: list[EvaluateReply], dropped: int) -> dict[str, Any]:
    """The evaluation metrics fairfl adds for a round's results (at least one).

    The test-sample-weighted ``eval_loss`` and ``eval_acc`` (a fraction), the count of
    ``dropped-replies``, the fairness metrics of :func:`fairfl.metrics.fairness_metrics`
    (accuracy statistics as fractions too, under their plain names: ``acc-mean``) and,
    over the results that carry a personal model's (Ditto), the same statistics,
    ``personal-`` first.
    """
    counts = np.array([r.num_examples for r in results], dtype=np.float64)
    metrics: dict[str, Any] = {
        keys.EVAL_LOSS: float(np.dot(counts, [r.eval_loss for r in results]) / counts.sum()),
        keys.EVAL_ACC: float(np.dot(counts, [r.eval_acc for r in results]) / counts.sum()),
        "dropped-replies": dropped,
    }
    metrics.update(
        fairness_metrics(
            [r.eval_acc for r in results],
            [r.num_examples for r in results],
            [r.eval_loss for r in results],
        )
    )
    personal = [
        (r.personal_eval_loss, r.personal_eval_acc, r.num_examples)
        for r in results
        if r.personal_eval_loss is not None and r.personal_eval_acc is not None
    ]
    if personal:
        losses = [loss for loss, _, _ in personal]
        accuracies = [acc for _, acc, _ in personal]
        sizes = [size for _, _, size in personal]
        weights = np.array(sizes, dtype=np.float64)
        metrics[keys.PERSONAL_EVAL_LOSS] = float(np.dot(weights, losses) / weights.sum())
        metrics[keys.PERSONAL_EVAL_ACC] = float(np.dot(weights, accuracies) / weights.sum())
        metrics.update(
            {
                f"personal-{name}": value
                for name, value in fairness_metrics(accuracies, sizes, losses).items()
            }
        )
    return metrics
