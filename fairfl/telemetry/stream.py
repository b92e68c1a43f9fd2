"""One record stream, many sinks: the per-round record goes through here to every output."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fairfl.contract.clients import client_key
from fairfl.telemetry.ledger import (
    GENESIS,
    chain,
    encode_line,
    line_sha256,
)
from fairfl.telemetry.nodes import NodeKeys
from fairfl.telemetry.sinks import ClientCap, JsonlSink, RoundRecord, Sink, open_sink

logger = logging.getLogger(__name__)

#: Environment variable through which a runner names the run id its ServerApp writes.
RUN_ID_ENV = "FAIRFL_RUN_ID"

#: The drop reason of a node sent a message that did not answer before the phase ended
#: (``train.dropped`` and ``evaluate_dropped`` of a ``rounds.jsonl`` line).
NO_REPLY_REASON = "no reply before the round's timeout"


def new_run_id() -> str:
    """A run id: ``FAIRFL_RUN_ID`` if a runner set it, else a fresh uuid4 (hex)."""
    return os.environ.get(RUN_ID_ENV) or uuid.uuid4().hex


class RecordStream:
    """Chains each round's entry into the ledger and hands it to every sink.

    Parameters
    ----------
    rounds_file : Path
        ``rounds.jsonl`` (its :class:`~fairfl.telemetry.sinks.JsonlSink` comes first).
    config_sha256 : str
        The run's config fingerprint, on every line.
    sinks : Sequence[Sink]
        The trackers (:func:`~fairfl.telemetry.sinks.build_sinks`).
    previous : Sequence[Mapping[str, Any]]
        Entries a resumed run restores; the chain continues from the last one.
    max_clients : int
        Cap on per-client series (:class:`~fairfl.telemetry.sinks.ClientCap`).
    node_keys : NodeKeys | None
        Where SuperNode public-key fingerprints come from (``node_key`` of a client).
    key : str
        ``client`` or ``node-key``: what ``client_key`` holds (see ``telemetry-key``).
    """

    def __init__(
        self,
        rounds_file: Path,
        config_sha256: str,
        sinks: Sequence[Sink] = (),
        *,
        previous: Sequence[Mapping[str, Any]] = (),
        max_clients: int = 100,
        node_keys: NodeKeys | None = None,
        key: str = "client",
    ):
        self.node_keys = node_keys
        self.key = key
        self.config_sha256 = config_sha256
        self.sinks: list[Sink] = [JsonlSink(rounds_file, previous), *sinks]
        self.cap = ClientCap(max_clients)
        self.head = line_sha256(encode_line(previous[-1])) if previous else GENESIS
        self.lines = len(previous)
        self._opened: list[Sink] = []
        try:
            # The trackers first: one that cannot start (a busy Prometheus port) fails
            # the run before rounds.jsonl is written, so the out-dir stays free for a
            # rerun (an out-dir holding rounds.jsonl refuses a new run).
            for sink in [*self.sinks[1:], self.sinks[0]]:
                open_sink(sink)
                self._opened.append(sink)
        except BaseException:
            self.close()
            raise
        self._opened = list(self.sinks)  # records go to rounds.jsonl first

    def record(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        """Chain ``entry`` (adding ``prev_sha256`` and ``config_sha256``) and send it out.

        Returns
        -------
        dict[str, Any]
            The entry as written to ``rounds.jsonl``.
        """
        chained = chain(self.keyed(entry), self.head, self.config_sha256)
        round_record = RoundRecord.of(chained, self.cap)
        for sink in self._opened:
            sink.record(round_record)
        self.head = line_sha256(encode_line(chained))
        self.lines += 1
        return chained

    def keyed(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        """``entry`` with ``client_key`` on every client, and SuperNode key fingerprints.

        ``node_key`` is set on a client, and ``node_keys`` (``{node id: fingerprint}``)
        on the entry for every node it names (clients, train weights, dropped replies),
        where the Grid gives a public key (:mod:`fairfl.telemetry.nodes`).
        """
        clients = list(entry.get("clients", []))
        stored = entry.get("train")
        train: Mapping[str, Any] = stored if isinstance(stored, Mapping) else {}
        named = {int(c["node_id"]) for c in clients}
        named.update(int(w["node_id"]) for w in train.get("weights", []))
        for dropped in (train.get("dropped") or {}, entry.get("evaluate_dropped") or {}):
            named.update(int(node) for node in dropped)
        known = self.node_keys.lookup(sorted(named)) if self.node_keys and named else {}
        keyed = []
        for client in clients:
            node_key = known.get(int(client["node_id"]))
            extra: dict[str, Any] = {} if node_key is None else {"node_key": node_key}
            if node_key is not None and self.key == "node-key":
                extra["client_key"] = node_key
            else:
                extra["client_key"] = client_key(client["node_id"], client.get("partition_id"))
            keyed.append({**client, **extra})
        result = {**entry, "clients": keyed}
        if known:
            result["node_keys"] = {str(node): known[node] for node in sorted(known)}
        return result

    def ledger_head(self) -> dict[str, Any]:
        """``summary.json``'s ``ledger``: line count and the last line's SHA-256."""
        return {"lines": self.lines, "head_sha256": self.head}

    def close(self) -> None:
        """Close every opened sink (a failing one is logged; the others still close)."""
        while self._opened:
            sink = self._opened.pop()
            try:
                sink.close()
            except Exception:  # one tracker must not keep the others open
                logger.exception("telemetry: closing %s failed", type(sink).__name__)
