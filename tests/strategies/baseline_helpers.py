"""Helpers shared by the strategy tests.

A mock-grid ``configure_train`` for every rule; for the loss-weighted rules (AFL, TERM,
GiFair, Δ-FL, VRed, Semi-VRed) and PropFair also reply builders, one round through
``configure_train`` / ``aggregate_train``, the FedAvg reduction check and in-process runs.
"""

from __future__ import annotations

import json
import tomllib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from unittest.mock import Mock

import numpy as np
from flwr.app import ConfigRecord, Message
from flwr.serverapp import Grid
from hypothesis import strategies as st

from fairfl._compat import server_task_identity
from fairfl.contract import keys
from fairfl.server import RunOutcome
from fairfl.simulation import run_inprocess
from fairfl.strategies import FedAvg
from tests.conftest import arrays_of, make_reply

ROOT = Path(__file__).resolve().parents[2]
GLOBAL = [np.zeros((2, 3), np.float32), np.zeros(3, np.float32)]

# The hand-worked round of the VRed and Semi-VRed tests: n = (1, 1, 2), so
# p = (0.25, 0.25, 0.5); f = (1, 2, 3), so f̄ = 2.25; θ^t = 1 and θ_i = (4, 0, 2).
COUNTS = [1, 1, 2]
P = [0.25, 0.25, 0.5]
LOSSES = [1.0, 2.0, 3.0]
LOCALS = [[[4.0]], [[0.0]], [[2.0]]]


def local(value: float) -> list[np.ndarray]:
    """A local model whose every entry is ``value``."""
    return [np.full((2, 3), value, np.float32), np.full(3, value, np.float32)]


def configure(
    strategy,
    nodes: Iterable[int],
    server_round: int = 1,
    arrays: Sequence[np.ndarray] | Mapping[str, np.ndarray] = GLOBAL,
    config: dict | None = None,
) -> list[Message]:
    """Run ``configure_train`` on a mock grid holding ``nodes``; return its messages.

    It sends ``arrays`` and ``config`` (default ``{"lr": 0.1}``). The nodes answer no
    query (a rule that asks them for their client key keys them by node id).
    """
    grid = Mock(spec=Grid)
    grid.get_node_ids.return_value = list(nodes)
    grid.send_and_receive.return_value = []  # no node answers a client-key query
    record = ConfigRecord(config if config is not None else {"lr": 0.1})
    with server_task_identity(1):
        return list(strategy.configure_train(server_round, arrays_of(arrays), record, grid))


def loss_reply(node_id: int, count: int, loss: float | None, value: float = 0.0) -> Mock:
    """A train reply with ``num-examples`` and, unless ``loss`` is None, F_k(w^t)."""
    metrics: dict[str, object] = {keys.NUM_EXAMPLES: count}
    if loss is not None:
        metrics[keys.LOSS_BEFORE_TRAINING] = loss
    return make_reply(node_id, local(value), metrics)


def numbered_replies(
    counts: Sequence[int], losses: Sequence[float], missing: Iterable[int] = ()
) -> list[Mock]:
    """Replies of nodes 1, 2, ...: node k's model is all k; indices in ``missing`` lack a loss."""
    skip = set(missing)
    return [
        loss_reply(i + 1, c, None if i in skip else f, value=float(i + 1))
        for i, (c, f) in enumerate(zip(counts, losses, strict=True))
    ]


def model_replies(
    locals_: Sequence[Sequence[object]], counts: Sequence[int], losses: Sequence[float]
) -> list[Mock]:
    """Replies of nodes 1, 2, ... with the given local models (as float32), counts and losses."""
    return [
        make_reply(
            i + 1,
            [np.asarray(a, np.float32) for a in arrays],
            {keys.NUM_EXAMPLES: int(n), keys.LOSS_BEFORE_TRAINING: float(f)},
        )
        for i, (arrays, n, f) in enumerate(zip(locals_, counts, losses, strict=True))
    ]


def aggregate_round(
    strategy,
    replies: Sequence[Mock],
    server_round: int = 1,
    arrays: Sequence[np.ndarray] = GLOBAL,
):
    """Configure (sending ``arrays``), then aggregate ``replies``; return (arrays, metrics)."""
    # Flower's sampling waits for min_available_nodes (2 by default): offer enough nodes.
    nodes = {int(r.metadata.src_node_id) for r in replies} | {10_001, 10_002}
    configure(strategy, sorted(nodes), server_round, arrays)
    return strategy.aggregate_train(server_round, list(replies))


def aggregate_models(
    strategy,
    global_arrays: Sequence[np.ndarray],
    locals_: Sequence[Sequence[object]],
    counts: Sequence[int],
    losses: Sequence[float],
):
    """One round from ``global_arrays`` with :func:`model_replies`; return (arrays, metrics)."""
    return aggregate_round(strategy, model_replies(locals_, counts, losses), arrays=global_arrays)


def hand_round(strategy, locals_: Sequence[Sequence[object]] = LOCALS):
    """The hand-worked round (:data:`COUNTS`, :data:`LOSSES`, θ^t = 1) with ``locals_``."""
    return aggregate_models(strategy, [np.ones(1, np.float32)], locals_, COUNTS, LOSSES)


def assert_matches_fedavg(
    strategy,
    replies: Sequence[Mock],
    server_round: int = 1,
    *,
    atol: float = 0.0,
    rtol: float = 0.0,
) -> None:
    """``strategy`` gives FedAvg's weights (within ``atol``) and model (within ``rtol``).

    The default tolerances of 0 ask for the same bits.
    """
    fedavg = FedAvg()
    ours, _ = aggregate_round(strategy, replies, server_round)
    theirs, _ = aggregate_round(fedavg, replies, server_round)
    np.testing.assert_allclose(
        round_weights(strategy, server_round),
        round_weights(fedavg, server_round),
        rtol=0.0,
        atol=atol,
    )
    for key in theirs:
        np.testing.assert_allclose(ours[key].numpy(), theirs[key].numpy(), rtol=rtol, atol=0.0)


def round_weights(strategy, server_round: int = 1) -> np.ndarray:
    """The recorded λ of a round, ordered by node id."""
    weights = strategy.train_records[server_round].weights
    return np.array([weights[n] for n in sorted(weights)])


def pyproject_config() -> dict[str, object]:
    """``[tool.flwr.app.config]`` of the repository's pyproject.toml."""
    with (ROOT / "pyproject.toml").open("rb") as handle:
        return tomllib.load(handle)["tool"]["flwr"]["app"]["config"]


@dataclass(frozen=True)
class LoggedRound:
    """One rounds.jsonl line with the train replies of its round, ordered by node id."""

    nodes: list[int]
    weights: np.ndarray
    counts: list[int]
    losses: list[float]
    configs: list[dict]
    diagnostics: dict


def run_rule(
    tmp_path: Path, strategy: str, **extra: object
) -> tuple[RunOutcome, list[LoggedRound]]:
    """Run ``strategy`` for 3 rounds on 5 partitions in process, recording train replies.

    Returns the outcome and, per rounds.jsonl line, the logged weights with the
    ``num-examples``, ``train_loss`` and instruction config of each weighted node.
    """
    seen: dict[int, dict[int, tuple[int, float, dict]]] = defaultdict(dict)

    def record(instruction: Message, reply: Message) -> Message:
        config = instruction.content.config_records.get(keys.CONFIG)
        metrics = reply.content.metric_records.get(keys.METRICS)
        if config is not None and metrics is not None and keys.LOSS_BEFORE_TRAINING in metrics:
            server_round = int(config[keys.SERVER_ROUND])
            seen[server_round][int(instruction.metadata.dst_node_id)] = (
                int(metrics[keys.NUM_EXAMPLES]),
                float(metrics[keys.LOSS_BEFORE_TRAINING]),
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
    rounds = []
    for text in (tmp_path / "rounds.jsonl").read_text().splitlines():
        line = json.loads(text)
        pairs = sorted((w["node_id"], w["weight"]) for w in line["train"]["weights"])
        nodes = [n for n, _ in pairs]
        replies = [seen[line["round"]][n] for n in nodes]
        rounds.append(
            LoggedRound(
                nodes=nodes,
                weights=np.array([w for _, w in pairs]),
                counts=[n for n, _, _ in replies],
                losses=[f for _, f, _ in replies],
                configs=[c for _, _, c in replies],
                diagnostics=line["train"]["diagnostics"],
            )
        )
    return outcome, rounds


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
