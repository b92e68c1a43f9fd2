"""A reply a rule rejects in its own pass leaves the round as the round without it.

What ``RejectedReplies``' docstring guarantees (issue 35 item 5, tightened by issue 34):
the rule's state is that of the round without the bad reply, and so is the model, bit for
bit (the pass that rejects it is run again over the other replies, as that round's is).
"""

from unittest.mock import Mock

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord
from flwr.serverapp import Grid

from fairfl._compat import server_task_identity
from fairfl.contract import keys
from fairfl.strategies.core import base
from fairfl.strategies.registry import STRATEGIES, build_strategy
from tests.conftest import make_reply
from tests.strategies.test_bad_replies_all_rules import (
    HONEST_NODES,
    RUN_CONFIG,
    SHAPES,
    honest_arrays,
    honest_metrics,
    honest_replies,
    run_round,
)


@pytest.mark.parametrize("rule", sorted(STRATEGIES))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_rejected_reply_leaves_the_round_without_it_bit_for_bit(rule, seed):
    rng = np.random.default_rng(seed)
    honest = honest_replies(rng)
    arrays = honest_arrays(rng)
    arrays["w"][0, 0] = np.nan  # found by the rule's own value pass, not the reader
    bad = make_reply(
        99, ArrayRecord({k: Array(v) for k, v in arrays.items()}), honest_metrics(rng, 99)
    )
    attacked, got = run_round(rule, [*honest, bad])
    clean, want = run_round(rule, honest_replies(np.random.default_rng(seed)))
    assert 99 in attacked.train_records[1].dropped
    assert attacked.state_dict() == clean.state_dict()
    assert attacked.train_records[1].weights == clean.train_records[1].weights
    for a, b in zip(got.values(), want.values(), strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def configured(rule):
    strategy = build_strategy(rule, RUN_CONFIG, min_available_nodes=1, min_train_nodes=1)
    grid = Mock(spec=Grid)
    grid.get_node_ids.return_value = list(HONEST_NODES)
    global_record = ArrayRecord({k: Array(np.zeros(s, np.float32)) for k, s in SHAPES.items()})
    with server_task_identity(1):
        list(strategy.configure_train(1, global_record, ConfigRecord({"lr": 0.1}), grid))
    return strategy


def train_round(strategy, seed):
    replies = honest_replies(np.random.default_rng(seed))
    if strategy.reply_arrays_key != keys.ARRAYS:  # q-FedSGD: the arrays are its gradient
        for reply in replies:
            reply.content[strategy.reply_arrays_key] = reply.content.pop(keys.ARRAYS)
    with server_task_identity(1):
        return strategy.aggregate_train(1, replies)


@pytest.mark.parametrize("rule", sorted(STRATEGIES))
def test_a_skipped_round_changes_no_state_of_the_rule(rule, monkeypatch):
    # A rule's state changes only once its round is accepted (DeferredUpdates): a round
    # whose new model is unusable leaves it as configure_train left it.
    skipped = configured(rule)
    before = skipped.state_dict()
    monkeypatch.setattr(base, "global_model", lambda *_: (None, "is forced unusable"))
    arrays, _ = train_round(skipped, seed=4)
    assert arrays is None
    assert skipped.train_records[1].skipped == "the new global model is forced unusable"
    assert skipped.state_dict() == before


def test_an_accepted_round_changes_the_state_of_the_stateful_rules():
    # The control of the test above: these rules' state does move in an accepted round.
    moved = set()
    for rule in sorted(STRATEGIES):
        strategy = configured(rule)
        before = strategy.state_dict()
        arrays, _ = train_round(strategy, seed=4)
        assert arrays is not None
        if strategy.state_dict() != before:
            moved.add(rule)
    assert {"afl", "fairfed", "fedadam", "fedfa", "fedyogi", "rcfl"} <= moved
