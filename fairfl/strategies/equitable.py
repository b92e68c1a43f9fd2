"""Equitable-FL: cluster clients by activation vectors, give every cluster equal weight.

A. Upadhyay, A. Hashemi, "Equitable Federated Learning with Activation Clustering",
arXiv:2410.19207 (v2, 2025), cited as [P003]; spec: ``specs/spec-activation-clustering.md``.

Every round each participant i reports a_i^t, the mean penultimate-layer activation of
the *received* global model over its local data (:mod:`fairfl.client.activation`). The
server builds a similarity matrix of those vectors (Algorithm 1, line 13; the paper's
formula is lost, :func:`affinity_matrix` implements the spec's choices), groups the
clients by spectral clustering (:func:`spectral_labels`), gives every cluster the same
total weight (eq. 6, :func:`equitable_weights`) and averages every state tensor of the
local models with those weights (§4.1, eq. 7). Local training is FedProx (eq. 4): the
strategy sends ``proximal-mu`` in the train config.
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args

import numpy as np
from flwr.app import Message
from numpy.typing import ArrayLike, NDArray

from fairfl.contract import ModelLayout, TrainReply, client_key_order, keys, sorted_client_keys
from fairfl.contract.activation import ACTIVATION_SOURCES, ActivationOptions
from fairfl.strategies._ops.blas import one_thread
from fairfl.strategies.base import ConfigValue, ReweightedStrategy, check_positive_int
from fairfl.strategies.defences import cap_weights
from fairfl.strategies.params import RuleParameters, choice, integer, real

logger = logging.getLogger(__name__)

Affinity = Literal["rbf_median", "cosine", "cosine_centered"]
Scope = Literal["round", "registry"]
IntraCluster = Literal["uniform", "samples"]

AFFINITIES: tuple[str, ...] = get_args(Affinity)
SCOPES: tuple[str, ...] = get_args(Scope)
INTRA_CLUSTER: tuple[str, ...] = get_args(IntraCluster)


@dataclass(frozen=True)
class EquitableParameters(RuleParameters):
    """Equitable FL's hyperparameters (see :class:`EquitableFL`)."""

    num_clusters: int = integer(2, key="equitable-num-clusters", lower=1)
    scope: Scope = choice("round", SCOPES, key="equitable-scope")
    affinity: Affinity = choice("rbf_median", AFFINITIES, key="equitable-affinity")
    intra_cluster: IntraCluster = choice("uniform", INTRA_CLUSTER, key="equitable-intra-cluster")
    proximal_mu: float = real(0.01, key="equitable-proximal-mu", lower=0.0)
    server_lr: float = real(1.0, key="equitable-server-lr", lower=0.0, lower_open=True)
    max_client_weight: float = real(
        1.0, key="equitable-max-client-weight", lower=0.0, lower_open=True, upper=1.0
    )
    seed: int = integer(0, key="equitable-seed", lower=0)
    activation_source: str = choice(
        "penultimate_logsoftmax", ACTIVATION_SOURCES, key="equitable-activation-source"
    )
    activation_max_samples: int = integer(2048, key="equitable-activation-max-samples", lower=1)
    activation_min_samples: int = integer(0, key="equitable-activation-min-samples", lower=0)
    activation_projection_dim: int = integer(0, key="equitable-activation-projection-dim", lower=0)
    activation_dp_clip: float = real(0.0, key="equitable-activation-dp-clip", lower=0.0)
    activation_dp_noise: float = real(0.0, key="equitable-activation-dp-noise", lower=0.0)


#: Vectors closer than this (relative to their scale) count as identical.
IDENTICAL_RTOL = 1e-12


class EquitableFL(ReweightedStrategy):
    """Equitable-FL [P003]: equal aggregation weight per activation cluster.

    Parameters
    ----------
    num_clusters : int (default: 2)
        C, the number of clusters (the paper's fixed hyperparameter, Remark 3; set it to
        the number of groups you expect). A round clusters into ``min(C, m)`` clusters,
        where m is the number of clients clustered.
    scope : {"round", "registry"} (default: "round")
        ``"round"`` (paper, §4.2): cluster the round's participants only; cluster ids do
        not carry over between rounds. ``"registry"`` (spec D5): keep the last vector of
        every client seen and cluster all of them every round; the participants are then
        weighted by eq. (6) over the clusters present among them, so a round that misses
        a group is not forced into a wrong split.
    affinity : {"rbf_median", "cosine", "cosine_centered"} (default: "rbf_median")
        Similarity of line 13 of Algorithm 1, see :func:`affinity_matrix`.
    intra_cluster : {"uniform", "samples"} (default: "uniform")
        Weights inside a cluster: equal (eq. 6) or proportional to n_i (spec D8); each
        cluster's total stays ``1 / C_t`` either way.
    proximal_mu : float (default: 0.01)
        μ of the clients' FedProx term ``μ/2 ||w - w^t||²`` (eq. 4), >= 0.
    server_lr : float (default: 1.0)
        Server step on the aggregated update, > 0: ``λ_i = server_lr · p_i``. 1 is the
        paper's ``w^{t+1} = Σ p_i w_i``.
    max_client_weight : float (default: 1.0)
        Cap each p_i at this value and give the excess to the others (spec §7: a
        singleton cluster, possibly a forged vector, otherwise gets ``1/C_t``). In
        (0, 1]; 1 never binds, which is the paper's rule.
    seed : int (default: 0)
        Seeds spectral clustering (``random_state`` from ``(seed, round)``) and the
        clients' random projection, >= 0.
    activation_source, activation_max_samples, activation_min_samples, \
activation_projection_dim, activation_dp_clip, activation_dp_noise
        How clients compute a_i, sent in the train config; see
        :class:`fairfl.contract.activation.ActivationOptions` (defaults: the paper's
        log-softmax of the penultimate layer over up to 2048 local training samples,
        no projection, no noise).
    **kwargs
        See :class:`fairfl.strategies.base.FairStrategy`.

    Raises
    ------
    ValueError
        If a hyperparameter is out of range (the message names it).

    Notes
    -----
    - The similarity formula of Algorithm 1, line 13 and eq. (6) are lost from our copy
      of the paper; both follow the spec's reconstruction (spec §1.4, §1.6).
    - Edge cases the paper leaves open (spec §1.5, D7): with fewer replies than C every
      client is its own cluster (uniform weights); identical vectors form one cluster
      (uniform weights) without calling scikit-learn, which would split them
      arbitrarily.
    - Registry mode has no separate round-0 "activation round" on all clients (spec D5):
      it clusters the clients seen so far, so until every group has been seen it
      behaves like round mode. Registry vectors of absent clients were measured with an
      older global model; while that model changes fast they compare badly with fresh
      ones (``experiments/equitable_groups.py``, digits 3 + 7 clients, 4 per round: mean
      NMI 0.68 against 1.00 in round mode). Prefer round mode unless rounds often miss a
      group.
    - The strategy never reads true group ids; they exist only for evaluation
      (:mod:`fairfl.group_metrics`).
    """

    required_train_metrics: ClassVar[tuple[str, ...]] = (keys.ACTIVATION,)
    rule_name = "Equitable-FL"
    registry_name = "equitable"
    Parameters = EquitableParameters
    params: EquitableParameters

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        params = self.params
        # Checks the client options (dp_noise needs dp_clip) here, on the server,
        # before any round is sent.
        self.activation = ActivationOptions(
            source=params.activation_source,
            max_samples=params.activation_max_samples,
            min_samples=params.activation_min_samples,
            projection_dim=params.activation_projection_dim,
            projection_seed=params.seed,
            dp_clip=params.activation_dp_clip,
            dp_noise=params.activation_dp_noise,
        )
        self.num_clusters = params.num_clusters
        self.scope = params.scope
        self.affinity = params.affinity
        self.intra_cluster = params.intra_cluster
        self.proximal_mu = params.proximal_mu
        self.server_lr = params.server_lr
        self.max_client_weight = params.max_client_weight
        self.seed = params.seed
        #: Registry mode: last activation vector of every client seen, by client key
        #: (:mod:`fairfl.contract.clients`).
        self.registry: dict[str, NDArray[np.float64]] = {}
        self._warned_degenerate = False

    def settings(self) -> dict[str, Any]:
        """Return the rule's settings (server side and what clients are told)."""
        return {
            "num_clusters": self.num_clusters,
            "scope": self.scope,
            "affinity": self.affinity,
            "intra_cluster": self.intra_cluster,
            "proximal_mu": self.proximal_mu,
            "server_lr": self.server_lr,
            "max_client_weight": self.max_client_weight,
            "seed": self.seed,
            **{f"activation_{k}": v for k, v in self.activation.settings().items()},
        }

    def state_dict(self) -> dict[str, Any]:
        """JSON-able server state: the registry's last vector of each client (registry mode)."""
        return {
            "registry": {k: self.registry[k].tolist() for k in sorted_client_keys(self.registry)}
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the state written by :meth:`state_dict` (``{}`` empties the registry).

        Raises
        ------
        ValueError
            If ``state['registry']`` is not a mapping of client keys to non-empty lists
            of finite floats of one length. The current state is left unchanged.
        """
        entries = state.get("registry", {})
        if not isinstance(entries, Mapping):
            raise ValueError("state['registry'] must be a mapping of client key to vector")
        registry: dict[str, NDArray[np.float64]] = {}
        for key, value in entries.items():
            try:
                client_key_order(key)
                vector = np.asarray(value, dtype=np.float64)
            except (TypeError, ValueError):
                raise ValueError(
                    f"state['registry'] needs client keys and float lists, got {key!r}"
                ) from None
            if vector.ndim != 1 or vector.size == 0 or not np.all(np.isfinite(vector)):
                raise ValueError(f"state['registry'][{key!r}] must be a finite non-empty vector")
            registry[key] = vector
        if len({v.size for v in registry.values()}) > 1:
            raise ValueError("state['registry'] vectors must all have the same length")
        self.registry = registry

    def train_config(self, server_round: int) -> dict[str, ConfigValue]:
        """Ask for the activation vector and set the clients' FedProx μ."""
        return {
            keys.WANT_ACTIVATION: True,
            keys.PROXIMAL_MU: self.proximal_mu,
            **self.activation.to_config(),
        }

    def read_train_replies(
        self, server_round: int, replies: Iterable[Message], layout: ModelLayout
    ) -> tuple[list[TrainReply], dict[int, str]]:
        """Validate replies, then drop those whose activation length is not the expected one.

        The expected length d is the projection dimension when clients project, else the
        registry's length (registry mode), else the most common length this round (ties:
        the length of the lowest node id among them).
        """
        accepted, dropped = super().read_train_replies(server_round, replies, layout)
        if not accepted:
            return accepted, dropped
        lengths = [len(r.metrics[keys.ACTIVATION]) for r in accepted]  # type: ignore[arg-type]
        if self.activation.projection_dim > 0:
            expected = self.activation.projection_dim
        elif self.scope == "registry" and self.registry:
            expected = len(next(iter(self.registry.values())))
        else:
            counts = Counter(lengths)
            expected = max(lengths, key=lambda n: (counts[n], -lengths.index(n)))
        kept: list[TrainReply] = []
        for reply, length in zip(accepted, lengths, strict=True):
            if length == expected:
                kept.append(reply)
                continue
            reason = f"metrics['{keys.ACTIVATION}'] has length {length}, expected {expected}"
            logger.info("aggregate_train: dropped reply from node %d: %s", reply.node_id, reason)
            dropped[reply.node_id] = reason
        return kept, dropped

    def lambdas(self, server_round: int, replies: list[TrainReply]) -> NDArray[np.float64]:
        """Cluster the clients, then ``λ_i = server_lr · p_i`` with p_i of eq. (6)."""
        nodes = [r.node_id for r in replies]
        clients = [self.client_key(r) for r in replies]
        vectors = {
            c: np.asarray(r.metrics[keys.ACTIVATION], np.float64)
            for c, r in zip(clients, replies, strict=True)
        }
        if self.scope == "registry":
            self.registry.update(vectors)
            clustered = sorted_client_keys(self.registry)
        else:
            clustered = clients
        source = self.registry if self.scope == "registry" else vectors
        matrix = np.stack([source[n] for n in clustered])
        k = min(self.num_clusters, len(clustered))
        labels, degenerate = cluster_activations(
            matrix, k, affinity=self.affinity, random_state=round_seed(self.seed, server_round)
        )
        if degenerate:
            log = logger.debug if self._warned_degenerate else logger.warning
            self._warned_degenerate = True
            log(
                "aggregate_train: round %d activation vectors are all identical; "
                "one cluster, uniform weights (logged once)",
                server_round,
            )
        label_of = dict(zip(clustered, labels.tolist(), strict=True))
        participant_labels = np.array([label_of[c] for c in clients], dtype=np.int64)
        counts = None
        if self.intra_cluster == "samples":
            counts = [r.num_examples for r in replies]
        p = equitable_weights(participant_labels, counts)
        if self.max_client_weight < 1:
            p = cap_weights(p, self.max_client_weight)
        record = self.train_records[server_round]
        sizes = np.bincount(participant_labels)
        record.diagnostics.update(
            {
                "clusters": {n: int(label_of[c]) for n, c in zip(nodes, clients, strict=True)},
                "num-clusters": int(np.count_nonzero(sizes)),
                "cluster-size-min": int(sizes[sizes > 0].min()),
                "cluster-size-max": int(sizes.max()),
                "clusters-degenerate": bool(degenerate),
            }
        )
        if self.scope == "registry":
            # By node id, as "clusters" (clients whose node this run has not heard from
            # yet, e.g. right after a resume, are left out).
            node_of = {key: node for node, key in sorted(self.node_keys.items())}
            record.diagnostics["registry-clusters"] = {
                node_of[c]: int(label_of[c]) for c in clustered if c in node_of
            }
            record.diagnostics["registry-size"] = len(clustered)
        logger.debug("aggregate_train: round %d clusters %s", server_round, label_of)
        return self.server_lr * p


# --------------------------------------------------------------------------- the math
def affinity_matrix(vectors: ArrayLike, affinity: str = "rbf_median") -> NDArray[np.float64]:
    """Similarity of activation vectors, Algorithm 1 line 13 of [P003] (spec §1.4).

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
    """Equal weight per cluster, eq. (6) of [P003] (spec §1.6).

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
