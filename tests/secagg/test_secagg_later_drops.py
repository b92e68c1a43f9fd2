"""Dropouts in a two-round form's later secure sums (Semi-VRed, FedFa, FairFed).

A two-round form runs three secure sums in one round: two sums of scalars whose public
statistics the server broadcasts, then the weighted sum. A client lost in a later sum
(docs/site/howto/aggregate-securely.md, "Dropouts in a two-round form") still counts in
the statistics already summed, but not in the sums after: the round completes over the
survivors, each computing its weight from those statistics, as long as every client
keeps ``secagg-reconstruction-threshold`` live neighbours; otherwise it is skipped and
recorded. Each test below works the survivors' weights by hand from the clear run's
replies (the same clients train the same from the same seed, so their updates and
reported values are the secure run's) and checks the secure model, or the average
FedFa's momentum steps from, within the round's recorded ``secagg-bound``, which adds
the statistics' error to the quantisation bound.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from flwr.app import Message

from fairfl.secagg.protocol import Stage
from fairfl.simulation import run_inprocess
from fairfl.strategies.fedfa import FedFa
from tests.secagg.test_secagg_rules import (
    ADULT,
    FEDFA_BETA,
    SEMIVRED_BETA,
    SHARES,
    C,
    Q,
    _config,
    _float32_slack,
    _silent_at,
)

SECURE = {"secure-aggregation": "secagg+", **SHARES}
NODES = [1001, 1002, 1003, 1004, 1005]
GONE = 1005
SURVIVORS = [1001, 1002, 1003, 1004]
#: Each statistic's error: a sum of scalars over n <= 5 clients, every weight a_max, is
#: within n 3C / Q of its clear value, and is divided by a sum of shares >= 1.
E = 5 * 3 * C / Q


def _clear_round(tmp_path, config):
    """The clear run of round 1: the start model, and each node's model and metrics."""
    start: list[np.ndarray] = []
    trained: dict[int, list[np.ndarray]] = {}
    metrics: dict[int, dict] = {}

    def capture(instruction: Message, reply: Message) -> Message:
        if instruction.metadata.message_type == "train" and not reply.has_error():
            node = instruction.metadata.dst_node_id
            sent = instruction.content.array_records["arrays"].values()
            start[:] = [np.asarray(a.numpy(), np.float64) for a in sent]
            arrays = reply.content.array_records["arrays"].values()
            trained[node] = [np.asarray(a.numpy(), np.float64) for a in arrays]
            metrics[node] = {
                k: v for r in reply.content.metric_records.values() for k, v in r.items()
            }
        return reply

    outcome = run_inprocess(_config(tmp_path, "clear", **config), reply_filter=capture)
    assert sorted(trained) == NODES
    return outcome, start, trained, metrics


def _average(start, trained, weights: dict[int, float]) -> list[np.ndarray]:
    """w^t + Σ_k λ_k (w_k - w^t) / Σ_k λ_k over the nodes ``weights`` names."""
    total = sum(weights.values())
    return [
        w + sum(lam * (trained[node][i] - w) for node, lam in weights.items()) / total
        for i, w in enumerate(start)
    ]


def _gap(a: list[np.ndarray], b) -> float:
    return max(
        float(np.abs(x - np.asarray(y, np.float64)).max()) for x, y in zip(a, b, strict=True)
    )


def _secure_round(tmp_path, config, sums: set[int], gone: tuple[int, ...] = (GONE,)):
    """Round 1 under SecAgg+, ``gone`` silent at the collect stage of the sums ``sums``."""
    return run_inprocess(
        _config(tmp_path, "secure", **config, **SECURE),
        reply_filter=_silent_at(Stage.COLLECT_MASKED_VECTORS, set(gone), {1}, sums),
    )


def _lost_in_the_sum_after(record) -> None:
    assert record.skipped is None
    assert record.accepted == SURVIVORS
    assert record.dropped == {GONE: "secure aggregation: lost at stage collect_masked_vectors"}
    assert record.diagnostics["secagg-clients"] == 4


def test_semivred_client_lost_in_the_second_sum(tmp_path):
    # 1005 masks σ n_k F_k in the first sum, then goes silent at the collect stage of the
    # second: f̄ is the five clients', A and the weighted sum the four survivors' (eq. 12).
    config = {"strategy": "semivred"}
    _, start, trained, metrics = _clear_round(tmp_path, config)
    secure = _secure_round(tmp_path, config, sums={2})
    record = secure.strategy.train_records[1]
    _lost_in_the_sum_after(record)
    n = {k: metrics[k]["num-examples"] for k in NODES}
    loss = {k: metrics[k]["loss-before-training"] for k in NODES}
    mean = sum(n[k] * loss[k] for k in NODES) / sum(n.values())  # f̄ over all five
    excess = {k: max(loss[k] - mean, 0.0) for k in SURVIVORS}
    big_a = sum(n[k] * excess[k] for k in SURVIVORS) / sum(n[k] for k in SURVIVORS)
    assert record.diagnostics["secagg-mean-loss"] == pytest.approx(mean, abs=E)
    assert record.diagnostics["secagg-excess"] == pytest.approx(big_a, abs=E)
    weights = {k: n[k] * (1 + 2 * SEMIVRED_BETA * (excess[k] - big_a)) for k in SURVIVORS}
    assert min(weights.values()) > 0  # every survivor can mask its weight
    gap = _gap(_average(start, trained, weights), [a.numpy() for a in secure.arrays.values()])
    assert gap <= record.diagnostics["secagg-bound"] + _float32_slack(secure.arrays)


def test_fedfa_client_lost_in_the_second_sum(tmp_path, monkeypatch):
    # 1005 masks Acc_k in the first sum and goes silent in the second: Σ Acc is the five
    # clients', Σ I^acc and the weighted sum the survivors' (spec-fedfa F1-F5), each
    # survivor's participation share 1/4. The momentum steps from the average (checked).
    averages: list[list[np.ndarray]] = []
    step = FedFa.step_from_average

    def spy(self, server_round, global_arrays, average):
        averages.append([np.asarray(a, np.float64).copy() for a in average])
        return step(self, server_round, global_arrays, average)

    config = {"strategy": "fedfa"}
    _, start, trained, metrics = _clear_round(tmp_path, config)
    monkeypatch.setattr(FedFa, "step_from_average", spy)
    secure = _secure_round(tmp_path, config, sums={2})
    record = secure.strategy.train_records[1]
    _lost_in_the_sum_after(record)
    accuracy = {k: metrics[k]["acc-after-training"] for k in NODES}
    total = sum(accuracy.values())
    assert record.diagnostics["secagg-accuracy-total"] == pytest.approx(total, abs=E)
    information = {k: max(-math.log2(accuracy[k] / total + 1e-6), 0.0) for k in SURVIVORS}
    information_total = sum(information.values())
    assert information_total > 0
    weights = {
        k: (1 - FEDFA_BETA) * information[k] / information_total + FEDFA_BETA / 4 for k in SURVIVORS
    }
    (average,) = averages
    gap = _gap(_average(start, trained, weights), average)
    assert gap <= record.diagnostics["secagg-bound"] + _float32_slack(secure.arrays)


def test_fairfed_client_lost_in_the_weighted_sum(tmp_path):
    # 1005 is in both sums of scalars (the summed counts and Σ ω, then mean Δ) and goes
    # silent in the weighted sum: each survivor's ω̄_k is the clear rule's five-client
    # weight before normalising (FF6), and the quotient renormalises them over the four.
    config = {"strategy": "fairfed", **ADULT}
    clear, start, trained, _ = _clear_round(tmp_path, config)
    secure = _secure_round(tmp_path, config, sums={3})
    record = secure.strategy.train_records[1]
    _lost_in_the_sum_after(record)
    clear_record = clear.strategy.train_records[1]
    # The statistics are the five clients': the counts exact, mean Δ within 2e / 5.
    for key, tolerance in (("fairfed-global-metric", 0.0), ("fairfed-delta-mean", 2 * E / 5)):
        assert record.diagnostics[key] == pytest.approx(
            clear_record.diagnostics[key], abs=tolerance
        )
    weights = {k: clear_record.weights[k] for k in SURVIVORS}
    gap = _gap(_average(start, trained, weights), [a.numpy() for a in secure.arrays.values()])
    assert gap <= record.diagnostics["secagg-bound"] + _float32_slack(secure.arrays)


def test_drops_beyond_the_threshold_in_a_later_sum_skip_the_round(tmp_path):
    # Three of five silent at the weighted sum's collect stage: each client keeps 2 live
    # neighbours, below the threshold 3. The round keeps the initial model, its record
    # says why and names each lost client's stage, and the run goes on to round 2.
    config = {"strategy": "semivred", "num-server-rounds": 2}
    out = tmp_path / "secure"
    outcome = _secure_round(tmp_path, config, sums={3}, gone=(1003, 1004, 1005))
    first, second = outcome.strategy.train_records[1], outcome.strategy.train_records[2]
    assert first.skipped is not None and "reconstruction threshold 3" in first.skipped
    assert {n: first.dropped[n] for n in (1003, 1004, 1005)} == dict.fromkeys(
        (1003, 1004, 1005), "secure aggregation: lost at stage collect_masked_vectors"
    )
    assert first.diagnostics["skipped-aggregate"] == 1
    assert "secagg-mean-loss" in first.diagnostics  # the sums of scalars completed
    assert second.skipped is None and second.diagnostics["secagg-clients"] == 5
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert "reconstruction threshold 3" in summary["skipped_rounds"]["1"]
