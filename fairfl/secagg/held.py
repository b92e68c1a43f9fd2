"""Where a client keeps what a two-round form holds across rounds (FairFed's ω_k).

The weight lives in the ClientApp's ``Context.state`` (record
:data:`~fairfl.secagg.client.HELD`) and, when the node config sets ``secagg-state-dir``,
in ``<dir>/run-<run id>/client-<client key>.json`` too, written atomically (a temporary
file renamed over the old one), so that a SuperNode restarted within the run reads it
back. The client key is the node's ``partition-id`` (fairfl's stable key,
:func:`fairfl.contract.clients.client_key`), else ``node-<node id>``. Ditto's personal
models are kept the same way (node config ``ditto-state-dir``,
:mod:`fairfl.client.ditto`).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path

from flwr.app import ConfigRecord, Context

from fairfl._files import write_atomically
from fairfl.contract.clients import client_key

__all__ = ["RECORD", "STATE_DIR_KEY", "held_path", "load_held", "save_held"]

logger = logging.getLogger(__name__)

#: Node-config key of the folder the held weights are kept in ("" or absent: none).
STATE_DIR_KEY = "secagg-state-dir"
#: The ``Context.state`` record of what a form keeps across rounds (FairFed's ω_k):
#: the in-process runner's checkpoints keep it, so a resumed run's clients hold it too.
RECORD = "fairfl.secagg.held"


def held_path(state_dir: str | os.PathLike[str], run_id: int, key: str) -> Path:
    """Where client ``key``'s held values of run ``run_id`` are kept on disk."""
    return Path(state_dir) / f"run-{run_id}" / f"client-{key}.json"


def _path(context: Context) -> Path | None:
    folder = str(context.node_config.get(STATE_DIR_KEY, ""))
    if not folder:
        return None
    partition = context.node_config.get("partition-id")
    key = client_key(context.node_id, None if partition is None else int(partition))
    return held_path(folder, context.run_id, key)


def load_held(context: Context) -> dict[str, float]:
    """The held values: from ``Context.state``, else the node's state dir, else none.

    Raises
    ------
    ValueError
        If the file is not a JSON object of finite numbers (the message names it).
    """
    record = context.state.config_records.get(RECORD)
    if record is not None:
        return {str(k): float(v) for k, v in record.items()}  # type: ignore[arg-type]
    path = _path(context)
    if path is None or not path.exists():
        return {}
    stored = json.loads(path.read_text())
    if not (
        isinstance(stored, dict)
        and all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            for v in stored.values()
        )
    ):
        raise ValueError(
            f"secure aggregation: {path} (node config {STATE_DIR_KEY}) must hold a JSON "
            f"object of finite numbers, got {stored!r}; remove it to start again"
        )
    held = {str(k): float(v) for k, v in stored.items()}
    context.state.config_records[RECORD] = ConfigRecord(dict(held))
    logger.info("secure aggregation: held weights restored from %s", path)
    return held


def save_held(context: Context, held: Mapping[str, float]) -> None:
    """Keep ``held`` in ``Context.state`` and, with a state dir, atomically on disk."""
    context.state.config_records[RECORD] = ConfigRecord(dict(held))
    path = _path(context)
    if path is None:
        return
    text = json.dumps(dict(held), sort_keys=True).encode()
    write_atomically(path, lambda stream: stream.write(text))
