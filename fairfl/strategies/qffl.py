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
(the step shrinks by ``Σ λ``): ``λ_k = L c_k``, c_k being q-FFL's server-step coefficients
(:func:`~fairfl.strategies.qffl_step.qffl_coefficients`) for the directions
``Δw_k`` (:func:`~fairfl.strategies.qffl_step.qfedavg_squared_norms`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message
from flwr.serverapp import Grid
from numpy.typing import NDArray

from fairfl.contract import (
    ModelLayout,
    ReplyError,
    TrainReply,
    array_view,
    check_array_values,
    keys,
)
from fairfl.contract.qffl import h_term
from fairfl.strategies._ops.passes import delta_sums_and_squared_distances, max_abs
from fairfl.strategies.aggregation import apply_summed_step, sample_weights
from fairfl.strategies.base import ConfigValue, RejectedReplies, ReweightedStrategy
from fairfl.strategies.params import RuleParameters, choice, real
from fairfl.strategies.qffl_step import (
    WEIGHTINGS,
    Weighting,
    qfedavg_squared_norms,
    qffl_coefficients,
    qffl_numerators,
    round_learning_rate,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class QFFLParameters(RuleParameters):
    """q-FFL's hyperparameters (see :class:`QFFL`); ``lr`` is the run's learning rate."""

    client_learning_rate: float | None = real(
        None, key="lr", lower=0.0, lower_open=True, optional=True
    )
    # Grid: paper 000, App. B.2 (q = 0.1 best on every data set, its Table 5; paper 001's
    # Table 5 searched {0.001, 0.01, 0.1, 0.5, 1, 2, 5, 10}; the q-FFL slides, paper 002,
    # give one q per data set and no grid).
    q: float = real(0.1, key="qffl-q", lower=0.0, grid=(0.01, 0.1, 1.0))
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
    weights by size instead. With ``client_sampling="size-proportional"`` a round
    drawn ∝ n_k is Algorithm 2 under either weighting: every drawn reply counts
    n_k = 1, so ``"p"`` sums Δ_k and h_k uniformly too (``"p"`` weighs by size only
    in the census round, where every node trains).
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
        # (node ids, the s_k summed with, Σ_k (u_k / top) (w^t - w̄_k) per array,
        # top = max u) of the last pass.
        self._summed_steps: (
            tuple[list[int], NDArray[np.float64] | None, list[NDArray[Any] | None], float] | None
        ) = None
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
        # λ_k's numerators u_k = L s_k (F_k + ε)^q do not depend on the distances: sum
        # u_k (w^t - w̄_k) in the same pass, and divide by Σ_j s_j h_j once it is known
        # (apply_lambdas). Scaled by 1 / max u, so that float32 sums neither overflow nor
        # lose a small u_k.
        weights = self._sample_weights(accepted)
        with np.errstate(all="ignore"):  # a bad loss fails in lambdas(), with its name
            numerators = self.lipschitz * qffl_numerators(
                self.losses_of(accepted), q=self.q, weights=weights
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
            self._summed_steps = ([reply.node_id for reply in kept], weights, sums, top)
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
        lipschitz = self.lipschitz
        coefficients, h = qffl_coefficients(
            losses,
            qfedavg_squared_norms(distances, lipschitz),
            q=self.q,
            lipschitz=lipschitz,
            weights=weights,
            client_h=client_h,
            norms_name="squared_distances",
        )
        lam = lipschitz * coefficients  # Δw_k = L (w^t - w̄_k)
        # Σ_j s_j h_j, as qffl_coefficients divides by it (λ_k = u_k / this); beyond
        # float64 the fused sums cannot be divided by it: apply_lambdas sums again. So
        # too when the pass summed the Δ_k with other s_k: in a round drawn ∝ n_k the
        # replies reach this method with n_k = 1 (FairStrategy.sampled_replies, after
        # the pass), and Algorithm 2 sums the drawn devices uniformly, Δ_k and h_k alike.
        divisor = float(np.dot(np.ones_like(h) if weights is None else weights, h))
        fused = self._summed_steps
        if fused is not None and not _same_weights(fused[1], weights):
            self._summed_steps = None
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
    ) -> list[NDArray[Any]] | RejectedReplies:
        """``w^t - Σ_k Δ_k / Σ_j s_j h_j`` from the distance pass's sums (Algorithm 2, l. 8).

        The same step as :func:`~fairfl.strategies.aggregation.reweighted_average` with
        these λ, its rounding bounded as in :func:`delta_sums_and_squared_distances`,
        without a second pass over the replies. Falls back to it when the pass summed
        other replies (one was dropped after it) or other s_k (``weighting="p"`` in a
        round drawn ∝ n_k, see :meth:`lambdas`), or kept no sums.
        """
        fused, self._summed_steps = self._summed_steps, None
        divisor, self._divisor = self._divisor, None
        if fused is None or divisor is None or fused[0] != [r.node_id for r in replies]:
            return super().apply_lambdas(global_arrays, replies, weights)
        _, _, sums, top = fused
        return apply_summed_step(global_arrays, sums, divisor / top)

    def _sample_weights(self, replies: list[TrainReply]) -> NDArray[np.float64] | None:
        """s_k: None (unweighted sums) or ``p_k = n_k / Σ n_j`` with ``weighting="p"``."""
        if self.weighting != "p":
            return None
        return sample_weights([r.num_examples for r in replies])


def _same_weights(summed: NDArray[np.float64] | None, used: NDArray[np.float64] | None) -> bool:
    """Whether the distance pass summed with the s_k that λ uses (``None``: s = 1)."""
    if summed is None or used is None:
        return summed is None and used is None
    return bool(np.array_equal(summed, used))
