"""The files ``flwr run`` packs, staged in a folder of their own before it packs them.

``flwr run <app>`` walks every file under ``<app>`` before it applies ``fab-include``
(``flwr.cli.utils.collect_files``): from a checkout with its virtual environment inside
(torch alone is tens of thousands of files) that walk cost 12 CPU-s a run, against 3.5
from a folder holding only what the FAB holds. :func:`stage_app` copies exactly the
candidates of the app's ``fab-include`` patterns, with ``pyproject.toml`` and
``.gitignore``, so Flower applies the same rules to the copy and packs the same FAB
(``tests/project/test_fab.py`` compares the two).
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

#: Characters that make a path segment a pattern rather than a literal folder name.
_GLOB_CHARS = frozenset("*?[]!\\")
#: Files Flower reads from the app folder besides the packed ones.
_APP_FILES = ("pyproject.toml", ".gitignore")


def fab_include(app: Path) -> list[str] | None:
    """The app's ``[tool.flwr.app] fab-include`` patterns, or None if it has none."""
    project = tomllib.loads((app / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = project.get("tool", {}).get("flwr", {}).get("app", {}).get("fab-include")
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        return None
    return patterns


def _stageable(pattern: str) -> bool:
    """Whether ``pattern`` starts with a literal folder (so only that folder is walked)."""
    head, slash, _ = pattern.lstrip("/").partition("/")
    return bool(slash) and bool(head) and not _GLOB_CHARS & set(head)


def stage_app(app: Path, into: Path) -> Path:
    """Copy the files ``flwr run app`` would pack into ``into``; the folder to run.

    Parameters
    ----------
    app : Path
        The Flower app folder (its ``pyproject.toml`` names the patterns).
    into : Path
        An empty or absent folder: the staged copy.

    Returns
    -------
    Path
        ``into`` holding ``pyproject.toml``, ``.gitignore`` (if any) and every file an
        include pattern matches; ``app`` itself when it has no ``fab-include`` or a
        pattern does not start with a literal folder (Flower would then walk the whole
        app, so a partial copy could pack less).
    """
    patterns = fab_include(app)
    if not patterns or not all(_stageable(p) for p in patterns):
        return app
    into.mkdir(parents=True, exist_ok=True)
    for name in _APP_FILES:
        if (app / name).is_file():
            shutil.copy2(app / name, into / name)
    for pattern in patterns:
        for source in app.glob(pattern.lstrip("/")):
            if source.is_file() and "__pycache__" not in source.parts:
                target = into / source.relative_to(app)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
    return into
