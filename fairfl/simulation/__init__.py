"""Run federations in one process: an in-memory Grid for tests and sweeps."""

from fairfl.simulation.inprocess import InMemoryGrid, node_configs_for, run_inprocess

__all__ = ["InMemoryGrid", "node_configs_for", "run_inprocess"]
