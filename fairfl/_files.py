"""Files written whole or not at all: a temporary file beside the target, renamed over it.

A client's state on its own disk (Ditto's personal models, a secure form's held weight)
must survive a SuperNode killed mid-write: a reader finds the old file or the new one,
never half of one.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

__all__ = ["write_atomically"]


def write_atomically(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """Write ``path`` through ``write``, which gets a binary stream; all or nothing.

    The bytes go to a temporary file in ``path``'s folder (created if absent), flushed
    and synced to disk, then renamed over ``path`` (:func:`os.replace`, atomic on one
    file system). If anything fails the temporary file is removed and the error raised;
    ``path`` is as it was.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
