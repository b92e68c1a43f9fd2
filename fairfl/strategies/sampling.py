"""Node sampling with a deadline: Flower's ``sample_nodes`` that never waits forever.

Flower's :func:`flwr.serverapp.strategy.strategy_utils.sample_nodes` loops until
``min_available_nodes`` SuperNodes are connected, with no way out: a run asking for more
nodes than will ever connect hangs. :func:`sample_nodes` here draws exactly the same
nodes (the same ``random.sample`` call on the same list, so seeded runs are unchanged)
but gives up at a deadline with a :class:`SamplingTimeoutError` that names
``min-available-nodes``, how many nodes are connected and ``round-timeout``.
:func:`sampled_messages` is FedAvg's ``configure_train`` / ``configure_evaluate`` body on
top of it.
"""

from __future__ import annotations

import logging
import random
import time

from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from fairfl.contract import keys

logger = logging.getLogger(__name__)

#: Seconds between two looks at the connected nodes while waiting for them.
POLL_INTERVAL = 1.0


class SamplingTimeoutError(TimeoutError):
    """Too few nodes connected before the sampling deadline (``round-timeout``)."""


def sample_nodes(
    grid: Grid,
    min_available_nodes: int,
    sample_size: int,
    *,
    timeout: float,
    hook: str = "sample_nodes",
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
) -> list[Message]:
    """FedAvg's ``configure_train`` / ``configure_evaluate`` with a bounded wait.

    Samples ``max(int(connected * fraction), min_nodes)`` nodes with :func:`sample_nodes`
    and sends each one message carrying ``arrays`` and ``config`` plus ``server-round``
    (``config`` itself is not changed). ``fraction == 0`` sends nothing.

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
        grid, min_available_nodes, sample_size, timeout=timeout, hook=hook
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
