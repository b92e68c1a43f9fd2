"""q-FFL's one-pass aggregation: steps and distances together, Σ h_k at the end.

``delta_sums_and_squared_distances`` + ``apply_summed_step`` must take the step of
``reweighted_average`` with ``λ_k = u_k / D`` within the rounding bound of a recursive
sum in the models' dtype, give the distances of ``squared_distance_parts`` exactly, and
keep no sums where a float32 sum could overflow; the strategy must fall back to the
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
from fairfl.strategies import QFFL
from fairfl.strategies._ops import passes
from fairfl.strategies._ops.passes import delta_sums_and_squared_distances
from fairfl.strategies.core import reweighted
from fairfl.strategies.core.aggregation import apply_summed_step
from fairfl.strategies.core.reweighted import ReweightedStrategy
from tests.conftest import arrays_of, make_reply
from tests.strategies.reference import squared_distance_parts


def test_one_pass_by_hand():
    # w^t = [1, 1]; w_1 = [3, 1], w_2 = [1, 5]; u = (1, 3) / 4 (scaled by 1 / max u
    # would be (1/3, 1); any u in [0, 1] works), D = 2 -> λ = (1/8, 3/8):
    #   Σ u_k (w^t - w_k) = 1/4 [-2, 0] + 3/4 [0, -4] = [-0.5, -3];  / 2 = [-0.25, -1.5]
    #   w^t - that = [1.25, 2.5];  ‖w^t - w_1‖² = 4, ‖w^t - w_2‖² = 16
    g = [np.array([1.0, 1.0], np.float32)]
    locals_ = [[np.array([3.0, 1.0], np.float32)], [np.array([1.0, 5.0], np.float32)]]
    sums, parts = delta_sums_and_squared_distances(g, locals_, [0.25, 0.75])
    np.testing.assert_array_equal(parts, [[4.0], [16.0]])
    assert sums is not None and sums[0].dtype == np.float32  # summed in the models' dtype
    new = apply_summed_step(g, sums, 2.0)
    np.testing.assert_array_equal(new[0], [1.25, 2.5])
    assert new[0].dtype == np.float32


def test_without_weights_only_distances_and_counters_keep_global():
    g = [np.zeros(2, np.float32), np.array([7], np.int64)]
    locals_ = [[np.array([1.0, 2.0], np.float32), np.array([1], np.int64)]]
    sums, parts = delta_sums_and_squared_distances(g, locals_)
    assert sums is None
    np.testing.assert_array_equal(parts, [[5.0, 0.0]])
    sums, _ = delta_sums_and_squared_distances(g, locals_, [1.0])
    assert sums is not None and sums[1] is None
    # Σ = 1 (0 - [1, 2]);  w^t - Σ / 2 = [0.5, 1.0]
    new = apply_summed_step(g, sums, 2.0)
    np.testing.assert_array_equal(new[0], [0.5, 1.0])
    np.testing.assert_array_equal(new[1], [7])


def test_bad_arguments_rejected():
    g = [np.zeros(2, np.float32)]
    one = [[np.zeros(2, np.float32)]]
    for weights in ([np.nan], [1.0, 0.5], [1.5], [-0.1]):
        with pytest.raises(ValueError, match=r"weights must be 1 values in \[0, 1\]"):
            delta_sums_and_squared_distances(g, one, weights)
    with pytest.raises(ValueError, match="same number of arrays"):
        delta_sums_and_squared_distances(g, [[]], [1.0])
    for divisor in (0.0, np.inf, np.nan):
        with pytest.raises(ValueError, match="divisor must be finite and non-zero"):
            apply_summed_step(g, [np.zeros(2, np.float32)], divisor)


def _exact_step_and_bound(global_arrays, local_arrays, lambdas, dtype):
    """The exact step (long double) and the rounding bound of the one-pass path.

    ``Σ_k u_k d_k`` with ``d_k = fl(w^t - w_k)`` summed recursively in the unit
    roundoff ε of ``dtype`` (u_k rounded to it once, an axpy rounding at most twice),
    divided once and subtracted from w^t once: the textbook bound
    ``γ_{K+4} Σ_k λ_k |w^t - w_k|`` plus ε |w^{t+1}| (Higham, Accuracy and Stability of
    Numerical Algorithms, 2nd ed., §4.2, γ_n = nε / (1 - nε)).
    """
    eps = float(np.finfo(dtype).eps) / 2
    n = len(local_arrays) + 4
    gamma = n * eps / (1 - n * eps)
    exact, bounds = [], []
    for index, g in enumerate(global_arrays):
        g_long = np.asarray(g, dtype=np.longdouble)
        step = np.zeros_like(g_long)
        reach = np.zeros_like(g_long)
        for lam, model in zip(lambdas, local_arrays, strict=True):
            d = g_long - np.asarray(model[index], dtype=np.longdouble)
            step += np.longdouble(lam) * d
            reach += np.longdouble(lam) * np.abs(d)
        new = g_long - step
        exact.append(new)
        bounds.append((gamma * reach + 2 * eps * np.abs(new)).astype(np.float64))
    return exact, bounds


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 50),
    st.integers(0, 2**31 - 1),
    st.booleans(),
    st.sampled_from([np.float32, np.float64]),
    st.sampled_from([1e-6, 1e-2, 1.0, 10.0]),
)
def test_one_pass_step_within_the_summation_bound(num_clients, seed, sums_to_one, dtype, spread):
    # Local models from near-duplicates of w^t (spread 1e-6) to unrelated ones (10);
    # q = 0 makes Σλ = 1 (FedAvg), q > 0 shrinks the step (Σλ < 1). Blocks and rows
    # are crossed at their edges.
    rng = np.random.default_rng(seed)
    block = passes.DISTANCE_BLOCK
    shapes = [(block + 7,), (3, 5), (2, passes.DOT_ROW + 1), ()]
    global_arrays = [rng.normal(size=s).astype(dtype) for s in shapes]
    local_arrays = [
        [(g + spread * rng.normal(size=g.shape)).astype(dtype) for g in global_arrays]
        for _ in range(num_clients)
    ]
    numerators = rng.uniform(0.1, 2.0, size=num_clients)
    divisor = numerators.sum() if sums_to_one else numerators.sum() * rng.uniform(1.0, 3.0)
    top = numerators.max()
    sums, parts = delta_sums_and_squared_distances(global_arrays, local_arrays, numerators / top)
    np.testing.assert_array_equal(parts, squared_distance_parts(global_arrays, local_arrays))
    assert sums is not None
    new = apply_summed_step(global_arrays, sums, divisor / top)
    exact, bounds = _exact_step_and_bound(global_arrays, local_arrays, numerators / divisor, dtype)
    for got, want, bound, g in zip(new, exact, bounds, global_arrays, strict=True):
        assert got.shape == g.shape and got.dtype == dtype
        error = np.abs(got.astype(np.longdouble) - want).astype(np.float64)
        assert np.all(error <= bound), float(np.max(error - bound))


def test_no_sums_after_a_float32_overflow_or_a_bad_value():
    # (3e30)² overflows float32: the distance is redone in float64, and the pass keeps
    # no sums, so the strategy sums again in float64. So does a NaN in a reply.
    g = [np.zeros(2, np.float32)]
    big = [[np.array([3e30, 0.0], np.float32)], [np.array([1.0, 0.0], np.float32)]]
    sums, parts = delta_sums_and_squared_distances(g, big, [1.0, 1.0])
    assert sums is None
    np.testing.assert_allclose(parts, [[9e60], [1.0]], rtol=1e-6)
    bad = [[np.array([np.nan, 0.0], np.float32)], [np.array([1.0, 0.0], np.float32)]]
    sums, parts = delta_sums_and_squared_distances(g, bad, [1.0, 1.0])
    assert sums is None and np.isnan(parts[0, 0]) and parts[1, 0] == 1.0
    # 1e19: its square, 1e38, still fits float32: sums kept, and exact here.
    fits = [[np.array([1e19, 0.0], np.float32)], [np.array([-1e19, 0.0], np.float32)]]
    sums, _ = delta_sums_and_squared_distances(g, fits, [1.0, 0.5])
    assert sums is not None
    np.testing.assert_allclose(sums[0], [-0.5e19, 0.0], rtol=1e-7)


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
            reweighted, "reweighted_average_and_squared_norms", Mock(side_effect=AssertionError)
        )
        one, one_metrics = _aggregate(
            QFFL(client_learning_rate=0.1, q=q, weighting=weighting), g, locals_, losses, counts
        )
    two_pass = QFFL(client_learning_rate=0.1, q=q, weighting=weighting)
    two_pass._summed_step = lambda _found, _divisor, ga, r, w: ReweightedStrategy.apply_lambdas(
        two_pass, ga, r, w
    )
    two, two_metrics = _aggregate(two_pass, g, locals_, losses, counts)
    assert dict(one_metrics) == dict(two_metrics)
    lambdas = [two_pass.train_records[1].weights[node] for node in range(1, 7)]
    exact, bounds = _exact_step_and_bound(g, locals_, lambdas, np.float32)
    for index, key in enumerate(one):
        # Both within rounding of the exact step: the two-pass sum in float64 (then one
        # float32 rounding), the one-pass sum in float32 (the bound).
        for got, bound in ((one[key].numpy(), bounds[index]), (two[key].numpy(), 0.0)):
            error = np.abs(got.astype(np.longdouble) - exact[index]).astype(np.float64)
            assert np.all(error <= bound + np.spacing(np.abs(got)))


def test_a_reply_dropped_by_the_pass_is_summed_again_without_it(caplog, monkeypatch):
    # Client 2 sends a qffl-h the server disagrees with: it is in the pass's sums, so
    # the round is summed again without it (λ over client 1 alone), in one more fused
    # pass: the model is the round without client 2's, bit for bit.
    g = [np.zeros(2, np.float32)]
    locals_ = [[np.array([-1.0, 0.0], np.float32)], [np.array([0.0, -2.0], np.float32)]]
    strategy = QFFL(client_learning_rate=0.5, q=1.0)
    with caplog.at_level(logging.INFO, logger="fairfl"), monkeypatch.context() as patched:
        patched.setattr(  # the second pass is fused too
            reweighted, "reweighted_average_and_squared_norms", Mock(side_effect=AssertionError)
        )
        arrays, metrics = _aggregate(
            strategy, g, locals_, [1.0, 3.0], [10, 10], extra={2: {keys.QFFL_H: 99.0}}
        )
    assert "dropped reply from node 2" in caplog.text
    # Alone: h_1 = 6, λ_1 = L F_1 / h_1 = 2/6 -> w^{t+1} = (1/3) w̄_1 = [-1/3, 0]
    np.testing.assert_allclose(arrays["0"].numpy(), [-1 / 3, 0.0], rtol=1e-6)
    assert metrics["lambda-sum"] == pytest.approx(1 / 3)
    one_node = QFFL(client_learning_rate=0.5, q=1.0, min_available_nodes=1, min_train_nodes=1)
    alone, _ = _aggregate(one_node, g, locals_[:1], [1.0], [10])
    np.testing.assert_array_equal(arrays["0"].numpy(), alone["0"].numpy())


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
