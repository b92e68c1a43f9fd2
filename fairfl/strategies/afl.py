"""AFL: Agnostic Federated Learning, as Mohri et al. run it, or as the PropFair code does.

Mohri, Sivek and Suresh, *Agnostic Federated Learning*, ICML 2019,
https://arxiv.org/abs/1902.00146. Objective (paper 000, Table 1):
``min_θ max_{λ∈Δ_n} Σ_i λ_i f_i(θ)``, solved by projected descent in θ and projected
ascent in λ. Every round the clients report ``f_i(θ^t)`` and train locally, and the
server takes one ascent step on λ:

    λ^{t} = Π_Δ( λ^{t-1} + γ_λ · [f_1(θ^t), …, f_n(θ^t)] )                (projected ascent)

``Π_Δ`` is the Euclidean projection onto the probability simplex (Wang and
Carreira-Perpiñán, arXiv:1309.1541, Algorithm 1). The two variants (``variant``):

``"mohri"`` (default), Stochastic-AFL (Algorithm 1 of Mohri et al.): λ starts uniform,
``λ^0 = 1/n``, and the algorithm's output weights are the running average of the
iterates, ``λ^A = (1/t) Σ_{s=1}^{t} λ^s``; round t aggregates the local models with them:

    θ^{t+1} = Σ_i λ^A_i θ_i^{t+1}

``"propfair-code"``: the server rule of the PropFair/Semi-VRed reference code (``AFL`` in
``huawei-noah/Federated-Learning/FairFL/algs/algorithms.py``; spec-vred-qffl §6),
probably what paper 000's AFL rows ran: λ starts at the data shares, ``λ^0 = p``, and
round t aggregates with the last iterate, ``θ^{t+1} = Σ_i λ^t_i θ_i^{t+1}``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fairfl.contract import TrainReply, client_key_order, sorted_client_keys
from fairfl.strategies._checks import check_real
from fairfl.strategies.aggregation import sample_weights
from fairfl.strategies.base import ReweightedStrategy, TrainRoundRecord
from fairfl.strategies.params import RuleParameters, choice, real

logger = logging.getLogger(__name__)

Variant = Literal["mohri", "propfair-code"]
VARIANTS: tuple[str, ...] = ("mohri", "propfair-code")


@dataclass(frozen=True)
class AFLParameters(RuleParameters):
    """AFL's hyperparameters: the λ step size and the variant (see :class:`AFL`)."""

    lambda_lr: float = real(0.1, key="afl-lambda-lr", lower=0.0)
    variant: Variant = choice("mohri", VARIANTS, key="afl-variant")


class AFL(ReweightedStrategy):
    """Agnostic FL: a projected-ascent weight λ per client, kept across rounds.

    Each client reports f_i(θ^t), measured before local training, under ``train_loss_key``
    (default ``loss-before-training``). The server raises each participant's λ_i by
    ``lambda_lr · f_i``, projects λ onto the simplex, and averages the local models with
    the running average of the λ iterates (``"mohri"``) or the new λ
    (``"propfair-code"``).

    Parameters
    ----------
    lambda_lr : float (default: 0.1)
        γ_λ, the step size of the λ ascent (paper 000, App. B.2; ``step_size_lambda``
        in the PropFair code). 0 keeps λ at its start value: the plain mean of the
        local models (``"mohri"``) or FedAvg (``"propfair-code"``).
    variant : {"mohri", "propfair-code"} (default: "mohri")
        ``"mohri"``: Stochastic-AFL, Algorithm 1 of Mohri et al.: ``λ^0`` uniform, the
        round's weights are the running average ``λ^A`` of the iterates (the
        algorithm's output weights). ``"propfair-code"``: the PropFair reference code's
        rule, ``λ^0 = p`` (data shares) and the last iterate as the weights.
    **kwargs
        Sampling settings of :class:`fairfl.strategies.base.FairStrategy`.

    Raises
    ------
    ValueError
        If ``lambda_lr`` is not a finite number >= 0 or ``variant`` is unknown.

    Notes
    -----
    ``"mohri"``. Algorithm 1 steps θ and λ from the same ``(θ^{t-1}, λ^{t-1})`` and
    returns the averages ``θ^A`` and ``λ^A`` of the iterates; it runs one gradient step
    per round. Here clients train locally, and round t's global model is the
    ``λ^A``-weighted average of their models, λ^A taken after the round's λ step
    (:func:`running_average`): the departure is that θ itself is not averaged over
    rounds (each round's model is the one evaluated and sent).

    ``"propfair-code"``. Choices where paper 000 is silent follow that code (spec
    §15.14): λ^0 = p, the λ update comes *before* the aggregation of the same round, the
    output model is the last iterate, and the projection is the sort-based one.

    λ (and λ^A) is server state keyed by the stable client key (the partition id,
    :mod:`fairfl.contract.clients`), not the node id. It is kept for every client ever
    seen, so a client that leaves and returns keeps its λ, also under a new node id;
    :meth:`state_dict` and :meth:`load_state_dict` carry it through a checkpoint.

    Partial participation (not in either paper's runs, which use full participation):
    only the participants' entries are raised by ``γ_λ f_i``, then the *whole* vector
    over all known clients is projected (spec §6, [REC]); the round's aggregation
    weights are the participants' entries renormalised to sum 1. Should every
    participant's weight be 0, the round falls back to FedAvg weights and logs a
    WARNING.

    A client seen for the first time enters λ (and λ^A) at its start value over the
    grown set: ``1/N`` (``"mohri"``) or ``n_k / N`` with N the summed training-set
    sizes of all known clients (``"propfair-code"``), the existing entries scaled by
    ``N_before / N`` (:func:`admit_clients`). λ stays on the simplex and equals its
    start value over all known clients while ``lambda_lr = 0``, under any participation
    pattern; under full participation this is exactly λ^0.
    """

    needs_loss = True
    rule_name = "AFL"
    registry_name = "afl"
    Parameters = AFLParameters
    params: AFLParameters

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.variant: Variant = self.params.variant
        self.lambda_lr = self.params.lambda_lr
        #: λ^t by client key, for every client seen so far (sums to 1).
        self.client_lambdas: dict[str, float] = {}
        #: λ^A, the running average of the λ iterates, by client key (``"mohri"``).
        self.client_average: dict[str, float] = {}
        #: λ steps taken (t of λ^A = (1/t) Σ λ^s).
        self.steps = 0
        #: n_i by client key, as reported on each client's first appearance.
        self.client_counts: dict[str, int] = {}
        self._warned_zero_mass = False

    def settings(self) -> dict[str, Any]:
        """γ_λ, the variant, the λ initialisation and the weights used."""
        mohri = self.variant == "mohri"
        return {
            "lambda_lr": self.lambda_lr,
            "variant": self.variant,
            "lambda_init": "uniform" if mohri else "p (data shares)",
            "weights": "running average of lambda" if mohri else "last lambda iterate",
        }

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """JSON-able server state: λ, λ^A, the step count and first-seen n by client key."""
        ordered = sorted_client_keys(self.client_lambdas)
        return {
            "lambdas": {key: self.client_lambdas[key] for key in ordered},
            "average": {key: self.client_average[key] for key in ordered}
            if self.client_average
            else {},
            "steps": self.steps,
            "counts": {key: self.client_counts[key] for key in ordered},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the state written by :meth:`state_dict`.

        An empty mapping (the base class's stateless ``{}``) resets λ to "no client
        seen yet".

        Raises
        ------
        ValueError
            If ``state`` lacks ``lambdas`` or ``counts`` (or, for ``"mohri"``,
            ``average``), their client keys differ, a key is not a client key, a λ is
            negative or not finite, a count is not an int > 0 or ``steps`` not an
            int >= 0. The current state is left unchanged then.
        """
        if not state:
            self.client_lambdas, self.client_counts = {}, {}
            self.client_average, self.steps = {}, 0
            return
        for name in ("lambdas", "counts"):
            if not isinstance(state.get(name), Mapping):
                raise ValueError(f"state[{name!r}] must be a mapping of client key to value")
        lambdas_in, counts_in = state["lambdas"], state["counts"]
        average_in = state.get("average", {})
        steps = state.get("steps", 0)
        if not isinstance(average_in, Mapping):
            raise ValueError("state['average'] must be a mapping of client key to value")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"state['steps'] must be an int >= 0, got {steps!r}")
        if self.variant == "mohri" and lambdas_in and not average_in:
            raise ValueError(
                "state['average'] must hold the running average of lambda for variant "
                "'mohri' (a state saved by variant 'propfair-code' has none)"
            )
        if set(lambdas_in) != set(counts_in) or (average_in and set(average_in) != set(counts_in)):
            raise ValueError(
                "state['lambdas'], state['counts'] (and state['average']) must have the same "
                "client keys"
            )
        counts: dict[str, int] = {}
        for key, count in counts_in.items():
            client_key_order(key)  # raises ValueError naming a key that is not one
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ValueError(f"state['counts'][{key!r}] must be an int >= 1, got {count!r}")
            counts[key] = count
        lambdas = _weights_from_state("lambdas", lambdas_in)
        average = _weights_from_state("average", average_in)
        self.client_lambdas, self.client_counts = lambdas, counts
        self.client_average, self.steps = average, steps

    # ------------------------------------------------------------------ weights
    def lambdas(self, server_round: int, replies: list[TrainReply]) -> NDArray[np.float64]:
        """Take the λ step with this round's losses; return the participants' share.

        The share is of λ^A (``"mohri"``) or of the new λ (``"propfair-code"``).
        """
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
        self.steps += 1
        used = self.client_lambdas
        if self.variant == "mohri":
            before = np.array([self.client_average[client] for client in known], np.float64)
            average = running_average(before, updated, self.steps)
            self.client_average = {
                client: float(value) for client, value in zip(known, average, strict=True)
            }
            used = self.client_average
        logger.debug("aggregate_train: round %d AFL lambdas %s", server_round, used)

        mine = np.array([used[client] for client in clients], dtype=np.float64)
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
        # λ^0 = 1/n (Mohri et al.) counts every client once; λ^0 = p counts its n_k.
        sizes = (
            [1] * len(known) if self.variant == "mohri" else [self.client_counts[n] for n in known]
        )
        size = 1 if self.variant == "mohri" else num_examples
        lambdas = admit_clients([self.client_lambdas[n] for n in known], sizes, [size])
        self.client_lambdas = {
            key: float(value) for key, value in zip([*known, client], lambdas, strict=True)
        }
        if self.variant == "mohri":
            average = admit_clients([self.client_average[n] for n in known], sizes, [size])
            self.client_average = {
                key: float(value) for key, value in zip([*known, client], average, strict=True)
            }
        self.client_counts[client] = int(num_examples)


def _weights_from_state(name: str, values: Mapping[str, Any]) -> dict[str, float]:
    """Check a state's λ mapping (numbers >= 0, finite); the error names ``name`` and key."""
    checked: dict[str, float] = {}
    for key, value in values.items():
        client_key_order(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"state[{name!r}][{key!r}] must be a number, got {value!r}")
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"state[{name!r}][{key!r}] must be finite and >= 0, got {value}")
        checked[key] = float(value)
    return checked


def running_average(average: ArrayLike, latest: ArrayLike, steps: int) -> NDArray[np.float64]:
    """``λ^A_t = λ^A_{t-1} + (λ^t − λ^A_{t-1}) / t = (1/t) Σ_{s=1}^{t} λ^s``.

    The output weights of Mohri et al.'s Stochastic-AFL (Algorithm 1, ``λ^A``) after
    ``steps = t`` steps, updated in place of a sum; at t = 1 it is λ^1 whatever
    ``average`` holds.

    Raises
    ------
    ValueError
        If the shapes differ or ``steps`` is not an int >= 1.
    """
    before = np.asarray(average, dtype=np.float64)
    new = np.asarray(latest, dtype=np.float64)
    if before.shape != new.shape:
        raise ValueError(f"average and latest must have one shape, got {before.shape}, {new.shape}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")
    return before + (new - before) / steps


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
