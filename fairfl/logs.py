"""Show fairfl's log lines in Flower's console output."""

from __future__ import annotations

import logging
import sys

_attached = False


def attach_flower_console(level: int | None = logging.INFO) -> None:
    """Show the ``fairfl`` logger's lines through Flower's console handler, once per process.

    Every fairfl strategy calls this when it is constructed, so a ServerApp that only
    imports :mod:`fairfl.strategies` shows fairfl's lines (dropped replies at WARNING)
    with no set-up. Later calls do nothing.

    Flower's handler is added unless a handler of the ``fairfl`` logger or of an
    ancestor it propagates to (``logging.basicConfig``'s on the root logger) already
    writes to the console: then the lines show there, and adding Flower's would print
    each twice. ``propagate`` is left as it is, so handlers on the root logger (pytest's
    ``caplog``, an app's log file) still receive the lines.

    Parameters
    ----------
    level : int | None (default: logging.INFO)
        Level of the ``fairfl`` logger. ``None`` sets INFO only where no level was set
        (``NOTSET``), keeping one an application chose.
    """
    global _attached
    if _attached:
        return
    _attached = True
    from flwr.common.logger import console_handler

    package_logger = logging.getLogger("fairfl")
    if level is not None:
        package_logger.setLevel(level)
    elif package_logger.level == logging.NOTSET:
        package_logger.setLevel(logging.INFO)
    if not _writes_to_console(package_logger):
        package_logger.addHandler(console_handler)


def _writes_to_console(logger: logging.Logger) -> bool:
    """Whether a handler that ``logger``'s records reach writes to stdout or stderr."""
    consoles = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            stream = getattr(handler, "stream", None)
            if stream is not None and stream in consoles:
                return True
        current = current.parent if current.propagate else None
    return False
