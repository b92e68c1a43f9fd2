"""Node sampling with a deadline: Flower's ``sample_nodes`` that never waits forever.

Flower's :func:`flwr.serverapp.strategy.strategy_utils.sample_nodes` loops until
``min_available_nodes`` SuperNodes are connected, with no way out: a run asking for more
nodes than will ever connect hangs. :func:`sample_nodes` here draws exactly the same
nodes (the same ``random.sample`` call on the same list, so seeded runs are unchanged)
but gives up at a deadline with a :class:`SamplingTimeoutError` that names
``min-available-nodes``, how many nodes are connected and ``round-timeout``.
:func:`sampled_messages` is FedAvg's ``configure_train`` / ``configure_evaluate`` body on
top of it.

Size-proportional sampling (:func:`draw_size_proportional`, :class:`SizeSampler`) is
the device sampling of q-FFL's experiments (Li et al. 2020; ``select_clients`` with
``sampling=2`` in its reference code ``litian96/fair_flearn``): each round draws the
devices with probability ∝ n_k, without replacement, and the server then sums the
sampled devices' updates *uniformly* (the reference ``aggregate`` sets every weight to
1 under ``sampling=2``): a device's expected weight grows with n_k, roughly as
p_k = n_k / n while the sample is small next to the federation (exactly so for draws
with replacement).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Literal

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid
from numpy.typing import ArrayLike, NDArray

from fairfl.contract import TrainReply, keys, sorted_client_keys

logger = logging.getLogger(__name__)

#: Seconds between two looks at the connected nodes while waiting for them.
POLL_INTERVAL = 1.0

#: How a rule picks the round's training nodes (run-config key ``sampling``).
Sampling = Literal["uniform", "size-proportional"]
SAMPLINGS: tuple[str, ...] = ("uniform", "size-proportional")
#: How RC-FL draws its clients itself (run-config key ``rcfl-sampling``): Flower's
#: uniform draw, or Equitable FL's draw with replacement with probability p_i.
RCFLSampling = Literal["flower", "with-replacement"]
RCFL_SAMPLINGS: tuple[str, ...] = ("flower", "with-replacement")

#: ``draw(connected node ids, sample size) -> sampled node ids``: replaces Flower's
#: ``random.sample`` in :func:`sample_nodes`.
NodeDraw = Callable[[list[int], int], list[int]]


class SamplingTimeoutError(TimeoutError):
    """Too few nodes connected before the sampling deadline (``round-timeout``)."""


def sample_nodes(
    grid: Grid,
    min_available_nodes: int,
    sample_size: int,
    *,
    timeout: float,
    hook: str = "sample_nodes",
    draw: NodeDraw | None = None,
) -> tuple[list[int], list[int]]:
    """Flower's ``sample_nodes``, giving up after ``timeout`` seconds.

    Parameters
    ----------
    grid : Grid
        The Grid whose connected nodes are sampled.
    min_available_nodes : int
        Nodes that must be connected before sampling (raised to ``sample_size``, as in
        Flower).
    sample_size : int
        Nodes to draw, without replacement, with the global :mod:`random` (as Flower).
    timeout : float
        Seconds to wait for ``min_available_nodes`` nodes; the strategy's
        ``sample_timeout``, which ``FairStrategy.start`` sets to ``round-timeout``.
    hook : str
        The strategy hook that samples (prefixes the log lines and the error).
    draw : NodeDraw | None
        Picks the nodes once enough are connected (:meth:`SizeSampler.draw`);
        ``None`` is Flower's ``random.sample(all_nodes, sample_size)``.

    Returns
    -------
    tuple[list[int], list[int]]
        The sampled node ids and all connected node ids.

    Raises
    ------
    SamplingTimeoutError
        If fewer than ``max(min_available_nodes, sample_size)`` nodes are connected after
        ``timeout`` seconds.
    """
    required = max(min_available_nodes, sample_size)
    deadline = time.monotonic() + timeout
    while len(all_nodes := list(grid.get_node_ids())) < required:
        left = deadline - time.monotonic()
        if left <= 0:
            raise SamplingTimeoutError(
                f"{hook}: only {len(all_nodes)} nodes connected, fewer than the "
                f"{required} that min-available-nodes={min_available_nodes} (and a sample "
                f"of {sample_size}) need, after waiting round-timeout={timeout:g} s; start "
                "more SuperNodes or lower min-available-nodes"
            )
        logger.info(
            "%s: waiting for nodes to connect: %d connected (minimum required: %d); "
            "giving up in %.0f s (round-timeout)",
            hook,
            len(all_nodes),
            required,
            left,
        )
        time.sleep(min(POLL_INTERVAL, left))
    if draw is not None:
        return draw(all_nodes, sample_size), all_nodes
    return random.sample(all_nodes, sample_size), all_nodes


def sampled_messages(
    grid: Grid,
    *,
    message_type: str,
    server_round: int,
    arrays: ArrayRecord,
    config: ConfigRecord,
    fraction: float,
    min_nodes: int,
    min_available_nodes: int,
    timeout: float,
    arrayrecord_key: str = keys.ARRAYS,
    configrecord_key: str = keys.CONFIG,
    draw: NodeDraw | None = None,
) -> list[Message]:
    """FedAvg's ``configure_train`` / ``configure_evaluate`` with a bounded wait.

    Samples ``max(int(connected * fraction), min_nodes)`` nodes with :func:`sample_nodes`
    (with ``draw``, if given) and sends each one message carrying ``arrays`` and
    ``config`` plus ``server-round`` (``config`` itself is not changed). ``fraction ==
    0`` sends nothing.

    Raises
    ------
    SamplingTimeoutError
        See :func:`sample_nodes`.
    """
    if fraction == 0.0:
        return []
    hook = f"configure_{message_type}"
    sample_size = max(int(len(list(grid.get_node_ids())) * fraction), min_nodes)
    node_ids, all_nodes = sample_nodes(
        grid, min_available_nodes, sample_size, timeout=timeout, hook=hook, draw=draw
    )
    logger.info("%s: Sampled %s nodes (out of %s)", hook, len(node_ids), len(all_nodes))
    content = RecordDict(
        {
            arrayrecord_key: arrays,
            configrecord_key: ConfigRecord({**config, keys.SERVER_ROUND: server_round}),
        }
    )
    return [
        Message(content=content, message_type=message_type, dst_node_id=node_id)
        for node_id in node_ids
    ]


def draw_size_proportional(
    counts: ArrayLike,
    sample_size: int,
    rng: np.random.Generator | np.random.RandomState | None = None,
) -> NDArray[np.intp]:
    """Indices of ``sample_size`` devices drawn ∝ n_k without replacement.

    q-FFL's device sampling (Li et al. 2020, Algorithms 1 and 2, line 3: "Server selects a
    subset S_t of K devices at random (each device k is chosen with prob. p_k)";
    ``select_clients`` with ``sampling=2`` in ``fair_flearn/flearn/trainers/fedbase.py``,
    p_k = n_k / n): NumPy's ``choice(len(counts),
    sample_size, replace=False, p=counts / Σ counts)``, the reference code's call.
    NumPy draws one index at a time ∝ p among those not drawn yet (successive
    sampling), so device k is in the sample with a probability that grows with n_k
    but is not ``sample_size · p_k`` (that can exceed 1).

    Parameters
    ----------
    counts : ArrayLike
        n_k of each device, all > 0.
    sample_size : int
        Devices to draw, ``<= len(counts)``.
    rng : numpy.random.Generator | numpy.random.RandomState | None
        The random source; ``None`` is NumPy's global one (``np.random.choice``, as the
        reference code), which fairfl's ServerApp seeds with the run seed and its
        checkpoints save and restore.

    Returns
    -------
    NDArray[np.intp]
        The drawn indices, in the order drawn.

    Raises
    ------
    ValueError
        If a count is not > 0 or ``sample_size`` is not in ``[0, len(counts)]``.
    """
    n = np.asarray(counts, dtype=np.float64)
    if n.ndim != 1 or n.size == 0 or not np.all(n > 0) or not np.all(np.isfinite(n)):
        raise ValueError(f"counts must be a non-empty vector of numbers > 0, got {n.tolist()}")
    if isinstance(sample_size, bool) or not isinstance(sample_size, int | np.integer):
        raise ValueError(f"sample_size must be an int, got {sample_size!r}")
    if not 0 <= sample_size <= n.size:
        raise ValueError(f"sample_size must be in [0, {n.size}], got {sample_size}")
    choice = np.random.choice if rng is None else rng.choice
    return np.asarray(choice(n.size, size=sample_size, replace=False, p=n / n.sum()), np.intp)


class SizeSampler:
    """A rule's ``sampling="size-proportional"``: draws ∝ n_k, learning n_k from replies.

    The server knows n_k only from train replies (``num-examples``); before the first
    round it knows none. A round in which some connected node's n_k is unknown (round
    1, or a node that never replied) is therefore a *census*: every connected node
    trains, and the rule weighs the replies as it weighs a uniformly sampled round.
    Once every connected node's n_k is known, each round draws the sample ∝ n_k
    without replacement (:func:`draw_size_proportional`, over the nodes' stable client
    keys in their sorted order, so a resumed run with new node ids draws alike) and
    the rule sums the drawn replies uniformly (:meth:`FairStrategy.aggregate_train
    <fairfl.strategies.core.base.FairStrategy.aggregate_train>` hands the rule n_k = 1 for
    each). Li et al. 2020 and its code know every n_k before round 1; the census round is
    the departure (one round in all, for a fixed federation). The counts are part of
    a checkpoint (``FairStrategy.sampling_state``): a resumed run draws on as the
    uninterrupted one would, with no second census.

    The stable client key of each node comes from the strategy's
    ``learn_client_keys`` (passed to :meth:`draw`).
    """

    def __init__(self) -> None:
        #: n_k by client key, from each client's latest train reply.
        self.counts: dict[str, int] = {}
        #: Whether the round being configured was drawn ∝ n_k (False: a census round).
        self.drawn = False

    def record(self, client_key: str, num_examples: int) -> None:
        """Remember a client's n_k (from its train reply)."""
        self.counts[client_key] = int(num_examples)

    def weigh(
        self, replies: list[TrainReply], key_of: Callable[[TrainReply], str]
    ) -> list[TrainReply]:
        """The replies as the rule weighs them: n_k = 1 each in a round drawn ∝ n_k.

        Records each reply's n_k (for later draws); in a drawn round each reply then
        counts as n_k = 1, so that every rule sums the drawn replies uniformly (paper
        002's reference code, ``aggregate`` with ``sampling=2``): the draw already
        weighs device k by p_k. A census round leaves the replies as they are.
        """
        for reply in replies:
            self.record(key_of(reply), reply.num_examples)
        if not self.drawn:
            return replies
        return [replace(reply, num_examples=1) for reply in replies]

    def state(self) -> dict[str, Any]:
        """The learnt n_k by client key, for a checkpoint (``{"size-counts": ...}``)."""
        return {"size-counts": dict(self.counts)}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state` output (no counts: none known)."""
        counts = state.get("size-counts", {})
        self.counts = {str(k): int(v) for k, v in counts.items()}

    def draw(
        self,
        all_nodes: list[int],
        sample_size: int,
        *,
        client_keys: Callable[[list[int]], Mapping[int, str]],
    ) -> list[int]:
        """The round's nodes: all of them (census), or ``sample_size`` drawn ∝ n_k.

        Parameters
        ----------
        all_nodes : list[int]
            The connected nodes.
        sample_size : int
            Nodes to draw (at most the number of distinct clients connected).
        client_keys : Callable[[list[int]], Mapping[int, str]]
            Node id -> stable client key (``FairStrategy.learn_client_keys``); asked
            only once some n_k is known.
        """
        nodes = sorted(all_nodes)
        node_keys = client_keys(nodes) if self.counts else {}
        node_of: dict[str, int] = {}
        for node in reversed(nodes):
            node_of[node_keys.get(node, "")] = node  # one key, two nodes: the lower id
        unknown = [n for n in nodes if node_keys.get(n) not in self.counts]
        if unknown:
            self.drawn = False
            logger.info(
                "configure_train: n_k unknown for %d of %d nodes; every node trains this "
                "round (census for size-proportional sampling)",
                len(unknown),
                len(nodes),
            )
            return nodes
        ordered = sorted_client_keys(node_of)
        picks = draw_size_proportional(
            [self.counts[key] for key in ordered], min(sample_size, len(ordered))
        )
        self.drawn = True
        return sorted(node_of[ordered[i]] for i in picks)
