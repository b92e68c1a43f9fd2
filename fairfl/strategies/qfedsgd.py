"""q-FFL trained with q-FedSGD (Li et al. 2020, Algorithm 1).

Li, Sanjabi, Beirami & Smith, "Fair Resource Allocation in Federated Learning", ICLR
2020 (spec ``docs/specs/spec-vred-qffl.md`` §5). The same objective
as :class:`~fairfl.strategies.QFFL` (eq. 2), solved without local epochs: each selected
device sends the full-batch gradient of its mean loss at the received model and the
loss itself, and the server takes one step (Algorithm 1, lines 5-7)::

    Δ_k = (F_k + ε)^q ∇F_k(w^t)
    h_k = q (F_k + ε)^{q-1} ‖∇F_k(w^t)‖² + L (F_k + ε)^q       (Lemma 3, eq. 3)
    w^{t+1} = w^t - Σ_k Δ_k / Σ_k h_k

h_k is :func:`fairfl.contract.qffl.lipschitz_estimate` and the step is
:func:`fairfl.strategies.qffl_step.qffl_coefficients` applied to the sum that
:func:`~fairfl.strategies._ops.passes.direction_sums_and_squared_norms` takes in one pass over
the replies (:func:`~fairfl.strategies.qffl_step.qffl_update` where it keeps no sum), the q-FFL
core q-FedAvg shares: q-FedAvg whose local training is one full-batch gradient step of
size 1/L gives the same new model (tested).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message
from flwr.serverapp import Grid
from numpy.typing import NDArray

from fairfl.contract import ModelLayout, TrainReply, keys
from fairfl.secagg.forms import SecureForm
from fairfl.strategies._ops.passes import direction_sums_and_squared_norms
from fairfl.strategies.core.aggregation import apply_summed_step, sample_weights
from fairfl.strategies.core.base import Aggregate, ConfigValue, FairStrategy, RejectedReplies
from fairfl.strategies.core.errors import MissingMetricError
from fairfl.strategies.core.params import RuleParameters, choice, real
from fairfl.strategies.qffl_step import (
    WEIGHTINGS,
    Weighting,
    qffl_coefficients,
    qffl_numerators,
    qffl_update,
    round_learning_rate,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class QFedSGDParameters(RuleParameters):
    """q-FedSGD's hyperparameters (see :class:`QFedSGD`); ``lr`` is the run's learning rate."""

    client_learning_rate: float | None = real(
        None, key="lr", lower=0.0, lower_open=True, optional=True
    )
    # Grid: q-FFL's (QFFLParameters in qffl.py), Malekmohammadi & Yu App. B.2.
    q: float = real(0.1, key="qffl-q", lower=0.0, grid=(0.01, 0.1, 1.0))
    weighting: Weighting = choice("uniform", WEIGHTINGS, key="qffl-weighting")
    lipschitz: float = real(0.0, key="qfedsgd-lipschitz", lower=0.0)


class QFedSGD(FairStrategy):
    """q-FedSGD (Li et al. 2020, Algorithm 1) on fairfl's validated replies.

    Every round sends ``full-gradient`` (true) in the train config. A reply carries the
    full-batch gradient ∇F_k(w^t) of the client's mean loss over its whole training
    split as the ArrayRecord ``gradient`` (same keys, shapes and dtypes as the model;
    in place of ``arrays``) and F_k(w^t) from the same pass under ``train_loss_key``
    (default ``loss-before-training``). fairfl's ClientApp and
    :func:`fairfl.client.fair_train` send both; :func:`fairfl.client.loader_gradient`
    computes them in a ClientApp of your own. The server computes Δ_k and h_k.

    Parameters
    ----------
    client_learning_rate : float | None (default: None)
        η for ``L = 1/η`` when ``lipschitz`` is 0, as :class:`~fairfl.strategies.QFFL`
        (Li et al. 2020 uses L = 1/η, "use 1/L as η"); the registry reads it from the run
        config's ``lr``. ``None``: each round's ``lr`` of the train config.
    q : float (default: 0.1)
        q of eq. (2), >= 0; QFFL's default (Li et al. 2020 used q = 1 on Synthetic).
    weighting : {"uniform", "p"} (default: "uniform")
        As in :class:`~fairfl.strategies.QFFL`: ``"uniform"`` is Algorithm 1's
        unweighted sums; ``"p"`` weighs both sums by ``p_k = n_k / Σ n_j``.
    lipschitz : float (default: 0.0)
        L > 0, the Lipschitz constant of ∇F_k (run-config key ``qfedsgd-lipschitz``);
        0 means ``L = 1/η`` as above.
    **kwargs
        Flower's FedAvg arguments and fairfl's settings
        (:class:`fairfl.strategies.core.base.FairStrategy`), among them ``train_loss_key``.

    Raises
    ------
    ValueError
        If a hyperparameter is out of range (the message names it).

    Notes
    -----
    A reply without the ``gradient`` ArrayRecord (a client that trained and sent
    weights) is dropped with the reason ``content['gradient'] is missing``; when every
    reply of a round lacks it, the run stops with a :class:`MissingMetricError` naming
    the record and the client helpers, unless ``allow_missing_metrics=True``. The
    gradient's values are checked as weights are (finite, ``max_abs_weight``).
    Sampling: Flower's uniform ``fraction_train``, as QFFL.

    The reply ``weights`` recorded per round are ``L c_k`` with
    ``w^{t+1} = w^t - Σ_k c_k ∇F_k``: the λ_k QFFL would record for the same step.
    """

    needs_loss: ClassVar[bool] = True
    checks_array_values: ClassVar[bool] = True
    rule_name = "q-FedSGD"
    registry_name = "qfedsgd"
    #: Under SecAgg+ (issue #48) each client computes its Δ_k and h_k from its gradient
    #: and masks h_k and -Δ_k / h_k (:func:`fairfl.secagg.forms.client_part`).
    secure_form = SecureForm.one_round("qfedsgd", "the server sees F_k, never ‖∇F_k(w^t)‖")
    Parameters = QFedSGDParameters
    params: QFedSGDParameters

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.client_learning_rate = self.params.client_learning_rate
        self.learning_rate = self.client_learning_rate
        self.q = self.params.q
        self.weighting: Weighting = self.params.weighting
        self.fixed_lipschitz = self.params.lipschitz

    @property
    def reply_arrays_key(self) -> str:
        """Replies carry ∇F_k(w^t) as the ArrayRecord ``gradient``."""
        return keys.GRADIENT

    @property
    def lipschitz(self) -> float:
        """L: ``lipschitz`` if > 0, else 1/η of the current round.

        Raises
        ------
        ValueError
            If neither L nor η is known.
        """
        if self.fixed_lipschitz > 0:
            return self.fixed_lipschitz
        if self.learning_rate is None:
            raise ValueError(
                "q-FedSGD's L is unknown: pass lipschitz=L or client_learning_rate=eta "
                f"(L = 1/eta), or send '{keys.LR}' in the train config"
            )
        return 1.0 / self.learning_rate

    def settings(self) -> dict[str, Any]:
        """q, L (or where it comes from) and the weighting."""
        if self.fixed_lipschitz > 0:
            lipschitz: Any = self.fixed_lipschitz
        elif self.client_learning_rate is not None:
            lipschitz = 1.0 / self.client_learning_rate
        else:
            lipschitz = f"1 / each round's config '{keys.LR}'"
        return {"q": self.q, "lipschitz": lipschitz, "weighting": self.weighting}

    def train_config(self, server_round: int) -> dict[str, ConfigValue]:
        """Ask for the full-batch gradient instead of local training."""
        return {keys.FULL_GRADIENT: True}

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Set this round's η when L = 1/η comes from the config's ``lr``, then send.

        Raises
        ------
        ValueError
            If L is neither given nor derivable (no ``client_learning_rate`` and no
            valid ``lr`` in ``config``).
        """
        if self.fixed_lipschitz == 0 and self.client_learning_rate is None:
            self.learning_rate = round_learning_rate(
                config, "QFedSGD needs L: pass lipschitz=L or client_learning_rate=eta (L = 1/eta)"
            )
        return super().configure_train(server_round, arrays, config, grid)

    def read_train_replies(
        self, server_round: int, replies: Iterable[Message], layout: ModelLayout
    ) -> tuple[list[TrainReply], dict[int, str]]:
        """Validate as every rule does; stop the run if no reply carried a gradient.

        Raises
        ------
        MissingMetricError
            If every reply that is not an error lacks the ``gradient`` ArrayRecord (or a
            metric the rule needs), unless ``allow_missing_metrics``.
        """
        messages = list(replies)
        accepted, dropped = super().read_train_replies(server_round, messages, layout)
        answered = {self.reply_node(m) for m in messages if not m.has_error()}
        lacking = {
            node
            for node, reason in dropped.items()
            if reason.startswith(f"content[{keys.GRADIENT!r}] is missing")
        }
        if not self.allow_missing_metrics and answered and lacking == answered:
            raise MissingMetricError(
                f"aggregate_train: round {server_round}: every reply ({len(lacking)}) "
                f"lacks content[{keys.GRADIENT!r}], the ArrayRecord of the full-batch "
                f"gradient of F_k at the received model, which {self.rule_name} needs "
                "(the replies carry trained weights instead). fairfl's ClientApp and "
                "fairfl.client.fair_train(message, model, trainloader, loss_fn, train_fn) "
                f"send it when the round's config has '{keys.FULL_GRADIENT}'; "
                "fairfl.client.loader_gradient computes it in a ClientApp of your own. "
                "To drop such replies and go on instead, build the strategy with "
                "allow_missing_metrics=True."
            )
        return accepted, dropped

    def aggregate(
        self, server_round: int, global_arrays: list[NDArray[Any]], replies: list[TrainReply]
    ) -> Aggregate | RejectedReplies:
        """``w^{t+1} = w^t - Σ_k c_k ∇F_k(w^t)`` (Algorithm 1, line 7), reading each reply once.

        Δ_k's factors ``u_k = s_k (F_k + ε)^q`` do not depend on ‖∇F_k‖²: one pass
        (:func:`~fairfl.strategies._ops.passes.direction_sums_and_squared_norms`) sums
        ``u_k ∇F_k`` while it takes each norm, which also checks the values (the reader
        skips its pass, :attr:`checks_array_values`); the sum is divided by Σ_k h_k
        once it is known. The replies with a NaN/Inf or a value beyond
        ``max_abs_weight`` (:meth:`value_errors`) are returned instead:
        :meth:`aggregate_train` drops them and aggregates the rest.
        """
        gradients = [reply.arrays for reply in replies]
        weights = (
            sample_weights([r.num_examples for r in replies]) if self.weighting == "p" else None
        )
        losses = self.losses_of(replies)
        with np.errstate(all="ignore"):  # a bad loss fails in qffl_coefficients, named
            numerators = qffl_numerators(losses, q=self.q, weights=weights)
            top = int(np.argmax(numerators))
            scale = float(numerators[top])
        usable = bool(np.all(np.isfinite(numerators))) and 0 < scale < math.inf
        sums, parts = direction_sums_and_squared_norms(
            global_arrays, gradients, numerators / scale if usable else None
        )
        errors = self.value_errors(replies, parts)
        if errors:
            return RejectedReplies(errors)
        norms = parts.sum(axis=1)
        lipschitz = self.lipschitz
        coefficients, h = qffl_coefficients(
            losses,
            norms,
            q=self.q,
            lipschitz=lipschitz,
            weights=weights,
            norms_name="squared gradient norms",
        )
        lam = lipschitz * coefficients
        record = self.train_records[server_round]
        record.weights = {r.node_id: float(w) for r, w in zip(replies, lam, strict=True)}
        logger.info(
            "aggregate_train: round %d q-FedSGD step scale Σλ %.4g, Σh %.4g",
            server_round,
            float(lam.sum()),
            float(h.sum()),
        )
        diagnostics: dict[str, Any] = {
            "qffl-h-sum": float(h.sum()),
            "lambda-max": float(lam.max()),
            "lambda-min": float(lam.min()),
            "lambda-sum": float(lam.sum()),
            "gradient-norm-max": float(np.sqrt(norms.max())),
        }
        # c_k = (u_k / u_top) c_top: the sum of (u_k / u_top) ∇F_k, divided by 1 / c_top.
        if sums is not None and coefficients[top] > 0:
            return apply_summed_step(global_arrays, sums, 1.0 / coefficients[top]), diagnostics
        return qffl_update(global_arrays, gradients, coefficients), diagnostics
