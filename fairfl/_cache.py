"""The per-user cache folder of fairfl: partition index lists and the compiled Gram kernel.

``$FAIRFL_CACHE_DIR``, else ``$XDG_CACHE_HOME/fairfl``, else ``~/.cache/fairfl``;
``FAIRFL_CACHE_DIR=off`` turns the disk cache off.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "FAIRFL_CACHE_DIR"
"""Environment variable naming the cache folder; the value ``off`` disables the cache."""


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
