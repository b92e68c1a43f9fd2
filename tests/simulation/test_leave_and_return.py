"""A client leaves for two rounds and comes back: per-client server state survives.

In process, node 1002 is silent (no train or evaluate reply) in rounds 2 and 3 and
answers again from round 4. AFL's λ, RC-FL's learnt counts (and the α_i they give) and
Equitable FL's activation registry must keep its entry while it is away and use it
when it returns; the rounds without it say how many answered. The deployed counterpart,
SuperNodes leaving, crashing and rejoining over 50 rounds, is
``tests/deploy/test_churn_soak.py``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Message

from fairfl.contract import keys
from fairfl.contract.keys import RCFL_ALPHA
from fairfl.simulation import run_inprocess
from fairfl.strategies.afl import afl_lambda_update
from fairfl.strategies.rcfl_dual import client_alphas
from fairfl.telemetry.stream import NO_REPLY_REASON

AWAY_NODE = 1002
AWAY_ROUNDS = (2, 3)
ROUNDS = 5


class Recorder:
    """A reply filter: node 1002 silent in rounds 2-3; records every train exchange."""

    def __init__(self) -> None:
        #: seen[round][node] = (instruction config, reply metrics) of train messages.
        self.seen: dict[int, dict[int, tuple[dict, dict]]] = defaultdict(dict)

    def __call__(self, instruction: Message, reply: Message) -> Message | None:
        config = dict(instruction.content[keys.CONFIG])
        server_round = int(config[keys.SERVER_ROUND])
        node = int(instruction.metadata.dst_node_id)
        if node == AWAY_NODE and server_round in AWAY_ROUNDS:
            return None
        if instruction.metadata.message_type == "train":
            self.seen[server_round][node] = (config, dict(reply.content[keys.METRICS]))
        return reply


def run(tmp_path: Path, **config: Any) -> tuple[Any, list[dict], Recorder]:
    recorder = Recorder()
    outcome = run_inprocess(
        {"num-server-rounds": ROUNDS, "out-dir": str(tmp_path), **config},
        reply_filter=recorder,
    )
    lines = [json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    assert [line["round"] for line in lines] == list(range(1, ROUNDS + 1))
    return outcome, lines, recorder


def check_counts(
    lines: list[dict], num_nodes: int, sampled: tuple[str, ...] = ("train", "evaluate")
) -> None:
    """Rounds without the node: all sampled, one fewer answered, metrics over those."""
    for line in lines:
        away = line["round"] in AWAY_ROUNDS
        answered = {c["node_id"] for c in line["clients"]}
        trained = {w["node_id"] for w in line["train"]["weights"]}
        assert (AWAY_NODE in answered) is (AWAY_NODE in trained) is (not away)
        assert line["sampled"] == dict.fromkeys(sampled, num_nodes)
        assert len(answered) == num_nodes - away
        assert line["metrics"]["num-clients"] == len(answered)
        # Every sampled node is accounted for: the silent one is listed as dropped.
        silent = {str(AWAY_NODE): NO_REPLY_REASON} if away else {}
        assert line["evaluate_dropped"] == silent
        assert line["train"]["dropped"] == silent
        assert len(trained) + len(line["train"]["dropped"]) == line["sampled"]["train"]
        weights = [w["weight"] for w in line["train"]["weights"]]
        assert sum(weights) == pytest.approx(1.0)


def partition_of(recorder: Recorder, node: int) -> str:
    """The client key of ``node``: the partition id its round-1 train reply reported."""
    return str(int(recorder.seen[1][node][1][keys.PARTITION_ID]))


def test_afl_lambda_of_an_absent_client_follows_the_recursion(tmp_path):
    lr = 0.3
    outcome, lines, recorder = run(
        tmp_path,
        strategy="afl",
        **{"num-partitions": 4, "afl-lambda-lr": lr, "afl-variant": "propfair-code"},
    )
    check_counts(lines, 4)
    nodes = sorted(recorder.seen[1])
    counts = np.array([recorder.seen[1][n][1][keys.NUM_EXAMPLES] for n in nodes], float)
    lam = counts / counts.sum()  # λ^0 = p; every node is admitted in round 1
    for line in lines:
        seen = recorder.seen[line["round"]]
        # An absent client's loss counts as 0: its λ moves only through the projection.
        losses = [seen[n][1][keys.TRAIN_LOSS] if n in seen else 0.0 for n in nodes]
        previous, lam = lam, afl_lambda_update(lam, losses, lr)
        mine = np.array([lam[i] for i, n in enumerate(nodes) if n in seen])
        weights = sorted((w["node_id"], w["weight"]) for w in line["train"]["weights"])
        np.testing.assert_allclose([w for _, w in weights], mine / mine.sum(), atol=1e-12)
        assert line["train"]["diagnostics"]["afl-known-clients"] == 4
        if line["round"] in AWAY_ROUNDS:
            away = nodes.index(AWAY_NODE)
            assert 0 <= lam[away] <= previous[away]
    stored = outcome.strategy.state_dict()["lambdas"]  # by client key: the partition id
    np.testing.assert_allclose([stored[partition_of(recorder, n)] for n in nodes], lam, atol=1e-12)
    assert sum(stored.values()) == pytest.approx(1.0)


def test_rcfl_keeps_the_count_of_an_absent_client_for_its_alpha(tmp_path):
    alpha = 0.5
    outcome, lines, recorder = run(
        tmp_path,
        strategy="rcfl",
        **{"num-partitions": 4, "rcfl-alpha": alpha, "rcfl-alpha-rule": "uniform-cap"},
    )
    check_counts(lines, 4)
    nodes = sorted(recorder.seen[1])
    counts = [int(recorder.seen[1][n][1][keys.NUM_EXAMPLES]) for n in nodes]
    # α_i = α n p_i over all 4 known clients, the absent one included, from round 2 on;
    # round 1 sends the shared α (no count known yet).
    expected = dict(
        zip(
            nodes,
            client_alphas(np.array(counts) / sum(counts), alpha, "uniform-cap", 4),
            strict=True,
        )
    )
    assert {c[RCFL_ALPHA] for c, _ in recorder.seen[1].values()} == {alpha}
    for server_round in range(2, ROUNDS + 1):
        sent = {n: c[RCFL_ALPHA] for n, (c, _) in recorder.seen[server_round].items()}
        assert sent == pytest.approx({n: expected[n] for n in sent}, rel=1e-12)
    assert AWAY_NODE in recorder.seen[4]  # it is back, with the α of its known count
    assert expected[AWAY_NODE] != pytest.approx(alpha)
    state = outcome.strategy.state_dict()
    assert state["counts"] == {
        partition_of(recorder, n): c for n, c in zip(nodes, counts, strict=True)
    }
    assert np.isfinite(state["eta"])
    for line in lines:
        weights = {w["node_id"]: w["weight"] for w in line["train"]["weights"]}
        present = [n for n in nodes if n in weights]
        shares = np.array([counts[nodes.index(n)] for n in present], float)
        np.testing.assert_allclose([weights[n] for n in present], shares / shares.sum())


def test_equitable_registry_keeps_an_absent_clients_vector(tmp_path):
    outcome, lines, recorder = run(
        tmp_path,
        strategy="equitable",
        partitioner="groups",
        lr=0.1,
        **{"group-sizes": "2,3", "num-partitions": 5, "equitable-scope": "registry"},
    )
    check_counts(lines, 5)
    for line in lines:
        diagnostics = line["train"]["diagnostics"]
        # The registry clusters every client seen, the absent one with its last vector.
        assert diagnostics["registry-size"] == 5
        assert str(AWAY_NODE) in diagnostics["registry-clusters"]
        assert (str(AWAY_NODE) in diagnostics["clusters"]) is (line["round"] not in AWAY_ROUNDS)
    # Back in round 4, its entry is replaced by its new vector, not added a second time.
    registry = outcome.strategy.state_dict()["registry"]
    assert len(registry) == 5
    latest = recorder.seen[ROUNDS][AWAY_NODE][1][keys.ACTIVATION]
    np.testing.assert_array_equal(registry[partition_of(recorder, AWAY_NODE)], latest)
    assert not np.array_equal(recorder.seen[1][AWAY_NODE][1][keys.ACTIVATION], latest)
