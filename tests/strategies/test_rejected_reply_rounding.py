"""A reply a rule rejects in its own pass leaves the round as the round without it.

What ``RejectedRepliesError``'s docstring guarantees (issue 35 item 5): the rule's state
is that of the round without the bad reply, and each model entry is within 4 float32 ε
of the array's largest entry of it (q-FFL's fused step differs once a reply was rejected).
"""

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from fairfl.strategies.registry import STRATEGIES
from tests.conftest import make_reply
from tests.strategies.test_bad_replies_all_rules import (
    honest_arrays,
    honest_metrics,
    honest_replies,
    run_round,
)


@pytest.mark.parametrize("rule", sorted(STRATEGIES))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_rejected_reply_changes_the_model_by_float32_rounding_at_most(rule, seed):
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
    for a, b in zip(got.values(), want.values(), strict=True):
        # |Δ| <= 4 float32 ε of the array's largest entry (the rounding of a sum of it).
        bound = 4 * np.finfo(np.float32).eps * float(np.max(np.abs(b.numpy())))
        assert float(np.max(np.abs(a.numpy() - b.numpy()))) <= bound
