"""The orchestrator's collaborators split out of ``FairStrategy`` (issue 34 item 1), no Grid.

Settings (:mod:`fairfl.strategies.core.options`), evaluation metrics
(:mod:`fairfl.strategies.core.evaluation`), λ diagnostics and records
(:mod:`fairfl.strategies.core.records`), the size sampler's weighing and checkpoint state
(:mod:`fairfl.strategies.core.sampling`) and the retry without rejected replies
(:mod:`fairfl.strategies.core.intake`). Numbers worked by hand.
"""

from __future__ import annotations

import math
import re
from functools import partial

import numpy as np
import pytest

from fairfl.contract import EvaluateReply, ReplyError, TrainReply, keys
from fairfl.strategies.core import intake
from fairfl.strategies.core.errors import RejectedReplies
from fairfl.strategies.core.evaluation import evaluation_metrics, ordered_results
from fairfl.strategies.core.options import StrategyOptions
from fairfl.strategies.core.records import (
    CLIENT_REPORT_KEYS,
    TrainRoundRecord,
    aggregate_app_metrics,
    weight_diagnostics,
)
from fairfl.strategies.core.rounds import DeferredUpdates
from fairfl.strategies.core.sampling import SizeSampler


def reply(node: int, n: int, partition: int | None = None) -> TrainReply:
    metrics: dict[str, int | float | list[float]] = {}
    if partition is not None:
        metrics[keys.PARTITION_ID] = partition
    return TrainReply(node_id=node, num_examples=n, arrays=[np.zeros(1)], metrics=metrics)


def test_options_split_the_rules_keywords_from_every_rules_settings():
    ours, rule = StrategyOptions.split({"fraction_train": 0.5, "q": 2.0, "max_loss": 9})
    assert ours == {"fraction_train": 0.5, "max_loss": 9}
    assert rule == {"q": 2.0}
    options = StrategyOptions(**ours)
    assert options.max_loss == 9.0 and isinstance(options.max_loss, float)
    flower = options.flower_keywords()
    assert flower["fraction_train"] == 0.5
    # FedAvg gets fairfl's app-metric average when none is given.
    assert flower["train_metrics_aggr_fn"] is aggregate_app_metrics
    assert "max_loss" not in flower


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("fraction_evaluate", 1.5, "fraction_evaluate must be in [0, 1], got 1.5"),
        ("evaluate_every", 0, "evaluate_every must be an int >= 1, got 0"),
        ("max_loss", math.inf, "max_loss must be a finite number, got inf"),
        ("client_sampling", "random", "client_sampling must be one of"),
    ],
)
def test_options_refuse_a_bad_setting_naming_it(setting, value, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        StrategyOptions(**{setting: value})


def test_a_share_cap_is_refused_for_a_rule_without_weights_naming_the_rule():
    options = StrategyOptions(max_client_share=0.5)
    options.check_share_cap("TERM", reweighted=True)
    with pytest.raises(ValueError, match=re.escape("FedMGDA+ is not one, got 0.5")):
        options.check_share_cap("FedMGDA+", reweighted=False)


def test_sampling_keywords_pick_the_phase_and_follow_the_server():
    from fairfl.strategies.core.base import sampling_keywords
    from fairfl.strategies.fedavg import FedAvg

    strategy = FedAvg(fraction_train=0.25, fraction_evaluate=0.75, min_train_nodes=3)
    assert sampling_keywords(strategy, train=True)["fraction"] == 0.25
    assert sampling_keywords(strategy, train=True)["min_nodes"] == 3
    assert sampling_keywords(strategy, train=False)["fraction"] == 0.75
    assert sampling_keywords(strategy, train=False)["min_nodes"] == 2
    # The ServerApp lowers min_available_nodes to a simulation's SuperNodes after the
    # strategy was built: sampling must wait for those, not num-partitions (a run with
    # 2 simulated SuperNodes waited for 20 until round-timeout).
    assert strategy.options.min_available_nodes == 2
    strategy.min_available_nodes = 7
    assert sampling_keywords(strategy, train=True)["min_available_nodes"] == 7


def test_evaluation_metrics_weigh_by_test_samples():
    results = [
        EvaluateReply(node_id=7, num_examples=1, eval_loss=2.0, eval_acc=0.5),
        EvaluateReply(node_id=3, num_examples=3, eval_loss=1.0, eval_acc=1.0),
    ]
    metrics = evaluation_metrics(results, dropped=2)
    assert metrics[keys.EVAL_LOSS] == pytest.approx((1 * 2.0 + 3 * 1.0) / 4)  # 1.25
    assert metrics[keys.EVAL_ACC] == pytest.approx((1 * 0.5 + 3 * 1.0) / 4)  # 0.875
    assert metrics["dropped-replies"] == 2
    assert metrics["acc-mean"] == pytest.approx(0.75)  # unweighted across clients
    assert not any(name.startswith("personal-") for name in metrics)


def test_evaluation_metrics_of_personal_models_only_over_results_that_carry_them():
    results = [
        EvaluateReply(1, 1, 2.0, 0.5, personal_eval_loss=0.5, personal_eval_acc=0.9),
        EvaluateReply(2, 3, 1.0, 1.0),
    ]
    metrics = evaluation_metrics(results, dropped=0)
    assert metrics[keys.PERSONAL_EVAL_LOSS] == pytest.approx(0.5)
    assert metrics[keys.PERSONAL_EVAL_ACC] == pytest.approx(0.9)
    assert metrics["personal-acc-mean"] == pytest.approx(0.9)


def test_evaluation_results_leave_out_drops_in_client_key_order():
    kept = {
        5: EvaluateReply(5, 1, 1.0, 1.0, partition_id=2),
        6: EvaluateReply(6, 1, 1.0, 1.0, partition_id=0),
        9: EvaluateReply(9, 1, 1.0, 1.0, partition_id=1),
    }
    results = ordered_results(kept, {9: "eval_acc is NaN"})
    assert [r.node_id for r in results] == [6, 5]  # partitions 0, 2


def test_weight_diagnostics_by_hand():
    weights = np.array([0.5, 0.25, 0.25])
    diagnostics = weight_diagnostics(weights, capped_clients=None)
    assert diagnostics["lambda-max"] == 0.5
    assert diagnostics["lambda-min"] == 0.25
    assert diagnostics["lambda-sum"] == 1.0
    # -(0.5 ln 0.5 + 2 · 0.25 ln 0.25) = 1.5 ln 2
    assert diagnostics["lambda-entropy"] == pytest.approx(1.5 * math.log(2))
    assert "capped-clients" not in diagnostics
    negative = weight_diagnostics(np.array([1.0, -0.5]), capped_clients=1)
    assert "lambda-entropy" not in negative  # no entropy of negative weights
    assert negative["capped-clients"] == 1


def test_a_skipped_round_is_recorded_with_its_reason():
    record = TrainRoundRecord.of([reply(4, 10, partition=1), reply(2, 5)], {8: "bad"}, [9])
    assert record.accepted == [4, 2]
    assert record.partition_ids == {4: 1}
    assert (record.dropped, record.unanswered) == ({8: "bad"}, [9])
    record.skip(3, "is not finite (NaN in 'w')")
    assert record.skipped == "the new global model is not finite (NaN in 'w')"
    assert record.diagnostics == {"skipped-aggregate": 1}


def test_the_size_sampler_weighs_drawn_replies_as_one_each_and_keeps_its_counts():
    sampler = SizeSampler()
    replies = [reply(1, 10), reply(2, 30)]
    census = sampler.weigh(replies, lambda r: str(r.node_id))
    assert [r.num_examples for r in census] == [10, 30]  # census round: as they are
    sampler.drawn = True
    drawn = sampler.weigh(replies, lambda r: str(r.node_id))
    assert [r.num_examples for r in drawn] == [1, 1]
    assert sampler.state() == {"size-counts": {"1": 10, "2": 30}}
    resumed = SizeSampler()
    resumed.load_state({"size-counts": {"1": "10", 2: 30}})
    assert resumed.counts == {"1": 10, "2": 30}


def test_rejected_replies_are_dropped_and_the_rest_aggregated_again():
    replies = [reply(1, 1, partition=0), reply(2, 1, partition=1), reply(3, 1)]
    record = TrainRoundRecord.of(replies, {}, [])
    record.diagnostics["loss-clip"] = 1
    calls: list[list[int]] = []
    state: list[str] = []
    deferred = DeferredUpdates()

    def aggregate(accepted: list[TrainReply]) -> str | RejectedReplies:
        calls.append([r.node_id for r in accepted])
        record.diagnostics[f"pass-{len(calls)}"] = 1
        deferred.defer(partial(state.append, f"pass-{len(calls)}"))
        if any(r.node_id == 2 for r in accepted):
            return RejectedReplies([ReplyError(2, "arrays['w']", "has NaN")])
        return "aggregated"

    accepted, result = intake.aggregate_without_rejected(aggregate, replies, record, deferred)
    assert result == "aggregated"
    assert calls == [[1, 2, 3], [1, 3]]
    assert [r.node_id for r in accepted] == [1, 3]
    assert record.accepted == [1, 3] and record.partition_ids == {1: 0}
    assert record.dropped == {2: "arrays['w'] has NaN"}
    # The aborted pass's diagnostics and state update went; the second pass's remain,
    # and no state changed before the round is accepted.
    assert record.diagnostics == {"loss-clip": 1, "pass-2": 1}
    assert state == []
    deferred.apply()
    assert state == ["pass-2"]
    deferred.apply()
    assert state == ["pass-2"]  # applied once


def test_a_round_whose_every_reply_is_rejected_aggregates_nothing_and_defers_nothing():
    replies = [reply(1, 1), reply(2, 1)]
    record = TrainRoundRecord.of(replies, {}, [])
    deferred = DeferredUpdates()
    state: list[int] = []

    def aggregate(accepted: list[TrainReply]) -> RejectedReplies:
        deferred.defer(partial(state.append, len(accepted)))
        return RejectedReplies([ReplyError(accepted[0].node_id, "arrays['w']", "has Inf")])

    accepted, result = intake.aggregate_without_rejected(aggregate, replies, record, deferred)
    assert (accepted, result) == ([], None)
    assert record.dropped == {1: "arrays['w'] has Inf", 2: "arrays['w'] has Inf"}
    deferred.apply()
    assert state == []


def app_reply(count: int, metrics: dict[str, object], extra: dict[str, object] | None = None):
    from flwr.app import MetricRecord, RecordDict

    records = {keys.METRICS: MetricRecord({keys.NUM_EXAMPLES: count, **metrics})}
    records.update({name: MetricRecord(values) for name, values in (extra or {}).items()})
    return RecordDict(records)  # type: ignore[arg-type]


def test_the_app_metric_average_by_hand_without_the_client_reports():
    # Shares 1/4 and 3/4: 2.0 and 4.0 average to 0.5 + 3.0 = 3.5; [1, 2] and [3, 4] to
    # [0.25 + 2.25, 0.5 + 3.0]; a second record's metric by the first record's weight.
    first = app_reply(
        10, {"train_loss": 2.0, "hist": [1, 2], keys.ACTIVATION: [9.0]}, {"m": {"x": 8}}
    )
    second = app_reply(
        30, {"train_loss": 4.0, "hist": [3, 4], keys.PARTITION_ID: 7}, {"m": {"x": 0}}
    )
    averaged = aggregate_app_metrics([first, second], keys.NUM_EXAMPLES)
    assert dict(averaged) == {"train_loss": 3.5, "hist": [2.5, 3.5], "x": 2.0}


def test_the_app_metric_average_is_flowers_value_for_value():
    from flwr.app import MetricRecord, RecordDict
    from flwr.serverapp.strategy.strategy_utils import aggregate_metricrecords

    rng = np.random.default_rng(5)
    replies = [
        app_reply(
            int(rng.integers(1, 500)),
            {
                "train_loss": float(rng.uniform(0, 3)),
                "hist": [int(v) for v in rng.integers(0, 9, size=4)],
                "probe": [float(v) for v in rng.normal(size=3)],
                keys.QFFL_H: 1.5,
                keys.RCFL_ETA: 0.25,
            },
        )
        for _ in range(7)
    ]
    stripped = [
        RecordDict(
            {
                name: MetricRecord({k: v for k, v in values.items() if k not in CLIENT_REPORT_KEYS})
                for name, values in reply.metric_records.items()
            }
        )
        for reply in replies
    ]
    ours = aggregate_app_metrics(replies, keys.NUM_EXAMPLES)
    flowers = aggregate_metricrecords(stripped, keys.NUM_EXAMPLES)
    assert list(ours.items()) == list(flowers.items())  # same keys, order and floats


def test_an_app_metric_that_is_a_number_in_one_reply_and_a_list_in_another_raises():
    replies = [app_reply(1, {"m": 1.0}), app_reply(1, {"m": [1.0]})]
    with pytest.raises(TypeError):
        aggregate_app_metrics(replies, keys.NUM_EXAMPLES)


@pytest.mark.parametrize(
    "value",
    [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.array(3.5),  # 0-d
        np.zeros((2, 0)),  # no values
        np.array([1.0, -2.0], dtype=">f4"),  # big-endian
        np.array([True, False]),
        np.arange(12, dtype=np.float64).reshape(3, 4).T,  # F-contiguous: Flower's path
    ],
)
def test_a_saved_array_is_flowers_array_byte_for_byte(value):
    from flwr.app import Array

    from fairfl.strategies.core.records import saved_array

    ours, flowers = saved_array(value), Array(value)
    assert (ours.dtype, ours.shape, ours.stype) == (flowers.dtype, flowers.shape, flowers.stype)
    assert ours.data == flowers.data
    assert np.array_equal(ours.numpy(), value)
