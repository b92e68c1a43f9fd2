"""Atomic per-round checkpoints, so a crashed ServerApp resumes where it stopped.

A checkpoint is one ``.npz`` file (no pickle): the global arrays under ``arrays/<key>``
and a JSON document under ``__meta__`` with the finished round, the strategy's state
(:meth:`FairStrategy.state_dict`), Python's and NumPy's global random states (Flower's
node sampling uses :mod:`random`), the results lines written so far and the run's
*fingerprint*. A run whose clients live in this process (:mod:`fairfl.simulation.inprocess`)
also keeps each client's ``Context.state`` (Ditto's personal model v_k, any state a
rule's client keeps) under ``client-state/<client key>``, as the bytes of Flower's
protobuf of the record dict, so a resumed run continues from the clients' state at the
checkpointed round. It is written to a temporary file and renamed over the old one, so a
crash mid-write leaves the previous checkpoint intact.

The fingerprint (:func:`run_fingerprint`) is the plain dict of the run-config entries
that define what a run computes: every :class:`~fairfl.settings.RunSettings` value but
the operational ones (:data:`OPERATIONAL_KEYS`: out-dir, num-server-rounds, timeouts,
...) and the chosen rule's keys with their defaults filled in, plus its SHA-256.
:func:`check_fingerprint` refuses a resume whose fingerprint differs, listing each
differing key with both values, unless ``resume-force`` is set.

:func:`check_out_dir` refuses a run into an out-dir that already holds a run's results,
unless the run resumes from that folder's checkpoint or ``overwrite`` is set.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.proto.recorddict_pb2 import RecordDict as RecordDictProto
from google.protobuf.message import DecodeError

from fairfl.settings import RunSettings
from fairfl.strategies.registry import STRATEGIES
from fairfl.telemetry.config import TELEMETRY_KEYS

logger = logging.getLogger(__name__)

CHECKPOINT_FILE = "checkpoint.npz"
_META = "__meta__"
_PREFIX = "arrays/"
_CLIENT_PREFIX = "client-state/"

#: Run-config keys that do not change what a run computes: left out of its fingerprint
#: (a resume may extend num-server-rounds, move the out-dir, wait longer or change
#: where its telemetry goes).
OPERATIONAL_KEYS = frozenset(
    {
        "out-dir",
        "num-server-rounds",
        "resume-from",
        "resume-force",
        "overwrite",
        "checkpoint",
        "round-timeout",
        "node-wait-timeout",
        "min-available-nodes",
        "data-root",
        "download",
    }
).union(TELEMETRY_KEYS)
#: Files whose presence means an out-dir holds a run's results.
RESULT_FILES = ("rounds.jsonl", "summary.json", CHECKPOINT_FILE, "final_model.npz")


class FingerprintMismatchError(ValueError):
    """A resume's run config differs from the checkpointed run's (keys listed)."""


class OutDirNotEmptyError(FileExistsError):
    """The out-dir already holds another run's results."""


class CheckpointError(ValueError):
    """``resume-from`` names a file that is not a readable fairfl checkpoint."""


@dataclass(frozen=True)
class Checkpoint:
    """Everything needed to continue a run after ``server_round``."""

    server_round: int
    arrays: ArrayRecord
    strategy_state: dict[str, Any]
    python_random: list[Any]
    numpy_random: list[Any]
    rounds: list[dict[str, Any]]
    #: :func:`run_fingerprint` of the run ({} in checkpoints written before fingerprints).
    fingerprint: dict[str, Any] = field(default_factory=dict)
    #: The strategy's sampling state (size-proportional sampling's learnt n_k;
    #: ``FairStrategy.sampling_state``): {} for uniform sampling and older checkpoints.
    sampling_state: dict[str, Any] = field(default_factory=dict)
    #: Which node holds which client key (``Claims.state_dict`` of
    #: :mod:`fairfl.strategies.core.identity`): {} in older checkpoints.
    client_claims: dict[str, Any] = field(default_factory=dict)
    #: Client key -> that client's ``Context.state`` after ``server_round``, for the
    #: clients that live in the server's process ({} otherwise and in older checkpoints).
    client_state: dict[int, RecordDict] = field(default_factory=dict)
    #: Central DP's account and noise generator (``FairStrategy.privacy_state``): {}
    #: without DP and in older checkpoints.
    privacy_state: dict[str, Any] = field(default_factory=dict)


def _plain(value: Any) -> Any:
    """A rule key's value as compared in fingerprints: numbers as float (1 is 1.0)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    return float(value)


def run_fingerprint(settings: RunSettings, run_config: Mapping[str, Any]) -> dict[str, Any]:
    """The run-config entries that define a run, and their SHA-256.

    Parameters
    ----------
    settings : RunSettings
        The run's settings (defaults filled in; ``num-partitions`` as the run uses it).
    run_config : Mapping[str, Any]
        The run config, for the chosen rule's keys (absent ones take the rule's default).

    Returns
    -------
    dict[str, Any]
        ``{"sha256": hex digest, "config": {key: value}}``, JSON-able.
    """
    config: dict[str, Any] = {}
    for item in fields(settings):
        key = item.name.replace("_", "-")
        if key not in OPERATIONAL_KEYS:
            config[key] = getattr(settings, item.name)
    spec = STRATEGIES.get(settings.strategy)
    if spec is not None:
        defaults = spec.defaults()
        for key in spec.parameters:
            config[key] = _plain(run_config.get(key, defaults.get(key)))
    text = json.dumps(config, sort_keys=True, default=str)
    return {"sha256": hashlib.sha256(text.encode()).hexdigest(), "config": json.loads(text)}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


def fingerprint_differences(
    stored: Mapping[str, Any], current: Mapping[str, Any]
) -> dict[str, tuple[Any, Any]]:
    """Keys whose values differ: ``{key: (checkpoint's value, this run's value)}``.

    A key missing on one side shows ``None`` there.
    """
    before, now = stored.get("config", {}), current.get("config", {})
    return {
        key: (before.get(key), now.get(key))
        for key in sorted(set(before) | set(now))
        if key not in before or key not in now or not _same(before[key], now[key])
    }


def check_fingerprint(
    checkpoint: Checkpoint, current: Mapping[str, Any], source: Path, *, force: bool
) -> None:
    """Refuse to resume ``checkpoint`` into a run with another fingerprint.

    Parameters
    ----------
    checkpoint : Checkpoint
        The loaded checkpoint.
    current : Mapping[str, Any]
        :func:`run_fingerprint` of the run that resumes.
    source : Path
        Where the checkpoint was read (for the message).
    force : bool
        ``resume-force``: resume anyway, with a WARNING listing the differences.

    Raises
    ------
    FingerprintMismatchError
        If the fingerprints differ (or the checkpoint has none) and ``force`` is False;
        the message lists each differing key with the checkpoint's and this run's value.
    """
    if not checkpoint.fingerprint:
        problem = "has no run fingerprint (written by an older fairfl), so it cannot be checked"
    elif checkpoint.fingerprint.get("sha256") == current.get("sha256"):
        return
    else:
        differences = fingerprint_differences(checkpoint.fingerprint, current)
        listed = "; ".join(
            f"{key}: checkpoint {before!r}, this run {now!r}"
            for key, (before, now) in differences.items()
        )
        problem = f"was written by a run with other settings ({listed or 'same keys'})"
    if force:
        logger.warning("resume-force: resuming although the checkpoint %s %s", source, problem)
        return
    raise FingerprintMismatchError(
        f"run config resume-from: the checkpoint {source} {problem}. Resume with the "
        "checkpointed run's settings, or set resume-force=true (-c 'resume-force=true'; "
        "scripts/flwr_sim.py --force) to resume anyway."
    )


def check_out_dir(out_dir: Path, *, resume_from: str, overwrite: bool) -> None:
    """Refuse a run into an out-dir that holds another run's results.

    Allowed: an empty or new out-dir; ``overwrite`` (the old result files are removed,
    see :func:`clear_results`); a resume whose checkpoint lies in ``out_dir`` (the run
    continues there).

    Raises
    ------
    OutDirNotEmptyError
        Naming the folder, the files found and the keys that allow it.
    """
    found = [name for name in RESULT_FILES if (out_dir / name).exists()]
    if not found or overwrite:
        return
    if resume_from and Path(resume_from).resolve().parent == out_dir.resolve():
        return
    raise OutDirNotEmptyError(
        f"run config out-dir: {out_dir} already holds a run's results ({', '.join(found)}). "
        "Choose another out-dir, resume that run (resume-from="
        f"{out_dir / CHECKPOINT_FILE}), or set overwrite=true (-c 'overwrite=true'; "
        "scripts/flwr_sim.py --overwrite) to replace them."
    )


def clear_results(out_dir: Path) -> None:
    """Remove an earlier run's result files from ``out_dir`` (``overwrite``)."""
    for name in RESULT_FILES:
        (out_dir / name).unlink(missing_ok=True)


def capture_random_state() -> tuple[list[Any], list[Any]]:
    """Python's and NumPy's global random states, as JSON-able lists."""
    version, internal, gauss = random.getstate()
    name, keys, position, has_gauss, cached = np.random.get_state(legacy=True)
    return (
        [version, list(internal), gauss],
        [name, np.asarray(keys).tolist(), int(position), int(has_gauss), float(cached)],
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
        "fingerprint": checkpoint.fingerprint,
        "sampling_state": checkpoint.sampling_state,
        "client_claims": checkpoint.client_claims,
        "privacy_state": checkpoint.privacy_state,
    }
    payload = {f"{_PREFIX}{key}": array.numpy() for key, array in checkpoint.arrays.items()}
    for key, state in checkpoint.client_state.items():
        encoded = recorddict_to_proto(state).SerializeToString()
        payload[f"{_CLIENT_PREFIX}{key}"] = np.frombuffer(encoded, dtype=np.uint8)
    payload[_META] = np.array(json.dumps(meta))
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("wb") as handle:
        np.savez(handle, **payload)  # type: ignore[arg-type]  # numpy's stub: kwds are arrays
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def load_checkpoint(path: Path) -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint`.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist (the message names it).
    CheckpointError
        A ``ValueError``: the file is not a fairfl checkpoint, or cannot be read as
        one (truncated, corrupt, a field missing); the message names ``resume-from``,
        the file and the cause.
    """
    if not path.exists():
        raise FileNotFoundError(f"run config resume-from: no checkpoint at {path}")
    try:
        with np.load(path, allow_pickle=False) as data:
            if _META not in data.files:
                raise CheckpointError(
                    f"run config resume-from: {path} is not a fairfl checkpoint (no {_META} entry)"
                )
            meta = json.loads(str(data[_META]))
            arrays = ArrayRecord(
                {
                    name[len(_PREFIX) :]: Array(np.array(data[name]))
                    for name in data.files
                    if name.startswith(_PREFIX)
                }
            )
            client_state = {
                int(name[len(_CLIENT_PREFIX) :]): recorddict_from_proto(
                    RecordDictProto.FromString(data[name].tobytes())
                )
                for name in data.files
                if name.startswith(_CLIENT_PREFIX)
            }
        return Checkpoint(
            server_round=int(meta["server_round"]),
            arrays=arrays,
            strategy_state=meta["strategy_state"],
            python_random=meta["python_random"],
            numpy_random=meta["numpy_random"],
            rounds=meta["rounds"],
            fingerprint=meta.get("fingerprint") or {},
            sampling_state=meta.get("sampling_state") or {},
            client_claims=meta.get("client_claims") or {},
            client_state=client_state,
            privacy_state=meta.get("privacy_state") or {},
        )
    except CheckpointError:
        raise
    # What a truncated or corrupt .npz raises: not a zip (or a cut-off member), a member
    # whose bytes end early, JSON cut mid-way, a field missing or of the wrong type.
    except (
        zipfile.BadZipFile,
        EOFError,
        OSError,
        ValueError,
        KeyError,
        TypeError,
        DecodeError,
    ) as error:
        raise CheckpointError(
            f"run config resume-from: {path} cannot be read as a fairfl checkpoint "
            f"({type(error).__name__}: {error}); it may be truncated or corrupt: resume "
            "from an intact copy, or start a new run (empty resume-from)"
        ) from error


def client_states_of(grid: Any) -> dict[int, RecordDict]:
    """The ``Context.state`` of each client that lives in this process, by client key.

    A Grid whose clients run in the server's process (the in-process runner's) says so
    with a ``client_states()`` method; Flower's Grids do not (their clients keep their
    state in their own processes), and give ``{}``.
    """
    # Looked up on the class: a test double that answers every attribute is no such Grid.
    states = getattr(type(grid), "client_states", None)
    return dict(states(grid)) if callable(states) else {}
