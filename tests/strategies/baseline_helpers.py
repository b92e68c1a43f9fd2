"""Helpers shared by the AFL / TERM / GiFair / Δ-FL / PropFair tests."""

from __future__ import annotations

import json
import tomllib
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from unittest.mock import Mock

import numpy as np
from flwr.app import ConfigRecord, Message
from flwr.serverapp import Grid
from hypothesis import strategies as st

from fairfl import constants as keys
from fairfl._compat import server_task_identity
from fairfl.simulation import run_inprocess
from tests.conftest import arrays_of, make_reply

ROOT = Path(__file__).resolve().parents[2]
GLOBAL = [np.zeros((2, 3), np.float32), np.zeros(3, np.float32)]


def local(value: float) -> list[np.ndarray]:
    """A local model whose every entry is ``value``."""
    return [np.full((2, 3), value, np.float32), np.full(3, value, np.float32)]


def configure(strategy, nodes: Sequence[int], server_round: int = 1) -> list[Message]:
    """Run ``configure_train`` on a mock grid holding ``nodes``."""
    grid = Mock(spec=Grid)
    grid.get_node_ids.return_value = list(nodes)
    with server_task_identity(1):
        return list(
            strategy.configure_train(
                server_round, arrays_of(GLOBAL), ConfigRecord({"lr": 0.1}), grid
            )
        )


def loss_reply(node_id: int, count: int, loss: float | None, value: float = 0.0) -> Mock:
    """A train reply with ``num-examples`` and, unless ``loss`` is None, ``train_loss``."""
    metrics: dict[str, object] = {keys.NUM_EXAMPLES: count}
    if loss is not None:
        metrics[keys.TRAIN_LOSS] = loss
    return make_reply(node_id, local(value), metrics)


def aggregate_round(strategy, replies: Sequence[Mock], server_round: int = 1):
    """Configure, then aggregate ``replies``; return (arrays, metrics)."""
    # Flower's sampling waits for min_available_nodes (2 by default): offer enough nodes.
    nodes = {int(r.metadata.src_node_id) for r in replies} | {10_001, 10_002}
    configure(strategy, sorted(nodes), server_round)
    return strategy.aggregate_train(server_round, list(replies))


def round_weights(strategy, server_round: int = 1) -> np.ndarray:
    """The recorded λ of a round, ordered by node id."""
    weights = strategy.train_records[server_round].weights
    return np.array([weights[n] for n in sorted(weights)])


def pyproject_config() -> dict[str, object]:
    """``[tool.flwr.app.config]`` of the repository's pyproject.toml."""
    with (ROOT / "pyproject.toml").open("rb") as handle:
        return tomllib.load(handle)["tool"]["flwr"]["app"]["config"]


def run_rule(tmp_path: Path, strategy: str, **extra: object):
    """Run ``strategy`` for 3 rounds on 5 partitions in process, recording train replies.

    Returns the outcome, the rounds.jsonl lines, and ``seen[round][node] = (n, loss,
    config)`` of every train reply with the config of its instruction.
    """
    seen: dict[int, dict[int, tuple[int, float, dict]]] = defaultdict(dict)

    def record(instruction: Message, reply: Message) -> Message:
        config = instruction.content.config_records.get(keys.CONFIG)
        metrics = reply.content.metric_records.get(keys.METRICS)
        if config is not None and metrics is not None and keys.TRAIN_LOSS in metrics:
            server_round = int(config[keys.SERVER_ROUND])
            seen[server_round][int(instruction.metadata.dst_node_id)] = (
                int(metrics[keys.NUM_EXAMPLES]),
                float(metrics[keys.TRAIN_LOSS]),
                dict(config),
            )
        return reply

    run_config = {
        "strategy": strategy,
        "num-server-rounds": 3,
        "num-partitions": 5,
        "out-dir": str(tmp_path),
        **extra,
    }
    outcome = run_inprocess(run_config, reply_filter=record)
    lines = [json.loads(line) for line in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    return outcome, lines, seen


def jsonl_weights(line: dict) -> tuple[list[int], np.ndarray]:
    """Node ids and weights of one rounds.jsonl line, ordered by node id."""
    pairs = sorted((w["node_id"], w["weight"]) for w in line["train"]["weights"])
    return [n for n, _ in pairs], np.array([w for _, w in pairs])


# Hypothesis strategies: a round of 1..8 clients with counts and finite losses.
counts_st = st.integers(min_value=1, max_value=10_000)
losses_st = st.floats(min_value=0.0, max_value=1e4, allow_nan=False, allow_infinity=False)


@st.composite
def client_rounds(draw, min_size: int = 1, max_size: int = 8):
    """``(counts, losses)`` of one round, same length."""
    size = draw(st.integers(min_value=min_size, max_value=max_size))
    counts = draw(st.lists(counts_st, min_size=size, max_size=size))
    losses = draw(st.lists(losses_st, min_size=size, max_size=size))
    return counts, losses


def shares(counts: Sequence[int]) -> np.ndarray:
    """``p_i = n_i / Σ n``."""
    values = np.asarray(counts, dtype=np.float64)
    return values / values.sum()
