"""one_thread limits the BLAS and OpenMP pools for a call, and restores them after it."""

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from fairfl.strategies._ops.blas import one_thread
from fairfl.strategies._ops.gram import gram_matrix
from fairfl.strategies.equitable_clusters import spectral_labels

pytestmark = pytest.mark.flower_free  # no Flower API: not run again under the oldest flwr


def _threads(user_api):
    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == user_api]


def test_one_thread_limits_then_restores():
    import sklearn.cluster  # noqa: F401 (its OpenMP runtime)

    before = {api: _threads(api) for api in ("blas", "openmp")}
    with one_thread():
        assert set(_threads("blas")) <= {1}
        assert set(_threads("openmp")) <= {1}
    assert {api: _threads(api) for api in ("blas", "openmp")} == before


def test_single_threaded_kernels_give_the_same_results():
    # The Gram and the clustering are what one_thread wraps: same answers as plain numpy.
    rng = np.random.default_rng(0)
    g = [rng.normal(size=3000)]
    locals_ = [[g[0] + rng.normal(size=3000)] for _ in range(12)]
    diffs = np.stack([loc[0] - g[0] for loc in locals_])
    np.testing.assert_allclose(gram_matrix(g, locals_), diffs @ diffs.T, rtol=1e-12)
    affinity = np.kron(np.eye(2), np.ones((4, 4))) + 0.01
    assert spectral_labels(affinity, 2).tolist() == [0] * 4 + [1] * 4
