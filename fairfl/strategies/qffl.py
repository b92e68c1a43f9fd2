"""q-FFL trained with q-FedAvg.

Li, Sanjabi, Beirami & Smith, "Fair Resource Allocation in Federated Learning", ICLR
2020, https://openreview.net/pdf?id=ByexElSYDr (paper 002 in ``papers/``; spec
``specs/spec-vred-qffl.md`` §5). q-FFL minimises ``Σ_k p_k F_k^{q+1}(w) / (q+1)`` (eq. 2):
q = 0 is FedAvg's objective, larger q weighs high-loss devices more.

Implements Algorithm 2 (q-FedAvg). With w^t the broadcast model, w̄_k the model of
device k after local SGD with step η, ``L = 1/η`` and ε = 1e-10 (reference code)::

    Δw_k = L (w^t - w̄_k)
    Δ_k  = (F_k + ε)^q Δw_k
    h_k  = q (F_k + ε)^{q-1} ‖Δw_k‖² + L (F_k + ε)^q          (Lemma 3, eq. 3)
    w^{t+1} = w^t - Σ_k Δ_k / Σ_k h_k

which is the unified form ``w^{t+1} = w^t - Σ_k λ_k (w^t - w̄_k)`` with
``λ_k = L (F_k + ε)^q / Σ_j h_j``: a loss-weighted average whose weights sum to at most 1
(the step shrinks by ``Σ λ``). :func:`qfedavg_lambdas` computes these λ.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message
from flwr.serverapp import Grid
from numpy.typing import ArrayLike, NDArray

from fairfl.contract import (
    ModelLayout,
    ReplyError,
    TrainReply,
    array_view,
    check_array_values,
    keys,
)
from fairfl.contract.qffl import QFFL_EPSILON, h_term
from fairfl.strategies._ops.passes import delta_sums_and_squared_distances, max_abs
from fairfl.strategies.aggregation import apply_summed_step, sample_weights
from fairfl.strategies.base import ConfigValue, ReweightedStrategy
from fairfl.strategies.params import RuleParameters, choice, real

logger = logging.getLogger(__name__)

Weighting = Literal["uniform", "p"]
WEIGHTINGS: tuple[str, ...] = ("uniform", "p")


@dataclass(frozen=True)
class QFFLParameters(RuleParameters):
    """q-FFL's hyperparameters (see :class:`QFFL`); ``lr`` is the run's learning rate."""

    client_learning_rate: float | None = real(
        None, key="lr", lower=0.0, lower_open=True, optional=True
    )
    q: float = real(0.1, key="qffl-q", lower=0.0)
    weighting: Weighting = choice("uniform", WEIGHTINGS, key="qffl-weighting")
    h_rtol: float = real(1e-3, key=None, lower=0.0, lower_open=True)


class QFFL(ReweightedStrategy):
    """q-FedAvg (paper 002, Algorithm 2) on fairfl's validated replies.

    Every reply must carry F_k(w^t) under ``train_loss_key`` (default
    ``loss-before-training``), the loss of the received model
    on the client's whole training split before local training. The server computes
    Δ_k and h_k from the reply's local model. A reply may also carry the client's own
    h_k as ``qffl-h`` (the paper's client protocol; see
    :func:`fairfl.contract.qffl.qffl_h`): it is checked against the server's value, and
    used when they agree.

    Parameters
    ----------
    client_learning_rate : float | None (default: None)
        η, the clients' local SGD learning rate (> 0). The Lipschitz estimate is
        ``L = 1/η`` (paper 002: "L is used as 1/η"), so it must equal the ``lr`` the
        clients train with; the registry reads it from the run config's ``lr``.
        ``None``: each round's η is the ``lr`` of the train config the round sends
        (fairfl's ServerApp and Flower's quickstarts send one). Flower's QFedAvg has no
        default (the argument is required there); a round whose config has no ``lr``
        then stops the run with a ``ValueError`` asking for one of the two.
    q : float (default: 0.1)
        q of eq. (2), >= 0. q = 0 gives the mean of the local models. The default is
        Flower's and the spec's recommendation for mean cross-entropy losses (paper 000
        Table 5: 0.1 on every data set); paper 002 used q = 1 on Synthetic.
    weighting : {"uniform", "p"} (default: "uniform")
        ``"uniform"``: unweighted sums over the replies, as Algorithm 2 line 8, the
        reference code and Flower's QFedAvg (devices are *sampled* ∝ n_k instead; with
        full participation client sizes are then ignored, and q = 0 is the unweighted
        mean, not sample-weighted FedAvg). ``"p"``: not in the paper,
        ``w^t - Σ p_k Δ_k / Σ p_k h_k`` with ``p_k = n_k / Σ n_j``, which at q = 0 is
        sample-weighted FedAvg (spec §5 and §15.4).
    h_rtol : float (default: 1e-3)
        Relative tolerance of the check of a client-sent ``qffl-h`` against the
        server's h_k, > 0.
    **kwargs
        Flower's FedAvg arguments and fairfl's settings
        (:class:`fairfl.strategies.base.FairStrategy`), among them ``train_loss_key``.

    Raises
    ------
    ValueError
        If a hyperparameter is out of range (the message names it).

    Notes
    -----
    With ``train_loss_key="train_loss"``, on identical replies without ``qffl-h``, the
    new model equals that of Flower's :class:`flwr.serverapp.strategy.QFedAvg` (tested):
    same Δ_k, h_k, ε and unweighted sums, computed here in float64 as the unified form
    (Δ_k is never materialised). By default F_k is read from ``loss-before-training``.

    A reply whose ``qffl-h`` differs from the server's h_k by more than ``h_rtol``
    (relative) is dropped with the reason ``metrics['qffl-h'] is <client> but the
    server computes <server> (q .., L .., rtol ..)``: the client used another q or
    learning rate, or sent an h for other weights, and summing it would change every
    client's step. Within the tolerance the client's h_k is the one summed (Algorithm
    2, lines 7-8).

    Sampling: Algorithm 2 samples devices with probability p_k and sums uniformly;
    Flower samples uniformly (``fraction_train``). Under full participation, the
    setting of both papers' experiments, ``"uniform"`` is the reference behaviour
    (spec §15.4: the baseline of paper 000, which ignores client sizes); ``"p"``
    weights by size instead.
    """

    needs_loss: ClassVar[bool] = True
    checks_array_values: ClassVar[bool] = True
    rule_name = "q-FFL"
    registry_name = "qffl"
    Parameters = QFFLParameters
    params: QFFLParameters

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.client_learning_rate = self.params.client_learning_rate
        # η of the round being aggregated: client_learning_rate, else the config's lr.
        self.learning_rate = self.client_learning_rate
        self.q = self.params.q
        self.weighting: Weighting = self.params.weighting
        self.h_rtol = self.params.h_rtol
        # Server-side squared distances ‖w^t - w̄_k‖² and the h_k to use, by node id,
        # for the round being aggregated (filled while the replies are read).
        self._distances: dict[int, float] = {}
        self._client_h: dict[int, float] = {}
        # Σ_k u_k w̄_k of the distance pass, with the node ids it summed, and Σ_j s_j h_j
        # of lambdas(): apply_lambdas() finishes the update from them (one pass in all).
        # (node ids, Σ_k (u_k / top) (w^t - w̄_k) per array, top = max u) of the last pass.
        self._summed_steps: tuple[list[int], list[NDArray[Any] | None], float] | None = None
        self._divisor: float | None = None

    @property
    def lipschitz(self) -> float:
        """L = 1/η of the current round.

        Raises
        ------
        ValueError
            If η is not known yet (no ``client_learning_rate``, and no round configured).
        """
        if self.learning_rate is None:
            raise ValueError(
                "q-FFL's L = 1/eta is unknown: pass client_learning_rate=eta or send "
                f"'{keys.LR}' in the train config"
            )
        return 1.0 / self.learning_rate

    def settings(self) -> dict[str, Any]:
        """q, η, L and the weighting."""
        return {
            "q": self.q,
            "client_learning_rate": self.client_learning_rate
            if self.client_learning_rate is not None
            else f"each round's config '{keys.LR}'",
            "weighting": self.weighting,
            "h_rtol": self.h_rtol,
        }

    def train_config(self, server_round: int) -> dict[str, ConfigValue]:
        """Send q, so that clients can report ``qffl-h``."""
        return {keys.QFFL_Q: self.q}

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Set this round's η (``client_learning_rate``, else the config's ``lr``), then send.

        Raises
        ------
        ValueError
            If no ``client_learning_rate`` was given and ``config`` has no valid ``lr``.
        """
        if self.client_learning_rate is None:
            self.learning_rate = round_learning_rate(
                config,
                "QFFL needs the clients' learning rate eta for L = 1/eta: pass "
                "client_learning_rate=eta",
            )
        return super().configure_train(server_round, arrays, config, grid)

    def read_train_replies(
        self, server_round: int, replies: Iterable[Message], layout: ModelLayout
    ) -> tuple[list[TrainReply], dict[int, str]]:
        """Validate, check array values in the distance pass, then check ``qffl-h``.

        The reader skips its value pass (:attr:`checks_array_values`): the pass over
        every reply that computes ``‖w^t - w̄_k‖²`` finds NaN/Inf (a non-finite sum) and
        bounds ``max|w̄_k| <= max|w^t| + ‖w^t - w̄_k‖``; only an array that fails this
        goes through :func:`fairfl.contract.check_array_values`, which names the reason
        exactly as the reader would.
        """
        accepted, dropped = super().read_train_replies(server_round, replies, layout)
        self._distances = {}
        self._client_h = {}
        self._summed_steps = None
        self._divisor = None
        if not accepted:
            return accepted, dropped
        assert self.current_arrays is not None  # set by configure_train; checked by caller
        global_arrays = [array_view(a) for a in self.current_arrays.values()]
        # λ_k's numerators u_k do not depend on the distances: sum u_k (w^t - w̄_k) in the
        # same pass, and divide by Σ_j h_j once it is known (apply_lambdas). Scaled by
        # 1 / max u, so that float32 sums neither overflow nor lose a small u_k.
        with np.errstate(all="ignore"):  # a bad loss fails in lambdas(), with its name
            numerators = qfedavg_numerators(
                self.losses_of(accepted),
                q=self.q,
                lipschitz=self.lipschitz,
                weights=self._sample_weights(accepted),
            )
            top = float(numerators.max())
        usable = bool(np.all(np.isfinite(numerators))) and 0 < top < math.inf
        sums, parts = delta_sums_and_squared_distances(
            global_arrays,
            [reply.arrays for reply in accepted],
            numerators / top if usable else None,
        )
        peaks = [max_abs(g) for g in global_arrays]
        kept: list[TrainReply] = []
        for reply, reply_parts in zip(accepted, parts, strict=True):
            reason = self._value_problem(reply, layout.keys, reply_parts, peaks)
            distance = float(reply_parts.sum())
            sent = reply.metrics.get(keys.QFFL_H)
            if reason is None and sent is not None:
                own = h_term(self.loss_of(reply), distance, q=self.q, lipschitz=self.lipschitz)
                if not math.isclose(float(sent), own, rel_tol=self.h_rtol):  # type: ignore[arg-type]
                    reason = (
                        f"metrics['{keys.QFFL_H}'] is {float(sent):.6g} but the server "  # type: ignore[arg-type]
                        f"computes {own:.6g} (q {self.q:g}, L {self.lipschitz:g}, "
                        f"rtol {self.h_rtol:g})"
                    )
            if reason is not None:
                logger.info(
                    "aggregate_train: dropped reply from node %d: %s", reply.node_id, reason
                )
                dropped[reply.node_id] = reason
                continue
            if sent is not None:
                self._client_h[reply.node_id] = float(sent)  # type: ignore[arg-type]
            self._distances[reply.node_id] = distance
            kept.append(reply)
        if sums is not None and len(kept) == len(accepted):
            # Any reply dropped here is in the sums: then apply_lambdas sums again.
            self._summed_steps = ([reply.node_id for reply in kept], sums, top)
        return kept, dropped

    def _value_problem(
        self,
        reply: TrainReply,
        array_keys: Sequence[str],
        parts: NDArray[np.float64],
        peaks: list[float],
    ) -> str | None:
        """The reader's reason to reject the reply's values, or None (see above)."""
        for key, value, part, peak in zip(array_keys, reply.arrays, parts, peaks, strict=True):
            bounded = math.isfinite(part) and (
                self.max_abs_weight is None
                or (peak + math.sqrt(part)) * (1 + 1e-6) <= self.max_abs_weight
            )
            if not bounded:
                try:
                    check_array_values(reply.node_id, key, value, self.max_abs_weight)
                except ReplyError as error:
                    return f"{error.field} {error.reason}"
        return None

    def lambdas(self, server_round: int, replies: list[TrainReply]) -> NDArray[np.float64]:
        """λ_k = s_k L (F_k + ε)^q / Σ_j s_j h_j (s = 1, or p with ``weighting="p"``)."""
        losses = self.losses_of(replies)
        distances = np.array([self._distances[r.node_id] for r in replies], dtype=np.float64)
        client_h = np.array(
            [self._client_h.get(r.node_id, np.nan) for r in replies], dtype=np.float64
        )
        weights = self._sample_weights(replies)
        lam, h = qfedavg_lambdas(
            losses,
            distances,
            q=self.q,
            lipschitz=self.lipschitz,
            weights=weights,
            client_h=client_h,
        )
        # Σ_j s_j h_j, as qfedavg_lambdas divides by it (λ_k = u_k / this); beyond
        # float64 the fused sums cannot be divided by it: apply_lambdas sums again.
        divisor = float(np.dot(np.ones_like(h) if weights is None else weights, h))
        self._divisor = divisor if math.isfinite(divisor) and divisor > 0 else None
        diagnostics = self.train_records[server_round].diagnostics
        diagnostics["qffl-h-sum"] = float(h.sum())
        diagnostics["qffl-client-h"] = int(np.count_nonzero(np.isfinite(client_h)))
        logger.info(
            "aggregate_train: round %d q-FFL step scale Σλ %.4g, Σh %.4g (%d client h)",
            server_round,
            float(lam.sum()),
            float(h.sum()),
            diagnostics["qffl-client-h"],
        )
        return lam

    def apply_lambdas(
        self,
        global_arrays: list[NDArray[Any]],
        replies: list[TrainReply],
        weights: NDArray[np.float64],
    ) -> list[NDArray[Any]]:
        """``w^t - Σ_k Δ_k / Σ_j s_j h_j`` from the distance pass's sums (Algorithm 2, l. 8).

        The same step as :func:`~fairfl.strategies.aggregation.reweighted_average` with
        these λ, its rounding bounded as in :func:`delta_sums_and_squared_distances`,
        without a second pass over the replies. Falls back to it when the pass summed
        other replies (one was dropped after it) or kept no sums.
        """
        fused, self._summed_steps = self._summed_steps, None
        divisor, self._divisor = self._divisor, None
        if fused is None or divisor is None or fused[0] != [r.node_id for r in replies]:
            return super().apply_lambdas(global_arrays, replies, weights)
        _, sums, top = fused
        return apply_summed_step(global_arrays, sums, divisor / top)

    def _sample_weights(self, replies: list[TrainReply]) -> NDArray[np.float64] | None:
        """s_k: None (unweighted sums) or ``p_k = n_k / Σ n_j`` with ``weighting="p"``."""
        if self.weighting != "p":
            return None
        return sample_weights([r.num_examples for r in replies])


def qfedavg_lambdas(
    losses: ArrayLike,
    squared_distances: ArrayLike,
    *,
    q: float,
    lipschitz: float,
    weights: ArrayLike | None = None,
    client_h: ArrayLike | None = None,
    epsilon: float = QFFL_EPSILON,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Return q-FedAvg's λ in the unified form, and the h_k used (paper 002, Algorithm 2).

    ``w^t - Σ_k s_k Δ_k / Σ_k s_k h_k = w^t - Σ_k λ_k (w^t - w̄_k)`` with
    ``λ_k = s_k L (F_k + ε)^q / Σ_j s_j h_j``, since ``Δ_k = (F_k + ε)^q L (w^t - w̄_k)``.

    Parameters
    ----------
    losses : ArrayLike
        F_k(w^t), one per client.
    squared_distances : ArrayLike
        ``‖w^t - w̄_k‖²``, one per client (:func:`delta_sums_and_squared_distances`).
    q : float
        q >= 0.
    lipschitz : float
        L = 1/η > 0.
    weights : ArrayLike | None
        s_k: ``None`` for the paper's unweighted sums (s = 1), else e.g. p_k.
    client_h : ArrayLike | None
        Client-sent h_k to use instead of the server's; NaN where a client sent none.
    epsilon : float
        ε added to the losses.

    Returns
    -------
    tuple[NDArray[np.float64], NDArray[np.float64]]
        λ (Σλ <= 1 for q >= 0) and the h_k used.

    Raises
    ------
    ValueError
        If the inputs differ in length, are empty, or hold negative or non-finite values.
    """
    d = np.asarray(squared_distances, dtype=np.float64)
    # ‖Δw_k‖² = L² ‖w^t - w̄_k‖² beyond float64 (learning rates below ~1e-154) is held
    # at the largest float: λ is then 0 or too small there, never NaN.
    with np.errstate(over="ignore", invalid="ignore"):
        norms = np.where(d > 0, np.minimum(lipschitz * lipschitz * d, np.finfo(np.float64).max), d)
    coefficients, h = qffl_coefficients(
        losses,
        norms,
        q=q,
        lipschitz=lipschitz,
        weights=weights,
        client_h=client_h,
        epsilon=epsilon,
        norms_name="squared_distances",
    )
    return lipschitz * coefficients, h


def qfedavg_numerators(
    losses: ArrayLike,
    *,
    q: float,
    lipschitz: float,
    weights: ArrayLike | None = None,
    epsilon: float = QFFL_EPSILON,
) -> NDArray[np.float64]:
    """``u_k = s_k L (F_k + ε)^q``, λ_k's numerator in :func:`qfedavg_lambdas`.

    Known before any distance, so the server can sum ``u_k w̄_k`` while it reads the
    replies (:func:`delta_sums_and_squared_distances`). Unchecked (the caller checks).
    """
    return lipschitz * qffl_numerators(losses, q=q, weights=weights, epsilon=epsilon)


# ---------------------------------------------------------------- the q-FFL core
# Both solvers of paper 002 end a round with the same server step (Algorithm 1, line 7;
# Algorithm 2, line 8), over the directions g_k the devices send: ∇F_k(w^t) (q-FedSGD)
# or Δw_k = L (w^t - w̄_k) (q-FedAvg). With Δ_k = (F_k + ε)^q g_k and h_k of eq. (3)
# (fairfl.contract.qffl.lipschitz_estimate):
#
#     w^{t+1} = w^t - Σ_k s_k Δ_k / Σ_k s_k h_k = w^t - Σ_k c_k g_k,
#     c_k = s_k (F_k + ε)^q / Σ_j s_j h_j                     (qffl_coefficients)
#
# QFedSGD applies it with qffl_update; QFFL with λ_k = L c_k on w^t - w̄_k
# (qfedavg_lambdas, fused with its distance pass).


def qffl_numerators(
    losses: ArrayLike,
    *,
    q: float,
    weights: ArrayLike | None = None,
    epsilon: float = QFFL_EPSILON,
) -> NDArray[np.float64]:
    """``s_k (F_k + ε)^q``: the factor of g_k in Δ_k (paper 002, Alg. 1 l. 5, Alg. 2 l. 6).

    Unchecked (the caller checks).
    """
    f = np.asarray(losses, dtype=np.float64)
    s = np.ones_like(f) if weights is None else np.asarray(weights, dtype=np.float64)
    return s * np.float_power(f + epsilon, q)


def qffl_coefficients(
    losses: ArrayLike,
    squared_norms: ArrayLike,
    *,
    q: float,
    lipschitz: float,
    weights: ArrayLike | None = None,
    client_h: ArrayLike | None = None,
    epsilon: float = QFFL_EPSILON,
    norms_name: str = "squared_norms",
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The server step of q-FedSGD and q-FedAvg: c_k of ``w^{t+1} = w^t - Σ_k c_k g_k``.

    ``c_k = s_k (F_k + ε)^q / Σ_j s_j h_j`` with h_k of eq. (3), so that
    ``Σ_k c_k g_k = Σ_k s_k Δ_k / Σ_k s_k h_k`` (paper 002, Algorithm 1 line 7 and
    Algorithm 2 line 8; s = 1 in the paper).

    Parameters
    ----------
    losses : ArrayLike
        F_k(w^t), one per client.
    squared_norms : ArrayLike
        ``‖g_k‖²``: ``‖∇F_k(w^t)‖²`` (q-FedSGD) or ``‖Δw_k‖² = L² ‖w^t - w̄_k‖²``
        (q-FedAvg), one per client.
    q : float
        q >= 0.
    lipschitz : float
        L > 0.
    weights : ArrayLike | None
        s_k: ``None`` for the paper's unweighted sums (s = 1), else e.g. p_k.
    client_h : ArrayLike | None
        Client-sent h_k to use instead of the server's; NaN where a client sent none.
    epsilon : float
        ε added to the losses.
    norms_name : str
        The name of ``squared_norms`` in error messages.

    Returns
    -------
    tuple[NDArray[np.float64], NDArray[np.float64]]
        c (finite and >= 0 for any accepted input) and the h_k used (``inf`` where h_k
        is beyond float64).

    Raises
    ------
    ValueError
        If the inputs differ in length or are empty, hold negative or non-finite
        values, no weight is > 0, or a client h_k is not > 0.

    Notes
    -----
    ``(F_k + ε)^q`` and h_k overflow float64 for large losses or q (``1e6^60`` already
    does), and ``∞/∞`` is NaN. Numerator and denominator are therefore both divided by
    ``(F_M + ε)^q``, M the weighted client with the largest loss:
    ``c_k = s_k r_k / Σ_j s_j r_j (q ‖g_j‖² / (F_j + ε) + L)`` with
    ``r_k = ((F_k + ε)/(F_M + ε))^q <= 1`` taken through logarithms, and a client h_k
    divided the same way. Every term is then finite or +inf: c is finite (0 where the
    denominator is beyond float64: no step).
    """
    f = np.asarray(losses, dtype=np.float64)
    d = np.asarray(squared_norms, dtype=np.float64)
    s = np.ones_like(f) if weights is None else np.asarray(weights, dtype=np.float64)
    if f.ndim != 1 or f.size == 0 or d.shape != f.shape or s.shape != f.shape:
        raise ValueError(
            f"losses, {norms_name} and weights must be non-empty vectors of one "
            f"length, got shapes {f.shape}, {d.shape} and {s.shape}"
        )
    for name, values in (("losses", f), (norms_name, d), ("weights", s)):
        if not np.all(np.isfinite(values)) or np.any(values < 0):
            raise ValueError(f"{name} must be finite and >= 0, got {values.tolist()}")
    if not np.any(s > 0):
        raise ValueError(f"weights must have an entry > 0, got {s.tolist()}")
    sent = np.full_like(f, np.nan) if client_h is None else np.asarray(client_h, np.float64)
    given = np.isfinite(sent)
    if sent.shape != f.shape or np.any(sent[given] <= 0):
        raise ValueError(f"client_h must be one h_k > 0 (or NaN) per client, got {sent.tolist()}")
    base = f + epsilon
    log_top = float(np.log(base[s > 0]).max())  # log (F_M + ε)
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        ratio = np.where(s > 0, np.exp(q * (np.log(base) - log_top)), 0.0)  # r_k
        # h_j / (F_M + ε)^q; a client whose r_j underflowed to 0 adds 0 (not 0 · inf).
        server = np.where(ratio > 0, ratio * (q * d / base + lipschitz), 0.0)
        scaled = np.where(given, np.exp(np.log(sent) - q * log_top), server)
        denominator = float(np.dot(s, scaled))
        coefficients = s * ratio / denominator if math.isfinite(denominator) else 0.0 * s
        h = np.where(given, sent, np.exp(np.log(server) + q * log_top))  # 0 stays 0
    return coefficients, h


def qffl_update(
    global_arrays: Sequence[ArrayLike],
    directions: Sequence[Sequence[ArrayLike]],
    coefficients: ArrayLike,
) -> list[NDArray[Any]]:
    """``w^{t+1} = w^t - Σ_k c_k g_k`` (paper 002, Algorithm 1 line 7, Algorithm 2 line 8).

    Sums in float64, the clients added in the order given; the result has each global
    array's dtype. Non-floating arrays (counters) keep their global value.

    Parameters
    ----------
    global_arrays : Sequence[ArrayLike]
        w^t.
    directions : Sequence[Sequence[ArrayLike]]
        g_k of each client, arrays in the order (and shapes) of ``global_arrays``.
    coefficients : ArrayLike
        c_k (:func:`qffl_coefficients`), one per client.

    Returns
    -------
    list[NDArray]
        w^{t+1}.

    Raises
    ------
    ValueError
        If the numbers of clients and coefficients differ, or an array's shape does not
        match.
    """
    c = np.asarray(coefficients, dtype=np.float64)
    if c.shape != (len(directions),):
        raise ValueError(
            f"need one coefficient per client: {len(directions)} clients, "
            f"coefficients of shape {c.shape}"
        )
    updated: list[NDArray[Any]] = []
    for index, g in enumerate(global_arrays):
        g_arr = np.asarray(g)
        if not np.issubdtype(g_arr.dtype, np.floating):
            updated.append(g_arr.copy())
            continue
        step = np.zeros(g_arr.shape, dtype=np.float64)
        for k, client in enumerate(directions):
            d_arr = np.asarray(client[index])
            if d_arr.shape != g_arr.shape:
                raise ValueError(
                    f"array {index} of client {k} has shape {d_arr.shape}, the global "
                    f"one {g_arr.shape}"
                )
            step += c[k] * d_arr.astype(np.float64)
        updated.append((g_arr.astype(np.float64) - step).astype(g_arr.dtype))
    return updated


def is_real(value: object) -> bool:
    """Whether ``value`` is an int or float (not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_learning_rate(value: object) -> bool:
    """Whether ``value`` is a real number in (0, inf)."""
    return is_real(value) and 0 < value < math.inf  # type: ignore[operator]


def round_learning_rate(config: ConfigRecord, needs: str) -> float:
    """The clients' η of a round: the train config's ``lr`` (q-FFL's L = 1/η, eq. 3).

    Raises
    ------
    ValueError
        If ``config`` has no ``lr`` > 0; the message starts with ``needs`` (what the rule
        needs and the constructor argument that avoids it).
    """
    lr = config.get(keys.LR)
    if not is_learning_rate(lr):
        raise ValueError(
            f"{needs}, or send '{keys.LR}' (> 0) in the train config; the round's config "
            f"has {keys.LR}={lr!r}"
        )
    return float(lr)  # type: ignore[arg-type]
