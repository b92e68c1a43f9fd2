"""Stable client keys: which client a node is, from its replies or a key query.

Rules key per-client state by the client's stable key (:func:`fairfl.contract.client_key`,
its partition id), not its node id, so a resumed run with new node ids finds each client
again. :class:`ClientKeys` remembers the key of every node heard from, orders a round's
replies by it, and asks the nodes not heard from yet with a QUERY message. It admits a
reply only for a key its node may speak for and with a sample count within bounds, and
weighs it by its registered count where the registration states one
(:mod:`fairfl.strategies.core.identity`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

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
from fairfl.strategies.core.identity import Claims, CountBounds

logger = logging.getLogger(__name__)


class ClientKeys:
    """The client key of every node heard from, and the round's order by key.

    Parameters
    ----------
    rule_name : str
        The rule's name, for the WARNING about replies without a partition id.
    claims : Claims | None (default: None)
        Which node may speak for which key (default: first claims, unbounded; the
        ServerApp sets ``max-clients`` and the registration).
    counts : CountBounds | None (default: None)
        The bounds on a reply's ``num-examples`` (default: ``max-num-examples`` = 10^9).
    """

    def __init__(
        self, rule_name: str, claims: Claims | None = None, counts: CountBounds | None = None
    ) -> None:
        self.rule_name = rule_name
        #: Client key by node id, of every node heard from.
        self.node_keys: dict[int, str] = {}
        self.claims = claims if claims is not None else Claims()
        self.counts = counts if counts is not None else CountBounds()
        #: The last round's count entries for its record: ``num-examples-claimed`` (node
        #: id -> its claim, where it differs from its registered count) and
        #: ``num-examples-flag`` (:meth:`CountBounds.flag`).
        self.diagnostics: dict[str, Any] = {}
        self._warned_node_keys = False
        self._warned_count_flag = False

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
        """The admitted replies sorted by client key, their counts clipped if asked.

        A reply is admitted when its ``num-examples`` is within ``max-num-examples``
        and its node may speak for its client key (:meth:`Claims.resolve`: the
        registered node, else the key's first claimant; two first claims in one round
        are both refused). Every other reply is dropped with its reason recorded in
        ``dropped`` (naming the claimant and the key's holder) and logged: the holder
        keeps its slot. Sorting by the stable key, not the node id, makes every sum run
        in the same order whatever node ids the run has (a resumed simulation gets new
        ones). A registered count replaces the reply's claim (a differing claim is kept
        in :attr:`diagnostics`); unregistered counts are flagged when one is far above
        the round's median (:meth:`CountBounds.flag`). The admitted counts then go
        through ``num-examples-clip`` (:meth:`CountBounds.clipped`).
        """
        by_key: dict[str, list[int]] = {}
        refused: dict[int, str] = {}
        for node, reply in accepted.items():
            reason = self.counts.refusal(reply)
            if reason is not None:
                refused[node] = reason
                continue
            by_key.setdefault(self.key_of(reply), []).append(node)
        ordered: list[TrainReply] = []
        claimed: dict[int, int] = {}
        for key in sorted(by_key, key=client_key_order):
            owner, others = self.claims.resolve(key, sorted(by_key[key]))
            refused.update(others)
            if owner is None:
                continue
            self.node_keys[owner] = key
            reply = accepted[owner]
            registered = self.claims.registered_count(key)
            if registered is not None and registered != reply.num_examples:
                claimed[owner] = reply.num_examples
                reply = replace(reply, num_examples=registered)
            ordered.append(reply)
        for node, reason in sorted(refused.items()):
            logger.warning("aggregate_train: dropped reply from node %d: %s", node, reason)
            dropped[node] = reason
        self.diagnostics = self._count_diagnostics(ordered, claimed)
        return self.counts.clipped(ordered)

    def _count_diagnostics(
        self, ordered: list[TrainReply], claimed: dict[int, int]
    ) -> dict[str, Any]:
        """The round's count entries (:attr:`diagnostics`), logged."""
        for node, claim in sorted(claimed.items()):
            logger.info(
                "aggregate_train: node %d claims %s %d; weighed by its registered count",
                node,
                keys.NUM_EXAMPLES,
                claim,
            )
        registration = self.claims.registration
        if registration is not None and registration.num_examples:
            return {"num-examples-claimed": claimed} if claimed else {}
        flag = self.counts.flag(ordered)
        if flag is None:
            return {}
        if not self._warned_count_flag:
            self._warned_count_flag = True
            logger.warning(
                "aggregate_train: %s; set client-registration to bind counts to node keys "
                "(rounds flagged in rounds.jsonl, train.diagnostics.num-examples-flag; "
                "logged once)",
                flag,
            )
        return {"num-examples-flag": flag}

    def learn(self, grid: Grid, node_ids: Iterable[int], timeout: float) -> dict[int, str]:
        """The client key of each node, asking those not heard from yet.

        Nodes missing from :attr:`node_keys` get a client-key QUERY message
        (:func:`fairfl.contract.write_client_key_query`), answered by fairfl's ClientApp
        with its partition id, within ``timeout`` seconds. A node that does not answer,
        or answers an error (a ClientApp without a query handler), is keyed by its node
        id for now, with a WARNING; its next train reply corrects it. An answer naming a
        key the node may not speak for (:meth:`Claims.resolve`, with every answer of the
        same key together) is refused the same way.

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
            # All answers first, then each key's claimants together: two claims of a
            # free key in one round are both refused, as on the train path.
            claimants: dict[str, list[int]] = {}
            for reply in grid.send_and_receive(queries, timeout=timeout):
                try:
                    key = read_client_key_reply(reply)
                except ReplyError as error:
                    logger.warning(
                        "client-key query: node %d: %s %s", error.node_id, error.field, error.reason
                    )
                    continue
                claimants.setdefault(key, []).append(int(reply.metadata.src_node_id))
            for key in sorted(claimants, key=client_key_order):
                owner, refused = self.claims.resolve(key, sorted(claimants[key]))
                for node, reason in sorted(refused.items()):
                    logger.warning("client-key query: node %d refused: %s", node, reason)
                if owner is not None:
                    self.node_keys[owner] = key
            for node in unknown:
                if node not in self.node_keys:
                    logger.warning(
                        "client-key query: node %d gave no client key; keyed by node id "
                        "until it replies",
                        node,
                    )
        return {node: self.node_keys.get(node, client_key(node, None)) for node in wanted}
