"""Stable client keys: what per-client strategy state is keyed by, and how to ask for one.

A Flower node id names a *connection*, not a client: Flower's simulation engine draws
new node ids every run, and a SuperNode that restarts registers under a new one. Rules
that keep state per client (AFL's λ, RC-FL's n_i, Equitable FL's registry) key it by
the client's **partition id** instead, the ``partition-id`` every fairfl reply carries:
the engine's node config in simulation, the device's ``--node-config partition-id=<i>``
in a deployment (its configured device id). A resumed run then finds each client's
state again, whatever node id it has now.

A reply without ``partition-id`` (a ClientApp of one's own that does not report it) is
keyed by its node id, ``node-<id>``: that works within one run but is not resume-safe.

A rule that needs a node's key *before* the node replies in a round (RC-FL sends each
node its own α_i) asks the nodes it does not know yet with a Flower QUERY message
(:func:`write_client_key_query`); fairfl's ClientApp answers with its partition id
(:func:`write_client_key_reply`). Wire contract: ``ClientKeyQuery`` and
``ClientKeyReply`` in ``proto/fairfl/v1/contract.proto``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from flwr.app import ConfigRecord, Message, MetricRecord, RecordDict

from fairfl.contract import keys
from fairfl.contract.replies import TRAIN_METRICS, ReplyError, check_value

#: Prefix of the key of a client that reported no partition id (not resume-safe).
NODE_KEY_PREFIX = "node-"


def client_key(node_id: int, partition_id: int | None) -> str:
    """The stable key of a client: its partition id, else ``node-<node id>``."""
    if partition_id is None:
        return f"{NODE_KEY_PREFIX}{int(node_id)}"
    return str(int(partition_id))


def client_key_order(key: str) -> tuple[int, int]:
    """Sort order of client keys: partition ids by number, then node keys by node id.

    Raises
    ------
    ValueError
        If ``key`` is neither an integer >= 0 nor ``node-<integer>``, written as
        :func:`client_key` writes them (no sign, no leading zero); the message names it.
    """
    if not isinstance(key, str):
        raise ValueError(f"client key must be a str, got {key!r}")
    text = key[len(NODE_KEY_PREFIX) :] if key.startswith(NODE_KEY_PREFIX) else key
    if not (text.isascii() and text.isdigit() and str(int(text)) == text):
        raise ValueError(f"client key must be a partition id or 'node-<id>', got {key!r}")
    return (1 if key.startswith(NODE_KEY_PREFIX) else 0, int(text))


def sorted_client_keys(client_keys: Iterable[str]) -> list[str]:
    """``client_keys`` in :func:`client_key_order`."""
    return sorted(client_keys, key=client_key_order)


def counts_from_state(counts: object) -> dict[str, int]:
    """A saved state's ``counts``: n_k (ints >= 1) by client key, checked.

    Raises
    ------
    ValueError
        If ``counts`` is not a mapping, a key is not a client key or a count is not an
        int >= 1; the message names ``state['counts']`` and the key.
    """
    if not isinstance(counts, Mapping):
        raise ValueError("state['counts'] must be a mapping of client key to count")
    for key, count in counts.items():
        client_key_order(key)  # raises ValueError naming a key that is not one
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"state['counts'][{key!r}] must be an int >= 1, got {count!r}")
    return dict(counts)


def write_client_key_query() -> RecordDict:
    """The content of a client-key QUERY message (server -> client)."""
    return RecordDict({keys.CONFIG: ConfigRecord({keys.CLIENT_KEY_QUERY: True})})


def is_client_key_query(content: RecordDict) -> bool:
    """Whether a QUERY message's content asks for the client key."""
    config = content.config_records.get(keys.CONFIG)
    return config is not None and bool(config.get(keys.CLIENT_KEY_QUERY, False))


def write_client_key_reply(partition_id: int) -> RecordDict:
    """The content of the reply to a client-key query: the node's partition id."""
    return RecordDict({keys.METRICS: MetricRecord({keys.PARTITION_ID: int(partition_id)})})


def read_client_key_reply(message: Message) -> str:
    """The client key a query reply reports.

    Raises
    ------
    ReplyError
        If the reply is an error (e.g. a ClientApp without a query handler) or lacks a
        valid ``partition-id`` (the message names the node and the field).
    """
    node_id = int(message.metadata.src_node_id)
    if message.has_error():
        raise ReplyError(node_id, "error", f"reply is an error: {message.error.reason}")
    metrics = message.content.metric_records.get(keys.METRICS)
    if metrics is None or keys.PARTITION_ID not in metrics:
        raise ReplyError(node_id, f"metrics[{keys.PARTITION_ID!r}]", "is missing")
    value = metrics[keys.PARTITION_ID]
    check_value(node_id, keys.METRICS, keys.PARTITION_ID, value, TRAIN_METRICS[keys.PARTITION_ID])
    return client_key(node_id, int(value))  # type: ignore[arg-type]
