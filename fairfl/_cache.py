"""The per-user cache folder of fairfl: partition index lists and the compiled Gram kernel.

``$FAIRFL_CACHE_DIR``, else ``$XDG_CACHE_HOME/fairfl``, else ``~/.cache/fairfl``;
``FAIRFL_CACHE_DIR=off`` turns the disk cache off.

What fairfl creates there gets explicit modes, whatever the process's umask: folders
0700 and files 0600 (a library 0700). A library loaded from the cache runs in the server
process, so a umask of 000 must not leave it, or the folder it is in, writable by others.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

CACHE_ENV = "FAIRFL_CACHE_DIR"
"""Environment variable naming the cache folder; the value ``off`` disables the cache."""

#: Mode of every folder fairfl creates for its cache (the umask does not apply).
PRIVATE_DIR_MODE = 0o700
#: Mode of every data file fairfl writes into its cache (the umask does not apply).
PRIVATE_FILE_MODE = 0o600


def cache_dir() -> Path | None:
    """Return the cache folder (not created here), or ``None`` if the cache is off.

    Returns
    -------
    Path | None
        ``$FAIRFL_CACHE_DIR``, else ``$XDG_CACHE_HOME/fairfl``, else
        ``~/.cache/fairfl``; ``None`` when ``FAIRFL_CACHE_DIR`` is ``off``.

    """
    configured = os.environ.get(CACHE_ENV, "")
    if configured.strip().lower() == "off":
        return None
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(xdg) if xdg else Path("~/.cache").expanduser()) / "fairfl"


def make_private_dir(folder: Path) -> None:
    """Create ``folder`` and its missing parents, each with mode :data:`PRIVATE_DIR_MODE`.

    ``mkdir``'s mode is masked by the umask (and ``Path.mkdir(parents=True)`` gives the
    parents the default 0777 & ~umask), so each folder created here is set to 0700
    afterwards. Folders that exist already are left as they are: callers that load
    code from one check it with :func:`is_private`.

    Raises
    ------
    OSError
        If a folder cannot be created (the message names it).
    """
    missing: list[Path] = []
    current = folder
    while not os.path.lexists(current) and current != current.parent:
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, PRIVATE_DIR_MODE)
        except FileExistsError:
            continue  # another process made it first; callers check what they use
        os.chmod(path, PRIVATE_DIR_MODE)


def is_private(status: os.stat_result) -> bool:
    """Whether a stat result belongs to this user and neither group nor others may write it."""
    return status.st_uid == os.getuid() and not status.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
