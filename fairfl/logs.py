"""Show fairfl's log lines in Flower's console output."""

from __future__ import annotations

import logging

_attached = False


def attach_flower_console(level: int = logging.INFO) -> None:
    """Attach Flower's console handler to the ``fairfl`` logger, once per process."""
    global _attached
    if _attached:
        return
    from flwr.common.logger import console_handler

    package_logger = logging.getLogger("fairfl")
    package_logger.setLevel(level)
    package_logger.addHandler(console_handler)
    package_logger.propagate = False
    _attached = True
