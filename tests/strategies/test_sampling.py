"""Sampling never waits forever: Flower's draw, bounded by round-timeout."""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Sequence

import numpy as np
import pytest
from flwr.app import ConfigRecord
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg
from flwr.serverapp.strategy import strategy_utils

from fairfl._compat import server_task_identity
from fairfl.strategies import RCFL, FedAvg, sampling
from fairfl.strategies.sampling import SamplingTimeoutError, sample_nodes
from tests.conftest import arrays_of


class ArrivingGrid:
    """A Grid stand-in whose connected nodes are read from a list of snapshots."""

    def __init__(self, snapshots: Sequence[list[int]]) -> None:
        self.snapshots = list(snapshots)
        self.looks = 0

    def get_node_ids(self) -> Iterable[int]:
        """The next snapshot (the last one repeats)."""
        nodes = self.snapshots[min(self.looks, len(self.snapshots) - 1)]
        self.looks += 1
        return list(nodes)

    def send_and_receive(self, messages: Iterable[object], *, timeout: float) -> list[object]:
        """Nobody answers."""
        list(messages)
        return []


NODES = [1007, 1003, 1011, 1002, 1009, 1005]


@pytest.mark.parametrize("sample_size", [0, 1, 3, 6])
def test_draws_the_same_nodes_as_flowers_sampler(sample_size):
    random.seed(11)
    expected = strategy_utils.sample_nodes(ArrivingGrid([NODES]), 2, sample_size)
    random.seed(11)
    assert sample_nodes(ArrivingGrid([NODES]), 2, sample_size, timeout=1.0) == expected


def test_gives_up_at_the_deadline_naming_the_keys():
    grid = ArrivingGrid([[1001]])
    started = time.monotonic()
    with pytest.raises(
        SamplingTimeoutError,
        match=r"configure_train: only 1 nodes connected, fewer than the 3 that "
        r"min-available-nodes=3 .* round-timeout=0.2 s",
    ):
        sample_nodes(grid, 3, 1, timeout=0.2, hook="configure_train")
    assert 0.2 <= time.monotonic() - started < 1.0


def test_waits_for_late_nodes_within_the_deadline(monkeypatch):
    monkeypatch.setattr(sampling, "POLL_INTERVAL", 0.01)
    grid = ArrivingGrid([[1001], [1001, 1002], [1001, 1002, 1003]])
    random.seed(0)
    sampled, connected = sample_nodes(grid, 3, 2, timeout=5.0)
    assert connected == [1001, 1002, 1003] and grid.looks == 3
    random.seed(0)
    assert sampled == random.sample([1001, 1002, 1003], 2)


@pytest.mark.parametrize("hook", ["configure_train", "configure_evaluate"])
def test_strategy_sends_what_flowers_fedavg_sends(hook):
    arrays = arrays_of([np.ones(3)])
    ours, flowers = (
        cls(fraction_train=0.5, fraction_evaluate=0.5, min_available_nodes=2)
        for cls in (FedAvg, FlowerFedAvg)
    )
    with server_task_identity(1):
        random.seed(5)
        sent = list(
            getattr(ours, hook)(3, arrays, ConfigRecord({"lr": 0.1}), ArrivingGrid([NODES]))
        )
        random.seed(5)
        expected = list(
            getattr(flowers, hook)(3, arrays, ConfigRecord({"lr": 0.1}), ArrivingGrid([NODES]))
        )
    assert [m.metadata.dst_node_id for m in sent] == [m.metadata.dst_node_id for m in expected]
    assert len(sent) == 3
    for ours_message, flower_message in zip(sent, expected, strict=True):
        assert ours_message.metadata.message_type == flower_message.metadata.message_type
        assert dict(ours_message.content["config"]) == dict(flower_message.content["config"])


def test_round_timeout_bounds_the_wait_for_min_available_nodes():
    strategy = FedAvg(min_available_nodes=3)
    started = time.monotonic()
    with pytest.raises(SamplingTimeoutError, match=r"only 2 nodes connected.*round-timeout=0.3"):
        strategy.start(ArrivingGrid([[1001, 1002]]), arrays_of([np.ones(2)]), 1, timeout=0.3)
    assert time.monotonic() - started < 2.0


def test_rcfl_sampling_is_bounded_too():
    strategy = RCFL(min_available_nodes=4)
    strategy.sample_timeout = 0.1
    with pytest.raises(SamplingTimeoutError, match=r"only 3 nodes connected.*=4"):
        strategy.configure_train(
            1, arrays_of([np.ones(2)]), ConfigRecord(), ArrivingGrid([[1, 2, 3]])
        )
