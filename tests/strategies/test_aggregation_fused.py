"""q-FFL's one-pass aggregation: sums and distances together, λ's normaliser at the end.

``weighted_sums_and_squared_distances`` + ``apply_weighted_sums`` must give
``reweighted_average``'s update with ``λ_k = u_k / D`` up to float64 rounding, and the
distances of ``squared_distance_parts`` exactly; the strategy must fall back to the
two-pass path when a reply is dropped after the pass.
"""

import logging
from unittest.mock import Mock

import numpy as np
import pytest
from flwr.app import ConfigRecord
from flwr.serverapp import Grid
from hypothesis import given, settings
from hypothesis import strategies as st

from fairfl._compat import server_task_identity
from fairfl.contract import keys
from fairfl.strategies import QFFL, aggregation, base
from fairfl.strategies.aggregation import apply_weighted_sums, reweighted_average
from fairfl.strategies.base import ReweightedStrategy
from fairfl.strategies.qffl import squared_distance_parts, weighted_sums_and_squared_distances
from tests.conftest import arrays_of, make_reply


def test_one_pass_by_hand():
    # w^t = [1, 1]; w_1 = [3, 1], w_2 = [1, 5]; u = (1, 3), D = 8 -> λ = (1/8, 3/8):
    #   Σ u_k w_k = [3 + 3, 1 + 15] = [6, 16];  / 8 = [0.75, 2.0]
    #   + (1 - 1/2) w^t = [1.25, 2.5];  ‖w^t - w_1‖² = 4, ‖w^t - w_2‖² = 16
    g = [np.array([1.0, 1.0], np.float32)]
    locals_ = [[np.array([3.0, 1.0], np.float32)], [np.array([1.0, 5.0], np.float32)]]
    sums, parts = weighted_sums_and_squared_distances(g, locals_, [1.0, 3.0])
    np.testing.assert_array_equal(parts, [[4.0], [16.0]])
    new = apply_weighted_sums(g, sums, 8.0, 0.5)
    np.testing.assert_array_equal(new[0], [1.25, 2.5])
    assert new[0].dtype == np.float32


def test_without_weights_only_distances_and_counters_keep_global():
    g = [np.zeros(2, np.float32), np.array([7], np.int64)]
    locals_ = [[np.array([1.0, 2.0], np.float32), np.array([1], np.int64)]]
    sums, parts = weighted_sums_and_squared_distances(g, locals_)
    assert sums == [None, None]
    np.testing.assert_array_equal(parts, [[5.0, 0.0]])
    sums, _ = weighted_sums_and_squared_distances(g, locals_, [1.0])
    assert sums[1] is None
    new = apply_weighted_sums(g, sums, 2.0, 0.5)
    np.testing.assert_array_equal(new[0], [0.5, 1.0])
    np.testing.assert_array_equal(new[1], [7])


def test_bad_arguments_rejected():
    g = [np.zeros(2, np.float32)]
    with pytest.raises(ValueError, match="weights must be 1 finite values"):
        weighted_sums_and_squared_distances(g, [[np.zeros(2, np.float32)]], [np.nan])
    with pytest.raises(ValueError, match="weights must be 1 finite values"):
        weighted_sums_and_squared_distances(g, [[np.zeros(2, np.float32)]], [1.0, 2.0])
    with pytest.raises(ValueError, match="same number of arrays"):
        weighted_sums_and_squared_distances(g, [[]], [1.0])
    with pytest.raises(ValueError, match="divisor must be finite and non-zero"):
        apply_weighted_sums(g, [np.zeros(2)], 0.0, 0.0)
    with pytest.raises(ValueError, match="global_weight finite"):
        apply_weighted_sums(g, [np.zeros(2)], 1.0, np.inf)


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 4), st.integers(0, 2**31 - 1), st.booleans())
def test_one_pass_equals_reweighted_average_across_block_edges(num_clients, seed, sums_to_one):
    rng = np.random.default_rng(seed)
    block = aggregation._BLOCK
    shapes = [(block + 7,), (3, 5), (2, block // 2 + 1), ()]
    # float64 models: the comparison is then at float64 rounding, not float32's.
    global_arrays = [rng.normal(size=s) for s in shapes]
    local_arrays = [[rng.normal(size=s) for s in shapes] for _ in range(num_clients)]
    numerators = rng.uniform(0.1, 2.0, size=num_clients)
    divisor = numerators.sum() if sums_to_one else numerators.sum() * rng.uniform(1.0, 3.0)
    lambdas = numerators / divisor
    sums, parts = weighted_sums_and_squared_distances(global_arrays, local_arrays, numerators)
    np.testing.assert_array_equal(parts, squared_distance_parts(global_arrays, local_arrays))
    new = apply_weighted_sums(global_arrays, sums, divisor, 1.0 - float(lambdas.sum()))
    for got, want in zip(
        new, reweighted_average(global_arrays, local_arrays, lambdas), strict=True
    ):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)


def test_one_pass_q_zero_is_the_correctly_rounded_mean():
    # q = 0: u_k = L, D = K L. Σ L w_k is exact in float64 and divided once, so the
    # float32 result is the correctly rounded mean (Σλ_k w_k with λ = fl(1/K) is not).
    rng = np.random.default_rng(0)
    g = [rng.normal(size=4096).astype(np.float32)]
    locals_ = [[rng.normal(size=4096).astype(np.float32)] for _ in range(50)]
    sums, _ = weighted_sums_and_squared_distances(g, locals_, np.full(50, 10.0))
    new = apply_weighted_sums(g, sums, 500.0, 0.0)
    exact = (np.sum([m[0].astype(np.float64) for m in locals_], axis=0) / 50).astype(np.float32)
    np.testing.assert_array_equal(new[0], exact)


@pytest.mark.parametrize("weighting", ["uniform", "p"])
@pytest.mark.parametrize("q", [0.0, 0.1, 2.0])
def test_strategy_one_pass_equals_two_pass(weighting, q, monkeypatch):
    rng = np.random.default_rng(3)
    g = [rng.normal(size=(300, 7)).astype(np.float32), rng.normal(size=7).astype(np.float32)]
    locals_ = [[a + rng.normal(size=a.shape).astype(np.float32) * 0.1 for a in g] for _ in range(6)]
    losses = rng.uniform(0.2, 3.0, size=6)
    counts = rng.integers(5, 50, size=6)
    with monkeypatch.context() as patched:  # the one-pass path never calls it
        patched.setattr(
            base, "reweighted_average_and_squared_norms", Mock(side_effect=AssertionError)
        )
        one, one_metrics = _aggregate(
            QFFL(client_learning_rate=0.1, q=q, weighting=weighting), g, locals_, losses, counts
        )
    two_pass = QFFL(client_learning_rate=0.1, q=q, weighting=weighting)
    two_pass.apply_lambdas = lambda ga, r, w: ReweightedStrategy.apply_lambdas(two_pass, ga, r, w)
    two, two_metrics = _aggregate(two_pass, g, locals_, losses, counts)
    assert dict(one_metrics) == dict(two_metrics)
    for key in one:
        # Float64 sums that differ in the last bits round to float32 alike, or 1 ulp apart.
        np.testing.assert_array_max_ulp(one[key].numpy(), two[key].numpy(), maxulp=1)


def test_reply_dropped_after_the_pass_falls_back_to_two_passes(caplog):
    # Client 2 sends a qffl-h the server disagrees with: it is in the pass's sums, so
    # the update must be summed again without it (λ over client 1 alone).
    g = [np.zeros(2, np.float32)]
    locals_ = [[np.array([-1.0, 0.0], np.float32)], [np.array([0.0, -2.0], np.float32)]]
    strategy = QFFL(client_learning_rate=0.5, q=1.0)
    with caplog.at_level(logging.INFO, logger="fairfl"):
        arrays, metrics = _aggregate(
            strategy, g, locals_, [1.0, 3.0], [10, 10], extra={2: {keys.QFFL_H: 99.0}}
        )
    assert "dropped reply from node 2" in caplog.text
    # Alone: h_1 = 6, λ_1 = L F_1 / h_1 = 2/6 -> w^{t+1} = (1/3) w̄_1 = [-1/3, 0]
    np.testing.assert_allclose(arrays["0"].numpy(), [-1 / 3, 0.0], rtol=1e-6)
    assert metrics["lambda-sum"] == pytest.approx(1 / 3)
    assert strategy._weighted_sums is None and strategy._divisor is None


def _aggregate(strategy, global_arrays, locals_, losses, counts, extra=None):
    nodes = range(1, len(locals_) + 1)
    grid = Mock(spec=Grid)
    grid.get_node_ids.return_value = list(nodes)
    with server_task_identity(1):
        list(strategy.configure_train(1, arrays_of(global_arrays), ConfigRecord({}), grid))
    replies = []
    for node, arrays, loss, n in zip(nodes, locals_, losses, counts, strict=True):
        metrics = {keys.NUM_EXAMPLES: int(n), keys.LOSS_BEFORE_TRAINING: float(loss)}
        metrics.update((extra or {}).get(node, {}))
        replies.append(make_reply(node, arrays, metrics))
    return strategy.aggregate_train(1, replies)
