"""Stable client keys: which client a node is, from its replies or a key query.

Rules key per-client state by the client's stable key (:func:`fairfl.contract.client_key`,
its partition id), not its node id, so a resumed run with new node ids finds each client
again. :class:`ClientKeys` remembers the key of every node heard from, orders a round's
replies by it, and asks the nodes not heard from yet with a QUERY message.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from flwr.app import Message, MessageType
from flwr.serverapp import Grid

from fairfl.contract import (
    ReplyError,
    TrainReply,
    client_key,
    client_key_order,
    keys,
    read_client_key_reply,
    write_client_key_query,
)

logger = logging.getLogger(__name__)


class ClientKeys:
    """The client key of every node heard from, and the round's order by key.

    Parameters
    ----------
    rule_name : str
        The rule's name, for the WARNING about replies without a partition id.
    """

    def __init__(self, rule_name: str) -> None:
        self.rule_name = rule_name
        #: Client key by node id, of every node heard from.
        self.node_keys: dict[int, str] = {}
        self._warned_node_keys = False

    def key_of(self, reply: TrainReply) -> str:
        """The stable key of a reply's client (:func:`fairfl.contract.client_key`).

        Its partition id; a reply without one is keyed by node id, which is not
        resume-safe (a WARNING says so once).
        """
        if reply.partition_id is None and not self._warned_node_keys:
            self._warned_node_keys = True
            logger.warning(
                "node %d reports no '%s': %s keys its per-client state by node id, "
                "which changes when a SuperNode restarts or a simulation is resumed "
                "(report it, e.g. fairfl.client.fair_train(..., partition_id=...)); "
                "logged once",
                reply.node_id,
                keys.PARTITION_ID,
                self.rule_name,
            )
        return client_key(reply.node_id, reply.partition_id)

    def order(self, accepted: dict[int, TrainReply], dropped: dict[int, str]) -> list[TrainReply]:
        """The accepted replies sorted by client key; two nodes with one key are dropped.

        Sorting by the stable key, not the node id, makes every sum run in the same
        order whatever node ids the run has (a resumed simulation gets new ones). Two
        replies claiming the same client key in one round would share that client's
        state: both are dropped with the reason recorded in ``dropped``.
        """
        by_key: dict[str, list[int]] = {}
        for node, reply in accepted.items():
            by_key.setdefault(self.key_of(reply), []).append(node)
        ordered: list[TrainReply] = []
        for key in sorted(by_key, key=client_key_order):
            nodes = sorted(by_key[key])
            if len(nodes) > 1:
                for node in nodes:
                    reason = f"client key {key!r} ({keys.PARTITION_ID}) also sent by nodes {nodes}"
                    logger.warning("aggregate_train: dropped reply from node %d: %s", node, reason)
                    dropped[node] = reason
                continue
            self.node_keys[nodes[0]] = key
            ordered.append(accepted[nodes[0]])
        return ordered

    def learn(self, grid: Grid, node_ids: Iterable[int], timeout: float) -> dict[int, str]:
        """The client key of each node, asking those not heard from yet.

        Nodes missing from :attr:`node_keys` get a client-key QUERY message
        (:func:`fairfl.contract.write_client_key_query`), answered by fairfl's ClientApp
        with its partition id, within ``timeout`` seconds. A node that does not answer,
        or answers an error (a ClientApp without a query handler), is keyed by its node
        id for now, with a WARNING; its next train reply corrects it.

        Returns
        -------
        dict[int, str]
            Node id -> client key, for every node in ``node_ids``.
        """
        wanted = sorted(set(node_ids))
        unknown = [node for node in wanted if node not in self.node_keys]
        if unknown:
            queries = [
                Message(
                    content=write_client_key_query(),
                    message_type=MessageType.QUERY,
                    dst_node_id=node,
                )
                for node in unknown
            ]
            for reply in grid.send_and_receive(queries, timeout=timeout):
                try:
                    key = read_client_key_reply(reply)
                except ReplyError as error:
                    logger.warning(
                        "client-key query: node %d: %s %s", error.node_id, error.field, error.reason
                    )
                    continue
                self.node_keys[int(reply.metadata.src_node_id)] = key
            for node in unknown:
                if node not in self.node_keys:
                    logger.warning(
                        "client-key query: node %d gave no client key; keyed by node id "
                        "until it replies",
                        node,
                    )
        return {node: self.node_keys.get(node, client_key(node, None)) for node in wanted}
