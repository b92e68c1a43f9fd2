"""fairfl's SecAgg+ stages end to end on an in-memory Grid, with a ClientApp of known updates.

Five nodes (ids 1..5); node k trains to ``w^t + 0.01 k`` on every value and reports
``n_k = 10 k`` examples, so FedAvg's mean update over a set S of nodes is
``0.01 Σ_S 10k·k / Σ_S 10k = 0.01 Σ_S k² / Σ_S k``:

* all five: 0.01 · 55 / 15 = 0.0366667
* 1..4: 0.01 · 30 / 10 = 0.03
* 1..3: 0.01 · 14 / 6 = 0.0233333

With ``secagg-max-weight`` 1000 and Q = 2^22, node k's weight enters as
``round(2^22 · 10k / 1000)``: 41943, 83886, 125829, 167772, 209715 (sum 629145). The
quantisation bound is ``n (2C + U) / Σ round(Q a_k / a_max)`` (fairfl.secagg.protocol).
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp

from fairfl._compat import server_task_identity
from fairfl.secagg.client import secaggplus_mod
from fairfl.secagg.config import SecAggSettings
from fairfl.secagg.protocol import RECORD, Stage
from fairfl.secagg.server import SecAggPlusDriver
from fairfl.simulation.inprocess import InMemoryGrid

NODES = (1, 2, 3, 4, 5)
C = 1.0  # every weighted update here is far inside [-1, 1]
WEIGHTS = {1: 41943, 2: 83886, 3: 125829, 4: 167772, 5: 209715}  # round(2^22 · 10k / 1000)
GLOBAL = {"w": np.zeros(3, np.float32), "b": np.full((2, 2), 0.5, np.float32)}


def _train(message: Message, context) -> Message:
    """Node k: w^t + 0.01 k everywhere, n_k = 10 k, loss k."""
    k = context.node_id
    arrays = message.content.array_records["arrays"]
    trained = {key: Array(arrays[key].numpy() + np.float32(0.01 * k)) for key in arrays}
    metrics = {"num-examples": 10 * k, "loss-before-training": float(k)}
    content = RecordDict({"arrays": ArrayRecord(trained), "metrics": MetricRecord(metrics)})
    return Message(content, reply_to=message)


def _app(mod: bool = True) -> ClientApp:
    app = ClientApp(mods=[secaggplus_mod] if mod else [])
    app.train()(_train)
    return app


def _run(settings, reply_filter=None, app=None, parts=None):
    """One secure round of FedAvg's client part over the five nodes."""
    grid = InMemoryGrid(app or _app(), {k: {} for k in NODES}, {}, reply_filter=reply_filter)
    with server_task_identity(1):
        content = RecordDict(
            {
                "arrays": ArrayRecord({k: Array(v) for k, v in GLOBAL.items()}),
                "config": ConfigRecord({"server-round": 1}),
            }
        )
        messages = [
            Message(content, dst_node_id=k, message_type=MessageType.TRAIN, group_id="1")
            for k in NODES
        ]
        screen = parts or partial(_fedavg_parts, scale=1.0)
        return SecAggPlusDriver(settings).run(
            grid,
            messages,
            screen,
            arrays_key="arrays",
        )


def _fedavg_parts(replies: list[Message], scale: float) -> dict[int, dict]:
    """FedAvg's client part of each reply: σ n_k, n_k as the reply reports it."""
    return {
        int(r.metadata.src_node_id): {
            "weight-kind": "num-examples",
            "weight-scale": scale,
            "num-examples": int(r.content.metric_records["metrics"]["num-examples"]),
        }
        for r in replies
    }


def _silent(stage: str, nodes: set[int]):
    """A reply filter: ``nodes`` go silent at ``stage`` (and stay in the run otherwise)."""

    def reply_filter(instruction: Message, reply: Message) -> Message | None:
        record = instruction.content.config_records.get(RECORD)
        if (
            record is not None
            and record["stage"] == stage
            and instruction.metadata.dst_node_id in nodes
        ):
            return None
        return reply

    return reply_filter


def _settings(shares=5, threshold=3) -> SecAggSettings:
    return SecAggSettings(
        secure_aggregation="secagg+",
        secagg_num_shares=shares,
        secagg_reconstruction_threshold=threshold,
        secagg_clipping_range=C,
    )


def _check_mean(result, expected: float, nodes: tuple[int, ...]) -> None:
    assert result.skipped is None
    assert sorted(int(r.metadata.src_node_id) for r in result.replies) == list(nodes)
    assert result.weight_total == sum(WEIGHTS[k] for k in nodes)
    bound = len(nodes) * (2 * C + C) / result.weight_total
    for mean in result.mean:
        assert np.abs(mean - expected).max() <= bound


def test_the_sum_of_five_masked_updates_is_their_weighted_mean():
    result = _run(_settings())
    _check_mean(result, 0.01 * 55 / 15, NODES)
    assert [m.shape for m in result.mean] == [(3,), (2, 2)]
    assert result.lost == {}


@pytest.mark.parametrize(
    ("stage", "dropped", "expected", "survivors"),
    [
        # Silent before sharing keys: no mask involves them.
        (Stage.SETUP, {5}, 0.03, (1, 2, 3, 4)),
        # Silent after sharing keys: their pairwise masks are rebuilt from sk1's shares.
        (Stage.COLLECT_MASKED_VECTORS, {5}, 0.03, (1, 2, 3, 4)),
        (Stage.COLLECT_MASKED_VECTORS, {4, 5}, 0.01 * 14 / 6, (1, 2, 3)),
        # Silent at unmask: its vector is in the sum, its seed rebuilt from the others.
        (Stage.UNMASK, {5}, 0.01 * 55 / 15, NODES),
    ],
)
def test_fewer_drops_than_the_threshold_allows_leave_the_survivors_mean(
    stage, dropped, expected, survivors
):
    result = _run(_settings(), reply_filter=_silent(stage, dropped))
    _check_mean(result, expected, survivors)
    lost = {k: v for k, v in result.lost.items() if k in dropped}
    if stage == Stage.UNMASK:
        assert result.lost == {}  # in the sum: not lost
    else:
        assert set(lost) == dropped and all(stage in v for v in lost.values())


def test_more_drops_than_the_threshold_allows_skip_the_round():
    # 5 shares, threshold 3: three silent at the collect stage leave each node 2 live
    # neighbours (itself included), fewer than 3.
    result = _run(_settings(), reply_filter=_silent(Stage.COLLECT_MASKED_VECTORS, {3, 4, 5}))
    assert result.mean is None
    assert "fewer than the reconstruction threshold 3" in result.skipped


def test_too_few_shares_at_unmask_skip_the_round():
    result = _run(_settings(), reply_filter=_silent(Stage.UNMASK, {2, 3, 4}))
    assert result.mean is None and "too few shares" in result.skipped


def test_a_client_without_the_mod_never_enters_the_round():
    # Its reply carries its whole model: refused at setup, not passed on, round goes on.
    plain = {3}

    def mixed(instruction: Message, reply: Message) -> Message | None:
        if (
            instruction.metadata.dst_node_id in plain
            and RECORD in instruction.content.config_records
        ) and instruction.content.config_records[RECORD]["stage"] == Stage.SETUP:
            return Message(_train(instruction, _Ctx(3)).content, reply_to=instruction)
        return reply

    result = _run(_settings(shares=5, threshold=2), reply_filter=mixed)
    _check_mean(result, 0.01 * (1 + 4 + 16 + 25) / (1 + 2 + 4 + 5), (1, 2, 4, 5))
    assert "lacks fairfl.secagg.secaggplus_mod" in result.lost[3]
    for reply in result.replies:
        assert all(len(record) == 0 for record in reply.content.array_records.values())


def test_a_weight_above_max_weight_is_refused_by_the_client():
    # Node 5's weight 50 over a_max 45: an error reply, the client is lost at collect.
    settings = SecAggSettings(
        secure_aggregation="secagg+",
        secagg_num_shares=5,
        secagg_reconstruction_threshold=3,
        secagg_clipping_range=C,
        secagg_max_weight=45.0,
    )
    result = _run(settings)
    assert result.skipped is None
    assert Stage.COLLECT_MASKED_VECTORS in result.lost[5]
    assert "exceeds secagg-max-weight (45)" in result.lost[5]
    assert sorted(int(r.metadata.src_node_id) for r in result.replies) == [1, 2, 3, 4]
    mean = result.mean[0]
    assert np.abs(mean - 0.03).max() <= 4 * 3 * C / result.weight_total


def test_a_weight_scaled_to_max_weight_is_not_refused_for_its_rounding():
    # The server's scale a_max / max n_k puts node 5 (n = 50) at a_max, but in floats
    # (900.5 / 50) · 50 = 900.5000000000001 > 900.5: still accepted, at ratio 1.
    max_weight = 900.5
    assert (max_weight / 50) * 50 > max_weight
    settings = SecAggSettings(
        secure_aggregation="secagg+",
        secagg_num_shares=5,
        secagg_reconstruction_threshold=3,
        secagg_clipping_range=C,
        secagg_max_weight=max_weight,
    )

    result = _run(settings, parts=partial(_fedavg_parts, scale=max_weight / 50))
    assert result.lost == {} and result.num_clients == 5
    # Node k's ratio is k/5 (node 5's clamped to 1): Σ round(2^22 k / 5) over k = 1..5.
    assert result.weight_total == sum(round(2**22 * k / 5) for k in NODES)
    for mean in result.mean:
        assert np.abs(mean - 0.01 * 55 / 15).max() <= 5 * 3 * C / result.weight_total


def test_three_shares_threshold_two_a_ring_of_neighbours():
    # Flower's example setting: each node shares with itself and one node each side.
    result = _run(_settings(shares=3, threshold=2))
    _check_mean(result, 0.01 * 55 / 15, NODES)


class _Ctx:
    def __init__(self, node_id: int) -> None:
        self.node_id = node_id


def test_a_round_that_sampled_nobody_is_skipped_not_an_error():
    from fairfl.secagg.server import SecureGrid

    grid = SecureGrid(InMemoryGrid(_app(), {}, {}), SecAggPlusDriver(_settings()), dict, "arrays")
    assert list(grid.send_and_receive([])) == []
    assert grid.last is not None and grid.last.skipped == "no client was sent a train message"
