"""Run federations in one process: an in-memory Grid for tests and sweeps.

The names below load on first use (PEP 562): the command line's signal handling and
engine helpers (:mod:`fairfl.simulation.engine`) must not pull in the in-process runner
and, through the model zoo, torch before a run config is checked.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fairfl.simulation.inprocess import InMemoryGrid, node_configs_for, run_inprocess

__all__ = ["InMemoryGrid", "node_configs_for", "run_inprocess"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("fairfl.simulation.inprocess"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    # The lazy names too: autosummary and IDEs list a package's members through dir().
    return sorted({*globals(), *__all__})
