"""Equitable FL's K-means stops at its fixed point and still returns kmeans2's result."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.cluster.vq import kmeans2

from fairfl.strategies.equitable_clusters import kmeans_labels, lloyd_kmeans

pytestmark = pytest.mark.flower_free  # no Flower API: not run again under the oldest flwr


def reference(points, k, seed, iterations):
    """scipy's kmeans2 with every one of its iterations, and the generator after it."""
    rng = np.random.default_rng(seed)
    # Fewer distinct rows than clusters make k-means++ divide 0 by 0 (in both).
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.filterwarnings("ignore", message="One of the clusters is empty")
        centroids, labels = kmeans2(points, k, iter=iterations, minit="++", rng=rng)
    return centroids, labels, rng.random()


def early(points, k, seed, iterations):
    rng = np.random.default_rng(seed)
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.filterwarnings("ignore", message="One of the clusters is empty")
        centroids, labels = lloyd_kmeans(points, k, rng=rng, iterations=iterations)
    return centroids, labels, rng.random()


@settings(max_examples=40, deadline=None)
@given(
    st.integers(3, 60),
    st.integers(1, 6),
    st.integers(2, 5),
    st.integers(0, 2**31 - 1),
    st.sampled_from([1, 2, 5, 100]),
    st.booleans(),
)
def test_equals_kmeans2_bit_for_bit(rows, dims, k, seed, iterations, duplicated):
    rng = np.random.default_rng(seed)
    k = min(k, rows - 1)
    points = rng.normal(size=(rows, dims))
    if duplicated:
        # Repeated rows give ties and empty clusters, the cases that keep old centroids.
        points = points[rng.integers(0, max(1, rows // 3), size=rows)]
    want = reference(points, k, seed, iterations)
    got = early(points, k, seed, iterations)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert got[2] == want[2]  # the same draws from the generator


def test_stops_early_on_separated_clusters(monkeypatch):
    # Two far-apart groups: the labels are final after the first step, so the second
    # step repeats them and the loop stops: 2 calls of kmeans2, not 100.
    points = np.array([[0.0, 0.0], [0.1, 0.0], [0.0, 0.1], [10.0, 10.0], [10.1, 10.0]])
    calls = []
    import scipy.cluster.vq as vq

    real = vq.kmeans2

    def counting(*args, **kwargs):
        calls.append(kwargs["iter"])
        return real(*args, **kwargs)

    monkeypatch.setattr(vq, "kmeans2", counting)
    centroids, labels = lloyd_kmeans(points, 2, rng=np.random.default_rng(0), iterations=100)
    assert calls == [1, 1]
    assert labels[0] == labels[1] == labels[2] != labels[3] == labels[4]
    group = [0, 1, 2] if labels[0] == 0 else [3, 4]
    np.testing.assert_allclose(centroids[0], points[group].mean(axis=0))


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_kmeans_labels_best_of_restarts_unchanged(seed):
    # The old loop (kmeans2 with iter=100 per restart) on 3 blobs picks these labels.
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]])
    points = np.concatenate([c + rng.normal(scale=0.3, size=(8, 2)) for c in centres])
    want_rng = np.random.default_rng(seed)
    best = None
    for _ in range(10):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="One of the clusters is empty")
            centroids, labels = kmeans2(points, 3, iter=100, minit="++", rng=want_rng)
        inertia = float(np.sum((points - centroids[labels]) ** 2))
        if best is None or inertia < best[0]:
            best = (inertia, labels)
    got = kmeans_labels(points, 3, random_state=seed)
    np.testing.assert_array_equal(got, best[1])
    # The blobs are found: each group of 8 rows shares one label, the groups differ.
    assert {len(set(got[i : i + 8].tolist())) for i in (0, 8, 16)} == {1}
    assert len({got[0], got[8], got[16]}) == 3
