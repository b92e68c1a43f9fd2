"""Server side: the fairfl ServerApp, its run loop and results files.

The names below load on first use (PEP 562), so that importing one light module of this
package (:mod:`fairfl.server.preflight`, which checks a run config) does not load the run
loop and, through the initial model, torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fairfl.server.preflight import check_run, make_strategy
    from fairfl.server.results import RoundLog
    from fairfl.server.run import RunOutcome, initial_arrays, run_federation

_HOMES = {
    "check_run": "fairfl.server.preflight",
    "make_strategy": "fairfl.server.preflight",
    "RoundLog": "fairfl.server.results",
    "RunOutcome": "fairfl.server.run",
    "initial_arrays": "fairfl.server.run",
    "run_federation": "fairfl.server.run",
}

__all__ = [
    "RoundLog",
    "RunOutcome",
    "check_run",
    "initial_arrays",
    "make_strategy",
    "run_federation",
]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    # The lazy names too: autosummary and IDEs list a package's members through dir().
    return sorted({*globals(), *__all__})
