"""q-FFL trained with q-FedAvg.

Li, Sanjabi, Beirami & Smith, "Fair Resource Allocation in Federated Learning", ICLR
2020, https://openreview.net/pdf?id=ByexElSYDr (spec
``docs/specs/spec-vred-qffl.md`` §5). q-FFL minimises ``Σ_k p_k F_k^{q+1}(w) / (q+1)`` (eq. 2):
q = 0 is FedAvg's objective, larger q weighs high-loss devices more.

Implements Algorithm 2 (q-FedAvg). With w^t the broadcast model, w̄_k the model of
device k after local SGD with step η, ``L = 1/η`` and ε = 1e-10 (reference code)::

    Δw_k = L (w^t - w̄_k)
    Δ_k  = (F_k + ε)^q Δw_k
    h_k  = q (F_k + ε)^{q-1} ‖Δw_k‖² + L (F_k + ε)^q          (Lemma 3, eq. 3)
    w^{t+1} = w^t - Σ_k Δ_k / Σ_k h_k

which is the unified form ``w^{t+1} = w^t - Σ_k λ_k (w^t - w̄_k)`` with
``λ_k = L (F_k + ε)^q / Σ_j h_j``: a loss-weighted average whose weights sum to at most 1
(the step shrinks by ``Σ λ``): ``λ_k = L c_k``, c_k being q-FFL's server-step coefficients
(:func:`~fairfl.strategies.qffl_step.qffl_coefficients`) for the directions
``Δw_k`` (:func:`~fairfl.strategies.qffl_step.qfedavg_squared_norms`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message
from flwr.serverapp import Grid
from numpy.typing import NDArray

from fairfl.contract import (
    ReplyError,
    TrainReply,
    array_view,
    check_array_values,
    keys,
)
from fairfl.contract.qffl import h_term
from fairfl.secagg.forms import SecureForm
from fairfl.strategies._ops.passes import delta_sums_and_squared_distances, max_abs
from fairfl.strategies.core.aggregation import apply_summed_step, sample_weights
from fairfl.strategies.core.base import Aggregate, ConfigValue, RejectedReplies
from fairfl.strategies.core.params import RuleParameters, choice, real
from fairfl.strategies.core.reweighted import ReweightedStrategy
from fairfl.strategies.qffl_step import (
    WEIGHTINGS,
    Weighting,
    qfedavg_squared_norms,
    qffl_coefficients,
    qffl_numerators,
    qffl_sensitivity_share,
    round_learning_rate,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class QFFLParameters(RuleParameters):
    """q-FFL's hyperparameters (see :class:`QFFL`); ``lr`` is the run's learning rate."""

    client_learning_rate: float | None = real(
        None, key="lr", lower=0.0, lower_open=True, optional=True
    )
    # Grid: Malekmohammadi & Yu, App. B.2 (q = 0.1 best on every data set, its Table 5; Hu et al.'s
    # Table 5 searched {0.001, 0.01, 0.1, 0.5, 1, 2, 5, 10}; the q-FFL slides, Li et al. 2020,
    # give one q per data set and no grid).
    q: float = real(0.1, key="qffl-q", lower=0.0, grid=(0.01, 0.1, 1.0))
    weighting: Weighting = choice("uniform", WEIGHTINGS, key="qffl-weighting")
    h_rtol: float = real(1e-3, key=None, lower=0.0, lower_open=True)


class QFFL(ReweightedStrategy):
    """q-FedAvg (Li et al. 2020, Algorithm 2) on fairfl's validated replies.

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
        ``L = 1/η`` (Li et al. 2020: "L is used as 1/η"), so it must equal the ``lr`` the
        clients train with; the registry reads it from the run config's ``lr``.
        ``None``: each round's η is the ``lr`` of the train config the round sends
        (fairfl's ServerApp and Flower's quickstarts send one). Flower's QFedAvg has no
        default (the argument is required there); a round whose config has no ``lr``
        then stops the run with a ``ValueError`` asking for one of the two.
    q : float (default: 0.1)
        q of eq. (2), >= 0. q = 0 gives the mean of the local models. The default is
        Flower's and the spec's recommendation for mean cross-entropy losses (Malekmohammadi & Yu
        Table 5: 0.1 on every data set); Li et al. 2020 used q = 1 on Synthetic.
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
        (:class:`fairfl.strategies.core.base.FairStrategy`), among them ``train_loss_key``.

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
    (spec §15.4: the baseline of Malekmohammadi & Yu, which ignores client sizes); ``"p"``
    weights by size instead. With ``client_sampling="size-proportional"`` a round
    drawn ∝ n_k is Algorithm 2 under either weighting: every drawn reply counts
    n_k = 1, so ``"p"`` sums Δ_k and h_k uniformly too (``"p"`` weighs by size only
    in the census round, where every node trains).
    """

    needs_loss: ClassVar[bool] = True
    checks_array_values: ClassVar[bool] = True
    rule_name = "q-FFL"
    registry_name = "qffl"
    #: Under SecAgg+ (issue #48) each client masks h_k and -Δ_k / h_k (Alg. 2, l. 6-8).
    secure_form = SecureForm.one_round("qffl", "the server sees F_k, never ‖w^t - w̄_k‖")
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

    def aggregate(
        self, server_round: int, global_arrays: list[NDArray[Any]], replies: list[TrainReply]
    ) -> Aggregate | RejectedReplies:
        """``w^t - Σ_k Δ_k / Σ_j s_j h_j`` (Algorithm 2, l. 8), reading each reply once.

        The distance pass (:meth:`distance_pass`) checks the values and ``qffl-h`` and
        sums the Δ_k; the step divides the sums by Σ_j s_j h_j once it is known. Capped
        λ (``max_client_share``) are applied by a second pass.
        """
        found = self.distance_pass(global_arrays, replies)
        if isinstance(found, RejectedReplies):
            return found
        lam, divisor = self.step_weights(server_round, replies, found)
        apply = partial(self._summed_step, found, divisor)
        return self.weighted_step(server_round, global_arrays, replies, lam, apply)

    def lambdas(self, server_round: int, replies: list[TrainReply]) -> NDArray[np.float64]:
        """λ_k = s_k L (F_k + ε)^q / Σ_j s_j h_j of the replies against the model sent.

        Raises
        ------
        ValueError
            If a reply has a bad value or a ``qffl-h`` the server disagrees with.
        """
        assert self.current_arrays is not None  # set by configure_train
        global_arrays = [array_view(a) for a in self.current_arrays.values()]
        found = self.distance_pass(global_arrays, replies, summed=False)
        if isinstance(found, RejectedReplies):
            raise ValueError("; ".join(str(error) for error in found.errors))
        return self.step_weights(server_round, replies, found)[0]

    def distance_pass(
        self, global_arrays: list[NDArray[Any]], replies: list[TrainReply], summed: bool = True
    ) -> DistancePass | RejectedReplies:
        """One pass over the replies: ‖w^t - w̄_k‖², their values' check and Σ_k Δ_k.

        The reader skips its value pass (:attr:`checks_array_values`): the squared
        distances find NaN/Inf (a non-finite sum) and bound ``max|w̄_k| <= max|w^t| +
        ‖w^t - w̄_k‖``; only an array that fails this goes through
        :func:`fairfl.contract.check_array_values`, which names the reason exactly as the
        reader would. A client's ``qffl-h`` is checked against the server's h_k. The
        replies that fail either check are returned instead.
        """
        assert self.current_arrays is not None  # set by configure_train
        # λ_k's numerators u_k = L s_k (F_k + ε)^q do not depend on the distances: sum
        # u_k (w^t - w̄_k) in the same pass, and divide by Σ_j s_j h_j once it is known
        # (_summed_step). Scaled by 1 / max u, so that float32 sums neither overflow nor
        # lose a small u_k.
        with np.errstate(all="ignore"):  # a bad loss fails in step_weights, with its name
            numerators = self.lipschitz * qffl_numerators(
                self.losses_of(replies), q=self.q, weights=self._sample_weights(replies)
            )
            top = float(numerators.max())
        usable = summed and bool(np.all(np.isfinite(numerators))) and 0 < top < math.inf
        sums, parts = delta_sums_and_squared_distances(
            global_arrays, [reply.arrays for reply in replies], numerators / top if usable else None
        )
        peaks = [max_abs(g) for g in global_arrays]
        names = list(self.current_arrays.keys())
        distances = [float(reply_parts.sum()) for reply_parts in parts]
        errors = [
            error
            for reply, reply_parts, distance in zip(replies, parts, distances, strict=True)
            if (error := self._reply_error(reply, names, reply_parts, peaks, distance))
        ]
        if errors:
            return RejectedReplies(errors)
        client_h = [float(r.metrics.get(keys.QFFL_H, math.nan)) for r in replies]  # type: ignore[arg-type]
        if self.privacy is not None:  # a client's h read its unclipped update
            client_h = [math.nan] * len(replies)
        return DistancePass(np.array(distances), np.array(client_h), sums, top)

    def _reply_error(
        self,
        reply: TrainReply,
        array_keys: Sequence[str],
        parts: NDArray[np.float64],
        peaks: list[float],
        distance: float,
    ) -> ReplyError | None:
        """The reader's error for the reply's values, or its ``qffl-h``'s, or None (above)."""
        for key, value, part, peak in zip(array_keys, reply.arrays, parts, peaks, strict=True):
            bounded = math.isfinite(part) and (
                self.max_abs_weight is None
                or (peak + math.sqrt(part)) * (1 + 1e-6) <= self.max_abs_weight
            )
            if not bounded:
                try:
                    check_array_values(reply.node_id, key, value, self.max_abs_weight)
                except ReplyError as error:
                    return error
        sent = reply.metrics.get(keys.QFFL_H)
        if sent is None or self.privacy is not None:  # under DP h is the clipped update's
            return None
        own = h_term(self.loss_of(reply), distance, q=self.q, lipschitz=self.lipschitz)
        if math.isclose(float(sent), own, rel_tol=self.h_rtol):  # type: ignore[arg-type]
            return None
        return ReplyError(
            reply.node_id,
            f"metrics['{keys.QFFL_H}']",
            f"is {float(sent):.6g} but the server computes {own:.6g} "  # type: ignore[arg-type]
            f"(q {self.q:g}, L {self.lipschitz:g}, rtol {self.h_rtol:g})",
        )

    def step_weights(
        self, server_round: int, replies: list[TrainReply], found: DistancePass
    ) -> tuple[NDArray[np.float64], float | None]:
        """λ_k = s_k L (F_k + ε)^q / Σ_j s_j h_j (s = 1, or p with ``weighting="p"``).

        Returns λ and Σ_j s_j h_j, the divisor of the pass's sums (``None`` beyond float64:
        the step is then summed again with λ).
        """
        losses = self.losses_of(replies)
        weights = self._sample_weights(replies)
        lipschitz = self.lipschitz
        coefficients, h = qffl_coefficients(
            losses,
            qfedavg_squared_norms(found.distances, lipschitz),
            q=self.q,
            lipschitz=lipschitz,
            weights=weights,
            client_h=found.client_h,
            norms_name="squared_distances",
        )
        lam = lipschitz * coefficients  # Δw_k = L (w^t - w̄_k)
        # Σ_j s_j h_j, as qffl_coefficients divides by it (λ_k = u_k / this). In a round
        # drawn ∝ n_k the replies come with n_k = 1 (FairStrategy.sampled_replies), so
        # the sums and h_k are uniform, as Algorithm 2 sums the drawn devices.
        divisor = float(np.dot(np.ones_like(h) if weights is None else weights, h))
        diagnostics = self.train_records[server_round].diagnostics
        diagnostics["qffl-h-sum"] = float(h.sum())
        diagnostics["qffl-client-h"] = int(np.count_nonzero(np.isfinite(found.client_h)))
        if self.privacy is not None:  # S / C of the step given the losses (central DP)
            diagnostics["dp-sensitivity-weight"] = qffl_sensitivity_share(
                losses,
                q=self.q,
                lipschitz=lipschitz,
                clipping_norm=self.privacy.clipping_norm,
                weights=weights,
            )
        logger.info(
            "aggregate_train: round %d q-FFL step scale Σλ %.4g, Σh %.4g (%d client h)",
            server_round,
            float(lam.sum()),
            float(h.sum()),
            diagnostics["qffl-client-h"],
        )
        return lam, (divisor if math.isfinite(divisor) and divisor > 0 else None)

    def _summed_step(
        self,
        found: DistancePass,
        divisor: float | None,
        global_arrays: list[NDArray[Any]],
        replies: list[TrainReply],
        weights: NDArray[np.float64],
    ) -> list[NDArray[Any]] | RejectedReplies:
        """``w^t - Σ_k Δ_k / Σ_j s_j h_j`` from the pass's sums (Algorithm 2, l. 8).

        The same step as :func:`~fairfl.strategies.core.aggregation.reweighted_average` with
        these λ, its rounding bounded as in :func:`delta_sums_and_squared_distances`,
        without a second pass over the replies. Falls back to it when the pass kept no
        sums or Σ_j s_j h_j is beyond float64.
        """
        if found.sums is None or divisor is None:
            return self.apply_lambdas(global_arrays, replies, weights)
        return apply_summed_step(global_arrays, found.sums, divisor / found.top)

    def _sample_weights(self, replies: list[TrainReply]) -> NDArray[np.float64] | None:
        """s_k: None (unweighted sums) or ``p_k = n_k / Σ n_j`` with ``weighting="p"``."""
        if self.weighting != "p":
            return None
        return sample_weights([r.num_examples for r in replies])


@dataclass(frozen=True)
class DistancePass:
    """What q-FFL's one pass over a round's replies found (:meth:`QFFL.distance_pass`).

    Attributes
    ----------
    distances : NDArray[np.float64]
        ‖w^t - w̄_k‖² of each reply, in order.
    client_h : NDArray[np.float64]
        The ``qffl-h`` each client sent (checked), NaN where it sent none.
    sums : list[NDArray[Any] | None] | None
        Σ_k (u_k / top) (w^t - w̄_k) per array (``None``: not summed, e.g. u not finite).
    top : float
        max_k u_k, the sums' scale.
    """

    distances: NDArray[np.float64]
    client_h: NDArray[np.float64]
    sums: list[NDArray[Any] | None] | None
    top: float
