"""Server side: the fairfl ServerApp, its run loop and results files.

The names below load on first use (PEP 562), so that importing one light module of this
package (:mod:`fairfl.server.preflight`, which checks a run config) does not load the run
loop and, through the initial model, torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fairfl._lazy import lazy_names

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

__getattr__, __dir__ = lazy_names(__name__, _HOMES)
