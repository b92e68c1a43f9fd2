"""Atomic per-round checkpoints, so a crashed ServerApp resumes where it stopped.

A checkpoint is one ``.npz`` file (no pickle): the global arrays under ``arrays/<key>``
and a JSON document under ``__meta__`` with the finished round, the strategy's state
(:meth:`FairStrategy.state_dict`), Python's and NumPy's global random states (Flower's
node sampling uses :mod:`random`) and the results lines written so far. It is written
to a temporary file and renamed over the old one, so a crash mid-write leaves the
previous checkpoint intact.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord

CHECKPOINT_FILE = "checkpoint.npz"
_META = "__meta__"
_PREFIX = "arrays/"


@dataclass(frozen=True)
class Checkpoint:
    """Everything needed to continue a run after ``server_round``."""

    server_round: int
    arrays: ArrayRecord
    strategy_state: dict[str, Any]
    python_random: list[Any]
    numpy_random: list[Any]
    rounds: list[dict[str, Any]]


def capture_random_state() -> tuple[list[Any], list[Any]]:
    """Python's and NumPy's global random states, as JSON-able lists."""
    version, internal, gauss = random.getstate()
    name, keys, position, has_gauss, cached = np.random.get_state(legacy=True)  # type: ignore[misc]
    return (
        [version, list(internal), gauss],
        [name, keys.tolist(), int(position), int(has_gauss), float(cached)],
    )


def restore_random_state(python_state: list[Any], numpy_state: list[Any]) -> None:
    """Inverse of :func:`capture_random_state`."""
    version, internal, gauss = python_state
    random.setstate((version, tuple(internal), gauss))
    name, keys, position, has_gauss, cached = numpy_state
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached))


def save_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    """Write ``checkpoint`` atomically (temporary file, fsync, rename)."""
    meta = {
        "server_round": checkpoint.server_round,
        "strategy_state": checkpoint.strategy_state,
        "python_random": checkpoint.python_random,
        "numpy_random": checkpoint.numpy_random,
        "rounds": checkpoint.rounds,
    }
    payload = {f"{_PREFIX}{key}": array.numpy() for key, array in checkpoint.arrays.items()}
    payload[_META] = np.array(json.dumps(meta))
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("wb") as handle:
        np.savez(handle, **payload)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def load_checkpoint(path: Path) -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint`.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist (the message names it).
    ValueError
        If the file is not a fairfl checkpoint.
    """
    if not path.exists():
        raise FileNotFoundError(f"run config resume-from: no checkpoint at {path}")
    with np.load(path, allow_pickle=False) as data:
        if _META not in data.files:
            raise ValueError(f"{path} is not a fairfl checkpoint (no {_META} entry)")
        meta = json.loads(str(data[_META]))
        arrays = ArrayRecord(
            {
                name[len(_PREFIX) :]: Array(np.array(data[name]))
                for name in data.files
                if name.startswith(_PREFIX)
            }
        )
    return Checkpoint(
        server_round=int(meta["server_round"]),
        arrays=arrays,
        strategy_state=meta["strategy_state"],
        python_random=meta["python_random"],
        numpy_random=meta["numpy_random"],
        rounds=meta["rounds"],
    )
