"""Equitable-FL: cluster clients by activation vectors, give every cluster equal weight.

A. Upadhyay, A. Hashemi, "Equitable Federated Learning with Activation Clustering",
arXiv:2410.19207 (v2, 2025), cited as [Equitable FL]; spec:
``docs/specs/spec-activation-clustering.md``.

Every round each participant i reports a_i^t, the mean penultimate-layer activation of
the *received* global model over its local data (:mod:`fairfl.client.activation`). The
server builds a similarity matrix of those vectors (Algorithm 1, line 13; the paper's
formula is lost, :func:`~fairfl.strategies.equitable_clusters.affinity_matrix` implements
the spec's choices), groups the clients by spectral clustering
(:func:`~fairfl.strategies.equitable_clusters.spectral_labels`), gives every cluster the
same total weight (eq. 6, :func:`~fairfl.strategies.equitable_clusters.equitable_weights`)
and averages every state tensor of the local models with those weights (§4.1, eq. 7).
Local training is FedProx (eq. 4): the strategy sends ``proximal-mu`` in the train config.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from flwr.app import Message
from numpy.typing import NDArray

from fairfl.contract import ModelLayout, TrainReply, client_key_order, keys, sorted_client_keys
from fairfl.contract.activation import ACTIVATION_SOURCES, ActivationOptions
from fairfl.secagg.forms import SecureForm
from fairfl.strategies.core.base import ConfigValue
from fairfl.strategies.core.defences import cap_weights
from fairfl.strategies.core.params import ParameterError, RuleParameters, choice, integer, real
from fairfl.strategies.core.reweighted import ReweightedStrategy
from fairfl.strategies.equitable_clusters import (
    AFFINITIES,
    INTRA_CLUSTER,
    SCOPES,
    Affinity,
    IntraCluster,
    Scope,
    cluster_activations,
    equitable_weights,
    round_seed,
)

logger = logging.getLogger(__name__)


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


class EquitableFL(ReweightedStrategy):
    """Equitable-FL [Equitable FL]: equal aggregation weight per activation cluster.

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
        Similarity of line 13 of Algorithm 1, see
        :func:`~fairfl.strategies.equitable_clusters.affinity_matrix`.
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
        See :class:`fairfl.strategies.core.base.FairStrategy`.

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
    #: The rule under SecAgg+ (issue #48; :mod:`fairfl.strategies.secure`).
    secure_form = SecureForm.impossible(
        "it clusters the clients by their activation vectors, which the server must read one by one"
    )
    Parameters = EquitableParameters
    params: EquitableParameters

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        params = self.params
        # Checks the client options (dp_noise needs dp_clip) here, on the server,
        # before any round is sent.
        try:
            self.activation = ActivationOptions(
                source=params.activation_source,
                max_samples=params.activation_max_samples,
                min_samples=params.activation_min_samples,
                projection_dim=params.activation_projection_dim,
                projection_seed=params.seed,
                dp_clip=params.activation_dp_clip,
                dp_noise=params.activation_dp_noise,
            )
        except ParameterError as error:  # names the option: dp_noise of activation_dp_noise
            name = f"activation_{error.name}"
            raise ParameterError(name, str(error), self.Parameters.specs()[name].key) from None
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
        source = vectors
        if self.scope == "registry":
            source = {**self.registry, **vectors}
            self.state_updates.set(self, registry=source)
        clustered = sorted_client_keys(source) if self.scope == "registry" else clients
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
