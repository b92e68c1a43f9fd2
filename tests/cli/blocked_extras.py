"""Run fairfl as on the core install: torch, torchvision and matplotlib cannot be imported.

``sitecustomize`` (written by :func:`core_install_env`) puts a finder first on
``sys.meta_path`` that raises ``ModuleNotFoundError`` for them, as Python does for a
module that is not installed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

#: What the core install (``pip install fairfl``) lacks that fairfl would import.
BLOCKED = ("torch", "torchvision", "matplotlib")

SITECUSTOMIZE = '''
import sys

BLOCKED = {blocked!r}


class _NotInstalled:
    """Find nothing of BLOCKED, as if it were not installed."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _NotInstalled())
'''


def core_install_env(folder: Path, blocked: tuple[str, ...] = BLOCKED) -> dict[str, str]:
    """Environment whose Python cannot import ``blocked`` (``folder`` holds the hook)."""
    hook = SITECUSTOMIZE.format(blocked=blocked)
    (folder / "sitecustomize.py").write_text(hook, encoding="utf-8")
    repo = Path(__file__).resolve().parents[2]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(folder), str(repo)]),
        "FLWR_TELEMETRY_ENABLED": "0",
    }


def fairfl_command() -> list[str]:
    """``python -m fairfl`` with this interpreter."""
    return [sys.executable, "-m", "fairfl"]
