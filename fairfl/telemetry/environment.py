"""What a run ran with: package versions and the machine, for summaries and trackers."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

#: The packages whose versions every run records.
PACKAGES = ("fairfl", "flwr", "torch", "numpy")
#: Environment variable through which fairfl's simulation launcher tells the ServerApp
#: which Ray cluster the run's clients run on (its GCS address, or ``local``).
RAY_CLUSTER_ENV = "FAIRFL_RAY_CLUSTER"


def environment() -> dict[str, Any]:
    """The versions a run ran with (fairfl, flwr, torch, numpy, Python) and the machine.

    A package that is not installed (torch on an aggregation-only server) is ``None``.
    ``revision`` is :func:`source_revision` (``None`` outside a git checkout: then the
    installed version says what ran). A run of Flower's simulation engine started by
    fairfl's launcher also names its Ray cluster (``ray_cluster``: the attached
    cluster's address, or ``local`` for the private Ray started with the run).
    """
    versions: dict[str, str | None] = {}
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    versions["python"] = platform.python_version()
    found: dict[str, Any] = {
        "versions": versions,
        "revision": source_revision(),
        "machine": {
            "platform": platform.platform(),
            "machine": platform.machine(),
            "processor": platform.processor() or None,
            "cpu_count": os.cpu_count(),
        },
    }
    if os.environ.get(RAY_CLUSTER_ENV):
        found["ray_cluster"] = os.environ[RAY_CLUSTER_ENV]
    return found


def environment_params() -> dict[str, Any]:
    """:func:`environment` as flat tracker params (``version-flwr``, ``source-commit``).

    MLflow params and W&B config are flat key-value pairs; the prefixes keep them apart
    from the run-config keys, none of which starts with ``version-``, ``source-`` or
    ``machine-``.
    """
    found = environment()
    revision = found["revision"] or {}
    return {
        **{f"version-{name}": value for name, value in found["versions"].items()},
        **{f"source-{name}": value for name, value in revision.items()},
        **{f"machine-{name.replace('_', '-')}": value for name, value in found["machine"].items()},
    }


def source_revision() -> dict[str, Any] | None:
    """The git commit of the checkout fairfl was imported from, and whether it had edits.

    ``{"commit": sha, "modified": bool}`` (``modified``: tracked files differ from the
    commit), or ``None`` when fairfl is not imported from a git checkout (an installed
    wheel, a FAB's copy) or git is not there; never raises, and gives up after 5 s.
    """
    source = Path(__file__).resolve().parents[1]
    if not any((folder / ".git").exists() for folder in (source, *source.parents)):
        return None
    try:
        commit = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        changes = subprocess.run(
            ["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "modified": bool(changes.strip())}
