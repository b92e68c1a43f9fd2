"""AFL: Agnostic Federated Learning, as run by the PropFair/Semi-VRed reference code.

Mohri, Sivek and Suresh, *Agnostic Federated Learning*, ICML 2019,
https://arxiv.org/abs/1902.00146. Objective (paper 000, Table 1):
``min_θ max_{λ∈Δ_n} Σ_i λ_i f_i(θ)``. Server rule of the PropFair code (``AFL`` in
``huawei-noah/Federated-Learning/FairFL/algs/algorithms.py``; spec-vred-qffl §6):

    λ^{t+1} = Π_Δ( λ^t + γ_λ · [f_1(θ^t), …, f_n(θ^t)] ),   λ^0 = p      (projected ascent)
    θ^{t+1} = Σ_i λ_i^{t+1} θ_i^{t+1}                       (update, then aggregate)

``Π_Δ`` is the Euclidean projection onto the probability simplex (Wang and
Carreira-Perpiñán, arXiv:1309.1541, Algorithm 1).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fairfl.contract import TrainReply, client_key_order, sorted_client_keys
from fairfl.strategies._checks import check_real
from fairfl.strategies.aggregation import sample_weights
from fairfl.strategies.base import ReweightedStrategy, TrainRoundRecord

logger = logging.getLogger(__name__)


class AFL(ReweightedStrategy):
    """Agnostic FL: a projected-ascent weight λ per client, kept across rounds.

    Each client reports f_i(θ^t), measured before local training, under ``train_loss_key``
    (default ``loss-before-training``). The
    server raises each participant's λ_i by ``lambda_lr · f_i``, projects λ onto the
    simplex, and averages the local models with the new λ.

    Parameters
    ----------
    lambda_lr : float (default: 0.1)
        γ_λ, the step size of the λ ascent (paper 000, App. B.2; ``step_size_lambda``
        in the reference code). 0 keeps λ at its start value, which is FedAvg.
    **kwargs
        Sampling settings of :class:`fairfl.strategies.base.FairStrategy`.

    Raises
    ------
    ValueError
        If ``lambda_lr`` is not a finite number >= 0.

    Notes
    -----
    Choices where paper 000 is silent follow the reference code (spec §15.14):
    λ^0 = p, the λ update comes *before* the aggregation of the same round, the output
    model is the last iterate (not the running average of the original AFL code), and
    the projection is the sort-based one.

    λ is server state keyed by the stable client key (the partition id,
    :mod:`fairfl.contract.clients`), not the node id. It is kept for every client ever
    seen, so a client that leaves and returns keeps its λ, also under a new node id;
    :meth:`state_dict` and :meth:`load_state_dict` carry it through a checkpoint.

    Partial participation (not in the paper, whose runs all use full participation):
    only the participants' entries are raised by ``γ_λ f_i``, then the *whole* vector
    over all known clients is projected (spec §6, [REC]); the round's aggregation
    weights are the participants' λ renormalised to sum 1 (``p`` is normalised over the
    participants in the same way). Should every participant's λ be 0 after the
    projection, the round falls back to FedAvg weights and logs a WARNING.

    A client seen for the first time enters with ``λ_k = n_k / N`` where N sums the
    training-set sizes of all known clients, and the existing entries are scaled by
    ``N_before / N``: λ stays on the simplex and equals ``p`` over all known clients
    while ``lambda_lr = 0``, so that AFL with ``lambda_lr = 0`` is FedAvg under any
    participation pattern. Under full participation this is exactly ``λ^0 = p``.
    """

    needs_loss = True
    rule_name = "AFL"

    def __init__(self, *, lambda_lr: float = 0.1, **kwargs: Any) -> None:
        self.lambda_lr = check_real("lambda_lr", lambda_lr, lower=0.0)
        super().__init__(**kwargs)
        #: λ_i by client key, for every client seen so far (sums to 1).
        self.client_lambdas: dict[str, float] = {}
        #: n_i by client key, as reported on each client's first appearance.
        self.client_counts: dict[str, int] = {}
        self._warned_zero_mass = False

    def settings(self) -> dict[str, Any]:
        """γ_λ and the λ initialisation."""
        return {"lambda_lr": self.lambda_lr, "lambda_init": "p (data shares)"}

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """JSON-able server state: λ and first-seen n by client key."""
        ordered = sorted_client_keys(self.client_lambdas)
        return {
            "lambdas": {key: self.client_lambdas[key] for key in ordered},
            "counts": {key: self.client_counts[key] for key in ordered},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the state written by :meth:`state_dict`.

        An empty mapping (the base class's stateless ``{}``) resets λ to "no client
        seen yet".

        Raises
        ------
        ValueError
            If ``state`` lacks ``lambdas`` or ``counts``, their client keys differ, a
            key is not a client key, a λ is negative or not finite, or a count is not an
            int > 0. The current state is left unchanged then.
        """
        if not state:
            self.client_lambdas, self.client_counts = {}, {}
            return
        for name in ("lambdas", "counts"):
            if not isinstance(state.get(name), Mapping):
                raise ValueError(f"state[{name!r}] must be a mapping of client key to value")
        lambdas_in, counts_in = state["lambdas"], state["counts"]
        if set(lambdas_in) != set(counts_in):
            raise ValueError("state['lambdas'] and state['counts'] must have the same client keys")
        lambdas: dict[str, float] = {}
        counts: dict[str, int] = {}
        for key, value in lambdas_in.items():
            client_key_order(key)  # raises ValueError naming a key that is not one
            count = counts_in[key]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"state['lambdas'][{key!r}] must be a number, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"state['lambdas'][{key!r}] must be finite and >= 0, got {value}")
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ValueError(f"state['counts'][{key!r}] must be an int >= 1, got {count!r}")
            lambdas[key] = float(value)
            counts[key] = count
        self.client_lambdas = lambdas
        self.client_counts = counts

    # ------------------------------------------------------------------ weights
    def lambdas(self, server_round: int, replies: list[TrainReply]) -> NDArray[np.float64]:
        """Update λ with this round's losses, then return the participants' share of it."""
        clients = [self.client_key(reply) for reply in replies]
        for client, reply in zip(clients, replies, strict=True):
            if client not in self.client_counts:
                self._admit(client, reply.num_examples)
        known = sorted_client_keys(self.client_lambdas)
        position = {client: index for index, client in enumerate(known)}
        current = np.array([self.client_lambdas[client] for client in known], dtype=np.float64)
        losses = np.zeros(len(known), dtype=np.float64)
        for client, reply in zip(clients, replies, strict=True):
            losses[position[client]] = self.loss_of(reply)
        updated = afl_lambda_update(current, losses, self.lambda_lr)
        self.client_lambdas = {
            client: float(value) for client, value in zip(known, updated, strict=True)
        }
        logger.debug("aggregate_train: round %d AFL lambdas %s", server_round, self.client_lambdas)

        mine = np.array([self.client_lambdas[client] for client in clients], dtype=np.float64)
        mass = float(mine.sum())
        if mass > 0:
            weights = mine / mass
        else:
            if not self._warned_zero_mass:
                logger.warning(
                    "aggregate_train: round %d: every participant's AFL lambda is 0 after "
                    "the projection; using FedAvg weights for such rounds",
                    server_round,
                )
                self._warned_zero_mass = True
            weights = sample_weights([r.num_examples for r in replies])
        record = self.train_records.setdefault(server_round, TrainRoundRecord())
        record.diagnostics.update({"afl-known-clients": len(known), "afl-participant-mass": mass})
        return weights

    def _admit(self, client: str, num_examples: int) -> None:
        known = sorted_client_keys(self.client_lambdas)
        lambdas = admit_clients(
            [self.client_lambdas[n] for n in known],
            [self.client_counts[n] for n in known],
            [num_examples],
        )
        self.client_lambdas = {
            key: float(value) for key, value in zip([*known, client], lambdas, strict=True)
        }
        self.client_counts[client] = int(num_examples)


def project_to_simplex(y: ArrayLike) -> NDArray[np.float64]:
    """Euclidean projection of ``y`` onto the probability simplex ``{x >= 0, Σx = 1}``.

    Algorithm 1 of Wang and Carreira-Perpiñán, arXiv:1309.1541 (``project`` in the
    reference code's ``utils/project.py``): sort ``u = y`` descending, take
    ``ρ = max{j : u_j + (1 - Σ_{r<=j} u_r)/j > 0}``, ``τ = (1 - Σ_{r<=ρ} u_r)/ρ`` and
    return ``max(y + τ, 0)``.

    Parameters
    ----------
    y : ArrayLike
        A non-empty 1-D vector of finite numbers.

    Returns
    -------
    NDArray[np.float64]
        The closest simplex point, divided by its sum to remove rounding drift; a
        point already on the simplex is returned unchanged (up to rounding).

    Raises
    ------
    ValueError
        If ``y`` is empty, not 1-D or not finite.

    Notes
    -----
    The projection is invariant to adding a constant to every entry, so it works on
    ``y - max(y)``, floored at -2: an entry 1 or more below the largest gets 0 whatever
    its value (the largest entry of the result is at most 1), so the floor changes
    nothing but keeps every difference finite. Without the shift, ``u_1 + (1 - u_1)``
    rounds to 0 once ``u_1 >= 2^53``, no index satisfies the condition and the
    projection failed (an ``IndexError`` at ``train_loss`` 1e17, issue 21).
    """
    raw = np.asarray(y, dtype=np.float64)
    if raw.ndim != 1 or raw.size == 0:
        raise ValueError(f"y must be a non-empty 1-D vector, got shape {raw.shape}")
    if not np.all(np.isfinite(raw)):
        raise ValueError(f"y must be finite, got {raw.tolist()}")
    with np.errstate(over="ignore"):  # max - (-huge) may overflow: floored below
        values = np.maximum(raw - raw.max(), -2.0)
    u = np.sort(values)[::-1]
    cumulative = np.cumsum(u)
    j = np.arange(1, u.size + 1)
    # u_1 = 0 after the shift, so the condition holds at j = 1 (0 + 1 > 0): ρ >= 1.
    rho = int(j[u + (1.0 - cumulative) / j > 0][-1])
    tau = (1.0 - cumulative[rho - 1]) / rho
    projected = np.maximum(values + tau, 0.0)
    # The division removes rounding drift, so that λ kept across rounds stays on the
    # simplex.
    return projected / projected.sum()


def afl_lambda_update(
    lambdas: ArrayLike, losses: ArrayLike, lambda_lr: float
) -> NDArray[np.float64]:
    """One projected-ascent step ``Π_Δ(λ + γ_λ f)`` on the client weights.

    Spec-vred-qffl §6 step 2 (``AFL.aggregate`` of the PropFair reference code).

    Parameters
    ----------
    lambdas : ArrayLike
        λ^t over all known clients.
    losses : ArrayLike
        f_i(θ^t) of each client, 0 for clients that did not take part this round (so
        their entries move only through the projection).
    lambda_lr : float
        γ_λ >= 0.

    Returns
    -------
    NDArray[np.float64]
        λ^{t+1}, on the simplex, for any finite input: ``γ_λ f`` is never formed
        (it overflows for ``γ_λ f > 1.8e308``); the step is taken relative to the
        client with the largest loss, ``(λ_i - λ_M) + γ_λ (f_i - f_M) <= 1``, which
        the projection does not tell apart from ``λ + γ_λ f``.

    Raises
    ------
    ValueError
        If the shapes differ or are empty, ``lambda_lr < 0``, or an input is not finite.
    """
    current = np.asarray(lambdas, dtype=np.float64)
    f = np.asarray(losses, dtype=np.float64)
    if current.shape != f.shape or current.ndim != 1 or current.size == 0:
        raise ValueError(
            "lambdas and losses must be non-empty 1-D vectors of the same shape, got "
            f"{current.shape} and {f.shape}"
        )
    check_real("lambda_lr", lambda_lr, lower=0.0)
    if not (np.all(np.isfinite(current)) and np.all(np.isfinite(f))):
        raise ValueError(f"lambdas and losses must be finite, got {current.tolist()}, {f.tolist()}")
    # M: the largest loss (ties: the largest λ). f_i - f_M <= 0, so it and γ (f_i - f_M)
    # can only overflow towards -inf; floored at -2, such an entry gets 0 as it would
    # have (it is at least 2 below entry M, see project_to_simplex).
    top = int(np.lexsort((current, f))[-1])
    with np.errstate(over="ignore", invalid="ignore"):
        step = lambda_lr * (f - f[top]) if lambda_lr > 0 else np.zeros_like(f)
        relative = np.maximum((current - current[top]) + step, -2.0)
    return project_to_simplex(relative)


def admit_clients(
    lambdas: ArrayLike, known_counts: ArrayLike, new_counts: ArrayLike
) -> NDArray[np.float64]:
    """Extend λ by clients seen for the first time (``λ^0 = p`` over a growing set).

    With ``N_old = Σ known_counts`` and ``N = N_old + Σ new_counts``, the known entries
    become ``λ · N_old / N`` and each new client ``n_k / N``. With no known client this
    is ``p`` of the new ones (the reference code's ``λ^0 = p``).

    Returns
    -------
    NDArray[np.float64]
        The known entries, then the new ones, in input order.

    Raises
    ------
    ValueError
        If a count is not > 0 or the known λ and counts differ in length.
    """
    current = np.asarray(lambdas, dtype=np.float64).reshape(-1)
    old = np.asarray(known_counts, dtype=np.float64).reshape(-1)
    new = np.asarray(new_counts, dtype=np.float64).reshape(-1)
    if current.size != old.size:
        raise ValueError(
            f"lambdas and known_counts must have the same length, got {current.size} and {old.size}"
        )
    if not (np.all(old > 0) and np.all(new > 0)):
        raise ValueError("client counts must all be > 0")
    total_old = float(old.sum())
    total = total_old + float(new.sum())
    return np.concatenate([current * (total_old / total), new / total])
