"""reweighted_average works block by block; the result equals the plain float64 formula."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairfl.strategies._ops import passes
from fairfl.strategies.core.aggregation import reweighted_average

pytestmark = pytest.mark.flower_free  # no Flower API: not run again under the oldest flwr


def plain(global_arrays, local_arrays, weights):
    """The unblocked reference: Σλ_i w_i (+ (1 - Σλ) w^t), accumulated in float64."""
    out = []
    for index, g in enumerate(global_arrays):
        total = np.zeros(g.shape, np.float64)
        for w, client in zip(weights, local_arrays, strict=True):
            total += np.asarray(client[index], np.float64) * w
        if abs(1 - sum(weights)) > 1e-15:
            total += np.asarray(g, np.float64) * (1 - sum(weights))
        out.append(total.astype(g.dtype))
    return out


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 4), st.integers(0, 2**31 - 1), st.booleans())
def test_blocked_equals_plain_across_block_edges(num_clients, seed, sums_to_one):
    rng = np.random.default_rng(seed)
    block = passes.SUM_BLOCK
    shapes = [(block + 7,), (3, 5), (2, block // 2 + 1), ()]
    global_arrays = [rng.normal(size=s).astype(np.float32) for s in shapes]
    local_arrays = [
        [rng.normal(size=s).astype(np.float32) for s in shapes] for _ in range(num_clients)
    ]
    weights = rng.uniform(-0.5, 1.0, size=num_clients)
    if sums_to_one:
        weights = weights / weights.sum()
    got = reweighted_average(global_arrays, local_arrays, weights)
    for a, b, g in zip(
        got, plain(global_arrays, local_arrays, weights), global_arrays, strict=True
    ):
        assert a.shape == g.shape and a.dtype == g.dtype
        np.testing.assert_array_equal(a, b)


def test_non_contiguous_inputs():
    g = np.zeros((4, 6), np.float32)
    locals_ = [[np.arange(24, dtype=np.float32).reshape(6, 4).T], [np.ones((4, 6), np.float32)]]
    got = reweighted_average([g], locals_, [0.5, 0.5])
    np.testing.assert_array_equal(got[0], 0.5 * locals_[0][0] + 0.5)
