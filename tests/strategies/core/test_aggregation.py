import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairfl.strategies.core.aggregation import reweighted_average, sample_weights, weight_entropy

pytestmark = pytest.mark.flower_free  # no Flower API: not run again under the oldest flwr


def test_sample_weights_by_hand():
    np.testing.assert_allclose(sample_weights([1, 3]), [0.25, 0.75])
    with pytest.raises(ValueError, match="must all be > 0"):
        sample_weights([1, 0])
    with pytest.raises(ValueError, match="must not be empty"):
        sample_weights([])


def test_reweighted_average_by_hand():
    # w^t = [1, 1]; w_1 = [3, 1], w_2 = [1, 5]; λ = (0.25, 0.75):
    # Σλ w_i = [0.75 + 0.75, 0.25 + 3.75] = [1.5, 4.0]  (Σλ = 1: w^t has no weight)
    new = reweighted_average(
        [np.array([1.0, 1.0], np.float32)],
        [[np.array([3.0, 1.0], np.float32)], [np.array([1.0, 5.0], np.float32)]],
        [0.25, 0.75],
    )
    np.testing.assert_allclose(new[0], [1.5, 4.0])
    assert new[0].dtype == np.float32


def test_weights_not_summing_to_one_keep_global_share():
    # λ = (0.5, 0) -> w^t - 0.5 (w^t - w_1) = 0.5 w^t + 0.5 w_1 = [2, 1] for w^t=[1,1], w_1=[3,1].
    new = reweighted_average(
        [np.array([1.0, 1.0])], [[np.array([3.0, 1.0])], [np.array([9.0, 9.0])]], [0.5, 0.0]
    )
    np.testing.assert_allclose(new[0], [2.0, 1.0])


def test_negative_weights_extrapolate():
    # λ = (1.5, -0.5): 1.5·[2] - 0.5·[4] = [1]
    new = reweighted_average([np.zeros(1)], [[np.array([2.0])], [np.array([4.0])]], [1.5, -0.5])
    np.testing.assert_allclose(new[0], [1.0])


def test_integer_arrays_keep_global_value():
    new = reweighted_average([np.array([7])], [[np.array([1])], [np.array([3])]], [0.5, 0.5])
    np.testing.assert_array_equal(new[0], [7])


def test_bad_lambdas_rejected():
    with pytest.raises(ValueError, match="one weight per client"):
        reweighted_average([np.zeros(1)], [[np.zeros(1)]], [0.5, 0.5])
    with pytest.raises(ValueError, match="must be finite"):
        reweighted_average([np.zeros(1)], [[np.zeros(1)]], [np.nan])


def test_inputs_are_not_mutated():
    g = [np.array([1.0, 2.0], np.float32)]
    locals_ = [[np.array([3.0, 4.0], np.float32)], [np.array([5.0, 6.0], np.float32)]]
    copies = ([a.copy() for a in g], [[a.copy() for a in c] for c in locals_])
    reweighted_average(g, locals_, [0.3, 0.7])
    np.testing.assert_array_equal(g[0], copies[0][0])
    for got, want in zip(locals_, copies[1], strict=True):
        np.testing.assert_array_equal(got[0], want[0])


def test_weight_entropy():
    assert weight_entropy([0.5, 0.5]) == pytest.approx(np.log(2))
    assert np.isnan(weight_entropy([1.5, -0.5]))


@given(
    st.lists(st.floats(0.01, 10), min_size=1, max_size=8),
    st.integers(0, 2**31 - 1),
)
def test_permutation_invariance_and_convexity(raw_weights, seed):
    rng = np.random.default_rng(seed)
    n = len(raw_weights)
    lam = np.array(raw_weights) / np.sum(raw_weights)
    clients = [[rng.normal(size=(3, 2))] for _ in range(n)]
    base = reweighted_average([rng.normal(size=(3, 2))], clients, lam)
    order = rng.permutation(n)
    permuted = reweighted_average([np.zeros((3, 2))], [clients[i] for i in order], lam[order])
    np.testing.assert_allclose(base[0], permuted[0], atol=1e-12)
    stacked = np.stack([c[0] for c in clients])
    assert np.all(base[0] <= stacked.max(axis=0) + 1e-9)
    assert np.all(base[0] >= stacked.min(axis=0) - 1e-9)
