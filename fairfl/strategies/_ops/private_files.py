"""Files that only this user can swap: the folder walk and checks of the Gram kernel's cache.

A library loaded from fairfl's cache runs in the server process, so the cache folder and
every folder above it are checked as OpenSSH's ``StrictModes`` checks a user's ``~/.ssh``:
each folder above must belong to root or this user and be writable by no one else unless
sticky. The folder is walked from ``/`` one name at a time through descriptors opened with
``O_NOFOLLOW``, and files in it are opened by descriptor and checked on the opened file,
so nothing can be swapped between a check and its use
(:mod:`fairfl.strategies._ops.gram_kernel` builds and loads through these).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from fairfl._cache import CACHE_ENV, PRIVATE_DIR_MODE, is_private

#: Flags opening a folder on the way to the cache: never through a symlink.
FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def unsafe_ancestor(status: os.stat_result) -> bool:
    """Whether a folder above the cache lets someone other than this user or root swap it.

    OpenSSH's ``StrictModes`` rule: the folder must belong to root or this user, and
    neither group nor others may write to it unless it is sticky (like ``/tmp``, where
    only an entry's owner may rename or remove it).
    """
    foreign = status.st_uid not in (0, os.getuid())
    shared = status.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not status.st_mode & stat.S_ISVTX
    return bool(foreign or shared)


def open_private_folder(folder: Path) -> tuple[int | None, str]:
    """A descriptor of ``folder``, created 0700 where missing, if no one else can swap it.

    The folder's real path is walked from ``/`` one name at a time through descriptors
    (``O_NOFOLLOW``: a name swapped for a symlink during the walk is refused). Every
    folder above it must pass :func:`unsafe_ancestor`, and ``folder`` itself must belong
    to this user and be writable by no one else. Returns the descriptor and ``""``, or
    ``None`` and the reason, naming the folder that failed.
    """
    target = Path(os.path.realpath(folder))
    fd = os.open("/", FOLDER_FLAGS)
    current, opened = Path("/"), False
    try:
        for name in target.parts[1:]:
            status = os.fstat(fd)
            if unsafe_ancestor(status):
                return None, (
                    f"the cache folder {folder} is under {current} (owner uid {status.st_uid}, "
                    f"mode {stat.filemode(status.st_mode)}), which someone other than this "
                    f"user or root may swap; set {CACHE_ENV} to a private folder"
                )
            current = current / name
            created = False
            try:
                os.mkdir(name, PRIVATE_DIR_MODE, dir_fd=fd)
                created = True
            except FileExistsError:
                pass  # it exists, or another process made it first: checked as opened
            child = os.open(name, FOLDER_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
            if created:  # mkdir's mode is masked by the umask
                os.fchmod(fd, PRIVATE_DIR_MODE)
        if not is_private(os.fstat(fd)):
            return None, (
                f"the cache folder {folder} belongs to another user or others may write to "
                f"it; set {CACHE_ENV} to a private folder"
            )
        opened = True
        return fd, ""
    except OSError as error:
        return None, (
            f"the cache folder {folder} cannot be created or opened at {current} ({error}); "
            f"set {CACHE_ENV} to a private folder"
        )
    finally:
        if not opened:
            os.close(fd)


def open_private(folder_fd: int, name: str) -> tuple[int | None, str]:
    """A read-only descriptor of ``name`` in ``folder_fd`` if it is a private regular file of ours.

    ``O_NOFOLLOW`` refuses a symlink at ``name`` and ``O_NONBLOCK`` keeps a planted FIFO
    from blocking the open; the checks are made on the opened file (``fstat``), so
    nothing can be swapped in between. Returns the descriptor and ``""``, or ``None`` and
    why the file is not trusted.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=folder_fd)
    except FileNotFoundError:
        return None, f"{name} does not exist"
    except OSError as error:  # ELOOP: a symlink
        return None, f"{name} is a symlink or cannot be opened ({error})"
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode) or not is_private(status):
        os.close(fd)
        return None, (
            f"{name} is not a regular file of this user that only it may write "
            f"(owner uid {status.st_uid}, mode {stat.filemode(status.st_mode)})"
        )
    return fd, ""


def read_private(folder_fd: int, name: str) -> bytes:
    """The content of ``name`` in ``folder_fd`` if it is a private regular file of ours."""
    fd, _ = open_private(folder_fd, name)
    if fd is None:
        return b""
    with os.fdopen(fd, "rb") as file:
        return file.read(4096)
