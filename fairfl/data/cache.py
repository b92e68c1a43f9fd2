"""A file cache of partition index lists, shared by every process on a machine.

Flower starts a fresh ClientApp process for every message, so an in-process cache lives
for one message only, and partitioning again costs each message ~0.7 s (``dirichlet``
and ``iid`` import flwr-datasets, HuggingFace ``datasets`` and pandas). The index lists
are a pure function of the pool's labels and the partition settings, so they are
written once to

    ``$FAIRFL_CACHE_DIR/partitions/<sha256>.npz``  (default ``~/.cache/fairfl``,
    or ``$XDG_CACHE_HOME/fairfl`` when that is set)

and read back by every later message, run or simulated client with the same settings.
``FAIRFL_CACHE_DIR=off`` turns the cache off. The key hashes the settings, the labels
themselves, numpy's version and the installed flwr-datasets distribution, so a change
of any of them misses instead of reading stale lists. A file is written to a temporary
name in the same folder and renamed over the final one (`os.replace`), so two processes
writing at once both leave a whole file and a reader never sees half of one; a file that
is unreadable or inconsistent with the labels is ignored and rewritten. A cache folder
that cannot be written to only costs the recomputation.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import json
import logging
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from fairfl._cache import CACHE_ENV, PRIVATE_FILE_MODE, cache_dir, make_private_dir

__all__ = ["CACHE_ENV", "cache_dir", "cached_partition", "partition_key"]

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
"""Bumped whenever the file layout or the meaning of a key changes."""


def partition_key(settings: Mapping[str, object], labels: np.ndarray) -> str:
    """Return the hex SHA-256 that names one partition's cache file.

    Parameters
    ----------
    settings : Mapping[str, object]
        Every argument the partitioner receives except the labels (JSON-serialisable).
    labels : np.ndarray
        The pool's labels, hashed byte for byte with their dtype and shape.

    Returns
    -------
    str
        64 hex digits.

    """
    labels = np.ascontiguousarray(labels)
    identity = {
        "format": FORMAT_VERSION,
        "settings": dict(sorted(settings.items())),
        "labels": hashlib.sha256(labels.tobytes()).hexdigest(),
        "labels-dtype": labels.dtype.str,
        "labels-shape": list(labels.shape),
        "numpy": np.__version__,
        "flwr-datasets": _distribution_name("flwr_datasets"),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def cached_partition(
    settings: Mapping[str, object],
    labels: np.ndarray,
    compute: Callable[[], list[np.ndarray]],
    *,
    folder: Path | None = None,
) -> list[np.ndarray]:
    """Return the partition's index lists from the cache, or compute and store them.

    Parameters
    ----------
    settings : Mapping[str, object]
        The partitioner's arguments other than the labels (see `partition_key`).
    labels : np.ndarray
        The pool's labels; the lists index into them.
    compute : Callable[[], list[np.ndarray]]
        Computes the lists on a miss; its errors propagate and nothing is stored.
    folder : Path | None
        The cache folder; defaults to `cache_dir()` (``None`` there: no cache).

    Returns
    -------
    list[np.ndarray]
        One int64 index array per partition.

    """
    root = cache_dir() if folder is None else folder
    if root is None:
        return compute()
    path = root / "partitions" / f"{partition_key(settings, labels)}.npz"
    lists = _read(path, len(labels))
    if lists is not None:
        return lists
    lists = compute()
    _write(path, lists)
    return lists


def _read(path: Path, num_samples: int) -> list[np.ndarray] | None:
    """The lists stored at ``path``, or ``None`` if absent, unreadable or inconsistent."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            indices, offsets = stored["indices"], stored["offsets"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError) as err:
        logger.debug("partition cache: ignoring unreadable %s (%s)", path, err)
        return None
    consistent = (
        indices.dtype == np.int64
        and offsets.dtype == np.int64
        and indices.ndim == 1
        and offsets.ndim == 1
        and len(offsets) >= 2
        and offsets[0] == 0
        and offsets[-1] == len(indices)
        and bool(np.all(np.diff(offsets) >= 0))
        and (len(indices) == 0 or (indices.min() >= 0 and indices.max() < num_samples))
    )
    if not consistent:
        logger.debug("partition cache: ignoring inconsistent %s", path)
        return None
    return [indices[start:stop] for start, stop in itertools.pairwise(offsets)]


def _write(path: Path, lists: list[np.ndarray]) -> None:
    """Store ``lists`` at ``path`` atomically (temporary file, then `os.replace`)."""
    sizes = [len(rows) for rows in lists]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    indices = np.concatenate(lists).astype(np.int64) if lists else np.zeros(0, dtype=np.int64)
    temporary: str | None = None
    try:
        make_private_dir(path.parent)  # 0700 and 0600 whatever the umask
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".npz")
        os.fchmod(handle, PRIVATE_FILE_MODE)
        with os.fdopen(handle, "wb") as file:
            np.savez(file, indices=indices, offsets=offsets)
        os.replace(temporary, path)
        temporary = None
    except OSError as err:
        logger.debug("partition cache: could not write %s (%s)", path, err)
    finally:
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)


def _distribution_name(package: str) -> str:
    """``<name>-<version>.dist-info`` of an installed package, without importing it.

    ``importlib.metadata.version`` scans every distribution (~30 ms); the package's
    own folder sits beside its ``dist-info`` folder, which names the version.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return ""
    site = Path(next(iter(spec.submodule_search_locations))).parent
    names = sorted(p.name for p in site.glob(f"{package}-*.dist-info"))
    return names[-1] if names else ""
