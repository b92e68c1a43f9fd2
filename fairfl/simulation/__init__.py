"""Run federations in one process: an in-memory Grid for tests and sweeps.

The names below load on first use (PEP 562): the command line's signal handling and
engine helpers (:mod:`fairfl.simulation.engine`) must not pull in the in-process runner
and, through the model zoo, torch before a run config is checked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fairfl._lazy import lazy_names

if TYPE_CHECKING:
    from fairfl._compat import server_task_identity
    from fairfl.simulation.inprocess import InMemoryGrid, node_configs_for, run_inprocess

__all__ = ["InMemoryGrid", "node_configs_for", "run_inprocess", "server_task_identity"]
_HOMES = dict.fromkeys(__all__[:3], "fairfl.simulation.inprocess")
# Driving a ServerApp's main on an InMemoryGrid by hand (the plug-into-flower tutorial)
# needs the server's task identity that Message() reads (flwr >= 1.41).
_HOMES["server_task_identity"] = "fairfl._compat"

__getattr__, __dir__ = lazy_names(__name__, _HOMES)
