"""A client that trained without the rule's client objective is named once, at WARNING.

``fair_train`` reports ``objective-ignored`` = 1 when the app's ``train_fn`` never
called the loss it was handed (Equitable FL's proximal term, PropFair's transform); the
round still aggregates the update, and the server says which client did it, once.
"""

from __future__ import annotations

import logging

import numpy as np
from flwr.app import ConfigRecord

from fairfl._compat import server_task_identity
from fairfl.contract import keys
from fairfl.strategies import FedAvg, PropFair
from tests.conftest import arrays_of, make_reply
from tests.strategies.core.test_flower_interface import GLOBAL, NODES, grid_of, local


def metrics(node: int, ignored: int | None) -> dict[str, object]:
    found: dict[str, object] = {
        keys.NUM_EXAMPLES: 10,
        keys.LOSS_BEFORE_TRAINING: 0.5,
        keys.PARTITION_ID: node - 1,
    }
    if ignored is not None:
        found[keys.OBJECTIVE_IGNORED] = ignored
    return found


def run_round(strategy, server_round: int, ignored_by: set[int]) -> None:
    with server_task_identity(1):
        list(
            strategy.configure_train(
                server_round, arrays_of(GLOBAL), ConfigRecord({"lr": 0.1}), grid_of(NODES)
            )
        )
    replies = [make_reply(n, local(1.0), metrics(n, int(n in ignored_by))) for n in NODES]
    arrays, _ = strategy.aggregate_train(server_round, replies)
    assert arrays is not None  # the round still aggregates


def warned(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "client objective" in r.getMessage()]


def test_an_ignored_propfair_objective_is_warned_once_per_client(caplog):
    strategy = PropFair()
    with caplog.at_level(logging.WARNING, logger="fairfl"):
        run_round(strategy, 1, ignored_by={2, 4})
        run_round(strategy, 2, ignored_by={2, 4})  # the same clients again: no new line
    lines = warned(caplog)
    assert len(lines) == 2
    assert lines[0].startswith("client 1 trained without the rule's client objective")
    assert lines[1].startswith("client 3 trained without")  # partition ids 1 and 3
    assert all("(propfair-m)" in line and "train with that loss_fn" in line for line in lines)
    np.testing.assert_equal(sorted(strategy.objective_warned), ["1", "3"])


def test_no_warning_when_the_rule_sends_no_objective_or_the_client_used_it(caplog):
    with caplog.at_level(logging.WARNING, logger="fairfl"):
        run_round(FedAvg(), 1, ignored_by=set(NODES))  # FedAvg sends no objective
        run_round(PropFair(), 1, ignored_by=set())
    assert warned(caplog) == []
