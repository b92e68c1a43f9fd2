"""Before round 1 the ServerApp waits a bounded time for the SuperNodes it needs.

Too few SuperNodes end the run with an error naming the run-config keys that fix it;
in Flower's simulation engine the simulated SuperNodes define the partitions.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable, Sequence
from unittest.mock import Mock

import pytest
from flwr.serverapp import Grid

from fairfl.server import run as server_run
from fairfl.settings import RunSettings
from fairfl.simulation import run_inprocess
from fairfl.simulation.inprocess import node_configs_for


class InMemoryGrid:
    """Named and placed like the Grid of Flower's simulation engine; nodes come late."""

    __module__ = "flwr.superlink.grid.inmemory_grid"

    def __init__(self, arrivals: Sequence[list[int]]) -> None:
        self.arrivals = iter(arrivals)
        self.nodes: list[int] = []

    def get_node_ids(self) -> Iterable[int]:
        self.nodes = next(self.arrivals, self.nodes)
        return self.nodes


@pytest.fixture(autouse=True)
def fast_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_run, "NODE_POLL_INTERVAL", 0.01)
    # The ServerApp hands fairfl's log lines to Flower's console; caplog needs them too.
    monkeypatch.setattr(logging.getLogger("fairfl"), "propagate", True)


def test_too_few_supernodes_end_the_run_naming_the_keys(tmp_path):
    config = {"num-partitions": 20, "node-wait-timeout": 0.2, "out-dir": str(tmp_path)}
    with pytest.raises(
        TimeoutError,
        match=r"only 2 of the 20 SuperNodes this run needs connected within "
        r"node-wait-timeout=0\.2 s\. .*min-available-nodes=0 waits for all num-partitions=20"
        r".*min-available-nodes=<k>.*num-partitions=<k>",
    ):
        run_inprocess(config, node_configs=node_configs_for(2))
    assert not (tmp_path / "summary.json").exists()


def test_explicit_min_available_nodes_is_named(tmp_path):
    config = {"min-available-nodes": 3, "node-wait-timeout": 0.05, "out-dir": str(tmp_path)}
    with pytest.raises(TimeoutError, match=r"only 2 of the 3 .*min-available-nodes=3\."):
        run_inprocess(config, node_configs=node_configs_for(2))


def test_waits_for_late_supernodes_and_says_so(caplog):
    grid = Mock(spec=Grid)
    grid.get_node_ids.side_effect = [[], [1], [1, 2, 3]]
    settings = RunSettings(num_partitions=3)
    with caplog.at_level(logging.INFO, logger="fairfl.server.run"):
        server_run.wait_for_nodes(grid, 3, settings, deadline=float("inf"), simulation=False)
    assert grid.get_node_ids.call_count == 3
    assert "waiting for SuperNodes: 0 of 3 connected" in caplog.text
    assert "(node-wait-timeout). The run needs them because min-available-nodes=0" in caplog.text


def test_node_wait_timeout_must_be_positive():
    with pytest.raises(ValueError, match=r"node-wait-timeout must be > 0, got 0\.0"):
        RunSettings.from_run_config({"node-wait-timeout": 0})


def test_simulation_runs_on_the_supernodes_it_has(caplog):
    grid = InMemoryGrid([[], [5, 6], [5, 6]])
    settings = RunSettings(num_partitions=20)
    with caplog.at_level(logging.WARNING, logger="fairfl.server.run"):
        adapted, run_config = server_run.await_federation(grid, settings, {"num-partitions": 20})
    assert adapted.num_partitions == 2
    assert server_run.required_nodes(adapted) == 2
    assert run_config["num-partitions"] == 2  # as recorded in summary.json
    assert "--federation-config 'num-supernodes=20'" in caplog.text


def test_simulation_with_too_few_supernodes_names_num_supernodes():
    grid = InMemoryGrid([[5, 6]])
    settings = RunSettings(min_available_nodes=3, node_wait_timeout=0.05)
    with pytest.raises(
        TimeoutError, match=r"only 2 of the 3 .*--federation-config 'num-supernodes=3'"
    ):
        server_run.await_federation(grid, settings, {})


def test_flower_simulation_grid_is_recognised():
    # The very class flwr's simulation engine hands the ServerApp.
    engine = importlib.import_module("flwr.simulation.run_simulation")
    assert server_run.is_flower_simulation(engine.InMemoryGrid.__new__(engine.InMemoryGrid))
    assert not server_run.is_flower_simulation(Mock(spec=Grid))
