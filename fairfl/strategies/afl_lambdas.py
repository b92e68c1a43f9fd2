"""AFL's per-client λ: the state kept across rounds, and the simplex math it steps with.

Mohri, Sivek and Suresh, *Agnostic Federated Learning*, ICML 2019 (Algorithm 1,
Stochastic-AFL), and the PropFair reference code's ``AFL`` (docs/specs/spec-vred-qffl.md §6); see
:mod:`fairfl.strategies.afl` for the rule. :class:`ClientLambdas` keeps λ (and its running
average λ^A) by stable client key, admits new clients at their start value and takes one
projected-ascent step per round; the functions below are the pure math.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fairfl.contract import client_key_order, counts_from_state, sorted_client_keys
from fairfl.strategies.core._checks import check_real
from fairfl.strategies.core.rounds import TrainRound

logger = logging.getLogger(__name__)

Variant = Literal["mohri", "propfair-code"]
VARIANTS: tuple[str, ...] = ("mohri", "propfair-code")


class ClientLambdas:
    """λ^t and λ^A by client key, for every client seen so far (a mixin of the AFL rule).

    The rule sets :attr:`variant`; this class keeps the state, its checkpoint form
    (:meth:`state_dict`, :meth:`load_state_dict`) and the round's step (:meth:`step`), which
    changes no state but returns the state after the step.
    """

    #: ``"mohri"`` (λ^0 uniform, weights λ^A) or ``"propfair-code"`` (λ^0 = p, last λ).
    variant: Variant

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: λ^t by client key, for every client seen so far (sums to 1).
        self.client_lambdas: dict[str, float] = {}
        #: λ^A, the running average of the λ iterates, by client key (``"mohri"``).
        self.client_average: dict[str, float] = {}
        #: λ steps taken (t of λ^A = (1/t) Σ λ^s).
        self.steps = 0
        #: n_i by client key, as reported on each client's first appearance.
        self.client_counts: dict[str, int] = {}
        self._warned_zero_mass = False

    def lambda_settings(self) -> dict[str, str]:
        """How λ starts and which λ weighs the round, for ``summary()``."""
        mohri = self.variant == "mohri"
        return {
            "lambda_init": "uniform" if mohri else "p (data shares)",
            "weights": "running average of lambda" if mohri else "last lambda iterate",
        }

    def participant_share(
        self, round: TrainRound, lambdas: Sequence[float]
    ) -> tuple[NDArray[np.float64], float]:
        """The participants' λ renormalised to sum 1, and their mass before that.

        Should every participant's λ be 0 after the projection, the round falls back to
        FedAvg weights (``round.shares``), with a WARNING logged once.
        """
        mine = np.array(lambdas, dtype=np.float64)
        mass = float(mine.sum())
        if mass <= 0 and not self._warned_zero_mass:
            self._warned_zero_mass = True
            logger.warning(
                "aggregate_train: round %d: every participant's AFL lambda is 0 after "
                "the projection; using FedAvg weights for such rounds",
                round.server_round,
            )
        return (mine / mass if mass > 0 else round.shares), mass

    def step(
        self, clients: Sequence[str], counts: Iterable[int], losses: ArrayLike, lambda_lr: float
    ) -> tuple[dict[str, float], int, dict[str, Any]]:
        """Admit new clients, take the λ step with the round's losses (eq. of the module).

        Changes no state. Returns the weights to use by client key (λ^A for ``"mohri"``,
        else the new λ), how many clients are known, and the state after the step by
        attribute name (the rule sets it once its round is accepted).
        """
        lambdas, average = dict(self.client_lambdas), dict(self.client_average)
        known_counts = dict(self.client_counts)
        for client, count in zip(clients, counts, strict=True):
            if client not in known_counts:
                self._admit(lambdas, average, known_counts, client, int(count))
        known = sorted_client_keys(lambdas)
        position = {client: index for index, client in enumerate(known)}
        current = np.array([lambdas[client] for client in known], dtype=np.float64)
        full = np.zeros(len(known), dtype=np.float64)
        for client, loss in zip(clients, np.asarray(losses, dtype=np.float64), strict=True):
            full[position[client]] = loss
        updated = afl_lambda_update(current, full, lambda_lr)
        lambdas = {client: float(value) for client, value in zip(known, updated, strict=True)}
        steps = self.steps + 1
        if self.variant == "mohri":
            before = np.array([average[client] for client in known], np.float64)
            averaged = running_average(before, updated, steps)
            average = {client: float(value) for client, value in zip(known, averaged, strict=True)}
        state = {
            "client_lambdas": lambdas,
            "client_average": average,
            "client_counts": known_counts,
            "steps": steps,
        }
        return (average if self.variant == "mohri" else lambdas), len(known), state

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
        counts = counts_from_state(counts_in)
        lambdas = _weights_from_state("lambdas", lambdas_in)
        average = _weights_from_state("average", average_in)
        self.client_lambdas, self.client_counts = lambdas, counts
        self.client_average, self.steps = average, steps

    def _admit(
        self,
        lambdas: dict[str, float],
        average: dict[str, float],
        counts: dict[str, int],
        client: str,
        num_examples: int,
    ) -> None:
        """Add ``client`` to these λ, λ^A and n_k at its start value (``admit_clients``)."""
        known = sorted_client_keys(lambdas)
        # λ^0 = 1/n (Mohri et al.) counts every client once; λ^0 = p counts its n_k.
        sizes = [1] * len(known) if self.variant == "mohri" else [counts[n] for n in known]
        size = 1 if self.variant == "mohri" else num_examples
        admitted = admit_clients([lambdas[n] for n in known], sizes, [size])
        lambdas.update(zip([*known, client], admitted.tolist(), strict=True))
        if self.variant == "mohri":
            averaged = admit_clients([average[n] for n in known], sizes, [size])
            average.update(zip([*known, client], averaged.tolist(), strict=True))
        counts[client] = num_examples


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
    return np.asarray(projected / projected.sum(), dtype=np.float64)


def afl_lambda_update(
    lambdas: ArrayLike, losses: ArrayLike, lambda_lr: float
) -> NDArray[np.float64]:
    """One projected-ascent step ``Π_Δ(λ + γ_λ f)`` on the client weights.

    docs/specs/spec-vred-qffl.md §6 step 2 (``AFL.aggregate`` of the PropFair reference code).

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
