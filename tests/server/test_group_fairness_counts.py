"""Hostile evaluation group-counts never end a round (issue 47, item 1).

Evaluation replies' ``group-counts`` are pooled into the round's group fairness in
``rounds.jsonl``. Summed as int64, two counts of 2^63 - 1 wrapped negative and the
round's record raised; the counts are Python ints now, so the pooled metrics are those
of the exact counts.
"""

from fairfl.contract.replies import EvaluateReply
from fairfl.server.group_fairness import add_group_fairness

BIG = 2**63 - 1


def evaluation(node_id: int, counts: tuple[int, ...]) -> EvaluateReply:
    return EvaluateReply(
        node_id=node_id, num_examples=10, eval_loss=0.5, eval_acc=0.5, group_counts=counts
    )


def test_wrapping_and_empty_counts_are_pooled_exactly():
    evaluations = [evaluation(1, (BIG,) * 8), evaluation(2, (BIG,) * 8), evaluation(3, (0,) * 8)]
    entry = {"clients": [{} for _ in evaluations], "metrics": {}}
    add_group_fairness(entry, evaluations)
    assert entry["group_counts"] == [2 * BIG] * 8
    # Every cell equal: each group selects half, has half positives and TPR, FPR and
    # accuracy 1/2, so every difference is 0 and the pooled accuracy 1/2.
    assert {k: entry["metrics"][k] for k in ("dp-diff", "eop-diff", "group-acc")} == {
        "dp-diff": 0.0,
        "eop-diff": 0.0,
        "group-acc": 0.5,
    }
    # A client that counted no sample has no defined metric of its own.
    assert entry["clients"][2] == {"group_counts": [0] * 8}
