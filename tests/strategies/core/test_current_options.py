"""An option set on a built strategy is used from the next round on, and checked.

Every option is an attribute too (``strategy.max_loss``), as in Flower's FedAvg. Since
the core split the reply intake read the options frozen at construction, so a value
set afterwards (the ServerApp's ``min_available_nodes``; a user's ``max_loss``) was
silently ignored by the intake while the attribute showed it.
"""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord

from fairfl._compat import server_task_identity
from fairfl.contract import keys
from fairfl.strategies import build_strategy
from tests.project.server_install_probe import SHAPES, replies
from tests.strategies.test_ditto_pairing import _grid


def _term_round(**attributes: object):
    strategy = build_strategy("term", {}, min_available_nodes=1)
    for name, value in attributes.items():
        setattr(strategy, name, value)
    rng = np.random.default_rng(3)
    global_np = {k: rng.normal(size=s).astype(np.float32) for k, s in SHAPES.items()}
    arrays = ArrayRecord({k: Array(v) for k, v in global_np.items()})
    with server_task_identity(1):
        list(strategy.configure_train(1, arrays, ConfigRecord({"lr": 0.1}), _grid()))
    sent = replies(global_np, rng, strategy.reply_arrays_key)
    losses = [float(m.content["metrics"][keys.LOSS_BEFORE_TRAINING]) for m in sent]
    strategy.aggregate_train(1, sent)
    return strategy, losses, strategy.train_records[1]


def test_max_loss_set_after_construction_drops_larger_losses():
    _, losses, before = _term_round()
    assert before.dropped == {}
    bound = sorted(losses)[1] + 1e-6  # two replies within it, two above
    strategy, losses, record = _term_round(max_loss=bound)
    above = sorted(i for i, loss in enumerate(losses) if loss > bound)
    assert len(above) == 2
    assert sorted(record.dropped) == [1001 + i for i in above]
    assert all("max_loss" in reason for reason in record.dropped.values())
    assert strategy.options.max_loss == bound


def test_a_bad_value_set_after_construction_is_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"max_loss must be .*got -1"):
        _term_round(max_loss=-1.0)
