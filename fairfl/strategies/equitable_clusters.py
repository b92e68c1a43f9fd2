"""Equitable FL's math: the affinity of activation vectors, spectral clustering, weights.

A. Upadhyay, A. Hashemi, "Equitable Federated Learning with Activation Clustering",
arXiv:2410.19207 (spec-activation-clustering). Pure functions of Algorithm 1 (line 13,
the affinity; the spectral clustering) and eq. 6 (equal weight per cluster), used by
:class:`~fairfl.strategies.equitable.EquitableFL`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, Literal, get_args

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fairfl.strategies._ops.blas import one_thread
from fairfl.strategies.core._checks import check_positive_int

Affinity = Literal["rbf_median", "cosine", "cosine_centered"]
Scope = Literal["round", "registry"]
IntraCluster = Literal["uniform", "samples"]

AFFINITIES: tuple[str, ...] = get_args(Affinity)
SCOPES: tuple[str, ...] = get_args(Scope)
INTRA_CLUSTER: tuple[str, ...] = get_args(IntraCluster)

#: Vectors closer than this (relative to their scale) count as identical.
IDENTICAL_RTOL = 1e-12


def affinity_matrix(vectors: ArrayLike, affinity: str = "rbf_median") -> NDArray[np.float64]:
    """Similarity of activation vectors, Algorithm 1 line 13 of [Equitable FL] (spec §1.4).

    The paper's formula is lost; the choices are the spec's:

    - ``"rbf_median"``: ``M_ij = exp(-D_ij² / (2 s²))`` with ``D_ij = ||a_i - a_j||`` and
      s the median of the distances ``D_ij, i < j`` (von Luxburg's Gaussian similarity
      with a scale-free bandwidth);
    - ``"cosine"``: the raw cosine ``<a_i, a_j> / (||a_i|| ||a_j||)`` clipped at 0 (a zero
      vector has similarity 0 to the others);
    - ``"cosine_centered"``: subtract the mean vector of the rows first, then map the
      cosine to ``(cos + 1) / 2``.

    Parameters
    ----------
    vectors : ArrayLike
        One activation vector per row, shape ``(m, d)``, finite.
    affinity : str
        One of `AFFINITIES`.

    Returns
    -------
    NDArray[np.float64]
        Symmetric ``(m, m)`` matrix with entries in [0, 1] and ones on the diagonal.

    Raises
    ------
    ValueError
        If ``vectors`` is not a finite 2-d array with at least one row, or ``affinity``
        is unknown.

    Notes
    -----
    Spec §1.4 says to treat a zero median as "all vectors equal". A zero median also
    happens when more than half of the pairs coincide but not all; the bandwidth is
    then the median of the non-zero distances, so the distinct vectors stay apart.
    All-equal vectors give the all-ones matrix; :func:`cluster_activations` catches
    that case before calling this function.
    """
    a = _check_vectors(vectors)
    _check_choice("affinity", affinity, AFFINITIES)
    m = a.shape[0]
    if affinity == "rbf_median":
        distances = pairwise_distances(a)
        upper = distances[np.triu_indices(m, k=1)]
        positive = upper[upper > 0]
        if positive.size == 0:
            return np.ones((m, m))
        scale = float(np.median(upper))
        if scale <= 0:
            scale = float(np.median(positive))
        matrix = np.exp(-(distances**2) / (2.0 * scale**2))
    else:
        if affinity == "cosine_centered":
            a = a - a.mean(axis=0)
        norms = np.linalg.norm(a, axis=1)
        safe = np.where(norms > 0, norms, 1.0)
        unit = a / safe[:, None]
        cosine = np.clip(unit @ unit.T, -1.0, 1.0)
        cosine[norms == 0, :] = 0.0
        cosine[:, norms == 0] = 0.0
        matrix = np.clip(cosine, 0.0, 1.0) if affinity == "cosine" else (cosine + 1.0) / 2.0
    matrix = (matrix + matrix.T) / 2.0
    np.fill_diagonal(matrix, 1.0)
    return matrix


def pairwise_distances(vectors: NDArray[np.float64]) -> NDArray[np.float64]:
    """Euclidean distances ``||a_i - a_j||`` of the rows, exactly 0 on the diagonal."""
    diff = vectors[:, None, :] - vectors[None, :, :]
    distances: NDArray[np.float64] = np.sqrt(np.einsum("ijk,ijk->ij", diff, diff))
    return distances


def all_identical(vectors: ArrayLike) -> bool:
    """Whether all rows coincide, up to ``IDENTICAL_RTOL`` of their largest entry."""
    a = _check_vectors(vectors)
    scale = max(1.0, float(np.max(np.abs(a))))
    return bool(np.max(np.abs(a - a[0])) <= IDENTICAL_RTOL * scale)


def spectral_labels(
    affinity: ArrayLike, num_clusters: int, random_state: int = 0
) -> NDArray[np.int64]:
    """Spectral clustering of a precomputed affinity, K-means label assignment [P003 §4.2].

    The algorithm of ``sklearn.cluster.SpectralClustering(affinity="precomputed",
    assign_labels="kmeans", n_init=10)`` (spec §2) on scipy alone, so that a server
    install needs no scikit-learn: the k eigenvectors of the normalised graph Laplacian
    ``I - D^{-1/2} A D^{-1/2}`` with the smallest eigenvalues, divided by ``D^{1/2}``
    and sign-fixed as scikit-learn does, then K-means (k-means++ seeding, best of 10 by
    inertia) on the rows. scikit-learn finds the eigenvectors with ARPACK; a dense
    ``eigh`` is exact and fast for the few hundred clients a round has. A graph that is
    not connected needs no special case: its components separate in the embedding.
    It runs on one thread (:func:`fairfl.strategies._ops.blas.one_thread`): on a busy
    machine the BLAS threads made clustering ~7x slower.

    Parameters
    ----------
    affinity : ArrayLike
        Symmetric non-negative ``(m, m)`` matrix.
    num_clusters : int
        Number of clusters k, ``2 <= k < m``.
    random_state : int
        Seed of K-means.

    Returns
    -------
    NDArray[np.int64]
        Cluster label of each row, relabelled by first appearance (row 0 is in
        cluster 0, the next new cluster is 1, ...).

    Raises
    ------
    ValueError
        If ``num_clusters`` is not in ``[2, m)``.
    """
    matrix = np.asarray(affinity, dtype=np.float64)
    m = matrix.shape[0]
    if not 2 <= num_clusters < m:
        raise ValueError(f"num_clusters must be in [2, {m}) for {m} rows, got {num_clusters}")
    with one_thread():
        embedding = spectral_embedding(matrix, num_clusters)
        labels = kmeans_labels(embedding, num_clusters, random_state=random_state)
    return canonical_labels(labels)


def spectral_embedding(affinity: NDArray[np.float64], dimensions: int) -> NDArray[np.float64]:
    """Rows of the Laplacian eigenmap, as ``sklearn.manifold.spectral_embedding`` gives them.

    ``drop_first=False``: the first eigenvector (constant over a connected component) is
    kept, as spectral clustering does. Each eigenvector's sign is fixed so that its
    entry of largest magnitude is positive.
    """
    # Imported here: SciPy's submodules cost ~0.2 s, paid only by a run that clusters.
    from scipy.linalg import eigh
    from scipy.sparse.csgraph import laplacian as csgraph_laplacian

    laplacian, sqrt_degree = csgraph_laplacian(affinity, normed=True, return_diag=True)
    _, vectors = eigh(laplacian, subset_by_index=[0, dimensions - 1])
    embedding = vectors.T / sqrt_degree
    signs = np.sign(embedding[np.arange(dimensions), np.argmax(np.abs(embedding), axis=1)])
    oriented: NDArray[np.float64] = (embedding * signs[:, np.newaxis]).T
    return oriented


def kmeans_labels(
    points: NDArray[np.float64], num_clusters: int, *, random_state: int, restarts: int = 10
) -> NDArray[np.int64]:
    """K-means labels, the best of ``restarts`` k-means++ starts by inertia."""
    rng = np.random.default_rng(random_state)
    best: tuple[float, NDArray[np.int64]] | None = None
    for _ in range(restarts):
        with warnings.catch_warnings():
            # An empty cluster is refilled by the next restart's seeding.
            warnings.filterwarnings("ignore", message="One of the clusters is empty")
            centroids, labels = lloyd_kmeans(points, num_clusters, rng=rng, iterations=100)
        inertia = float(np.sum((points - centroids[labels]) ** 2))
        if best is None or inertia < best[0]:
            best = (inertia, labels.astype(np.int64))
    assert best is not None  # restarts >= 1
    return best[1]


def lloyd_kmeans(
    points: NDArray[np.float64], num_clusters: int, *, rng: np.random.Generator, iterations: int
) -> tuple[NDArray[np.float64], NDArray[np.int32]]:
    """``scipy.cluster.vq.kmeans2(points, k, iter=iterations, minit="++", rng=rng)``, early.

    kmeans2 always runs its ``iterations`` Lloyd steps. Once a step's labels equal the
    previous step's, its centroids (the means of the same labels; an empty cluster keeps
    its previous centroid) equal the previous centroids, so every later step repeats
    it: stopping there returns kmeans2's centroids and labels, bit for bit, and draws
    the same numbers from ``rng`` (only the k-means++ seeding draws). A 50-client round
    converges in a few steps instead of 100 (``benchmarks/bench_aggregate_loss_rules.py``).
    ``points`` must be finite (scipy's check is skipped).
    """
    from scipy.cluster.vq import kmeans2  # here: SciPy's submodules cost ~0.2 s

    centroids, labels = kmeans2(
        points, num_clusters, iter=1, minit="++", rng=rng, check_finite=False
    )
    for _ in range(iterations - 1):
        centroids, step_labels = kmeans2(
            points, centroids, iter=1, minit="matrix", check_finite=False
        )
        if np.array_equal(step_labels, labels):
            break
        labels = step_labels
    return centroids, labels


def cluster_activations(
    vectors: ArrayLike, num_clusters: int, *, affinity: str = "rbf_median", random_state: int = 0
) -> tuple[NDArray[np.int64], bool]:
    """Cluster activation vectors into at most ``num_clusters`` groups (spec §1.5, D7).

    - k <= 1, or all vectors identical: one cluster;
    - k >= m (no fewer rows than clusters): every row is its own cluster;
    - otherwise :func:`spectral_labels` on :func:`affinity_matrix`.

    Parameters
    ----------
    vectors : ArrayLike
        One finite vector per row, shape ``(m, d)``.
    num_clusters : int
        k, >= 1.
    affinity : str
        See :func:`affinity_matrix`.
    random_state : int
        See :func:`spectral_labels`.

    Returns
    -------
    tuple[NDArray[np.int64], bool]
        Labels relabelled by first appearance, and whether the vectors were all
        identical (the degenerate case).

    Raises
    ------
    ValueError
        If ``num_clusters`` < 1 or ``vectors`` is not a finite 2-d array.
    """
    check_positive_int("num_clusters", num_clusters)
    a = _check_vectors(vectors)
    m = a.shape[0]
    if all_identical(a):
        return np.zeros(m, dtype=np.int64), m > 1
    if num_clusters <= 1:
        return np.zeros(m, dtype=np.int64), False
    if num_clusters >= m:
        return np.arange(m, dtype=np.int64), False
    return spectral_labels(affinity_matrix(a, affinity), num_clusters, random_state), False


def equitable_weights(
    labels: ArrayLike, num_examples: ArrayLike | None = None
) -> NDArray[np.float64]:
    """Equal weight per cluster, eq. (6) of [Equitable FL] (spec §1.6).

    With n_c the number of clients in cluster c and C_t the number of non-empty
    clusters, ``p_i = 1 / (C_t · n_{ℓ_i})``: every cluster gets total weight 1/C_t,
    shared equally by its clients. With ``num_examples`` (spec D8, option
    ``intra_cluster="samples"``) a cluster's 1/C_t is shared in proportion to n_i.

    Parameters
    ----------
    labels : ArrayLike
        Cluster label ℓ_i of each client (any integers; only equality matters).
    num_examples : ArrayLike | None
        n_i of each client, > 0; ``None`` for the paper's uniform split.

    Returns
    -------
    NDArray[np.float64]
        p, summing to 1.

    Raises
    ------
    ValueError
        If ``labels`` is empty or not 1-d, or ``num_examples`` has another length or a
        value that is not > 0.

    Examples
    --------
    Spec §1.10: client 1 alone in one cluster, clients 5, 7, 9 in the other.

    >>> equitable_weights([0, 1, 1, 1]).round(4).tolist()
    [0.5, 0.1667, 0.1667, 0.1667]
    """
    ell = np.asarray(labels)
    if ell.ndim != 1 or ell.size == 0:
        raise ValueError(f"labels must be a non-empty 1-d array, got shape {ell.shape}")
    _, index, sizes = np.unique(ell, return_inverse=True, return_counts=True)
    num_present = sizes.size
    if num_examples is None:
        return 1.0 / (num_present * sizes[index].astype(np.float64))
    counts = np.asarray(num_examples, dtype=np.float64)
    if counts.shape != ell.shape:
        raise ValueError(
            f"num_examples must have one entry per label ({ell.size}), got shape {counts.shape}"
        )
    if not np.all(counts > 0):
        raise ValueError(f"num_examples must all be > 0, got {counts.tolist()}")
    cluster_total = np.bincount(index, weights=counts)
    return counts / (num_present * cluster_total[index])


def canonical_labels(labels: ArrayLike) -> NDArray[np.int64]:
    """Relabel clusters by order of first appearance: ``[2, 2, 0, 1] -> [0, 0, 1, 2]``."""
    seen: dict[Any, int] = {}
    return np.array([seen.setdefault(v, len(seen)) for v in np.asarray(labels).tolist()], np.int64)


def round_seed(seed: int, server_round: int) -> int:
    """Return a 32-bit ``random_state`` for one round from the run's seed (spec D15)."""
    return int(np.random.SeedSequence([seed, server_round]).generate_state(1)[0])


def _check_vectors(vectors: ArrayLike) -> NDArray[np.float64]:
    a = np.asarray(vectors, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] == 0 or a.shape[1] == 0:
        raise ValueError(f"vectors must be a non-empty 2-d array (m, d), got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError("vectors must be finite")
    return a


def _check_choice(name: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
