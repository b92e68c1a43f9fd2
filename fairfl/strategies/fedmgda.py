"""FedMGDA+: federated multi-objective aggregation through a min-norm QP.

Hu, Shaloudegi, Zhang and Yu, *Federated Learning Meets Multi-objective Optimization*,
IEEE TNSE 2022, https://arxiv.org/abs/2006.11489 (Hu et al.; spec-fedmgda). Each client's
loss is a separate objective; each round the server moves along the minimum-norm
element of the convex hull of the (normalised) client updates, a common descent
direction for every participant (Algorithm 1, eqs. (22)–(25)):

    g_i = w_t − w_i,      ḡ_i = g_i / ‖g_i‖                        (Alg. 1, normalise)
    λ* = argmin { λᵀ K λ : λ ∈ Δ, ‖λ − λ0‖_∞ ≤ ε },  K_ij = ⟨ḡ_i, ḡ_j⟩      (eq. 25)
    d_t = Σ_i λ*_i ḡ_i,   w_{t+1} = w_t − η_t d_t                               (eq. 22)
    η_t = η_g β^{⌊t / 100⌋}                                                  (§6.1.5)

The variants of the paper are settings of the same code (spec §1.10): FedAvg-n is
ε = 0; FedMGDA is no normalisation, ε = 1, η = 1; MGDA-Prox adds a proximal term on the
clients. The math is in :mod:`fairfl.strategies.fedmgda_qp`; the cache-blocked Gram and
step in the private ``_ops`` package.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from fairfl.contract import (
    TrainReply,
    keys,
)
from fairfl.secagg.forms import SecureForm
from fairfl.strategies._ops.blas import openblas_kernel_advice
from fairfl.strategies._ops.gram import (
    diagonal,
    gram_matrix,
    squared_update_norms,
)
from fairfl.strategies._ops.gram_kernel import gram_kernel, gram_kernel_description
from fairfl.strategies.core import intake
from fairfl.strategies.core.aggregation import weight_entropy
from fairfl.strategies.core.base import Aggregate, ConfigValue, FairStrategy, RejectedReplies
from fairfl.strategies.core.params import (
    NoParameters,
    ParameterError,
    RuleParameters,
    choice,
    flag,
    integer,
    real,
    text,
)
from fairfl.strategies.fedmgda_qp import (
    NORM_FLOOR,
    PAPER_DECAY_FACTOR,
    PRIORS,
    QP_FAILED,
    QP_NO_DIRECTION,
    Prior,
    check_qp_solver,
    decay_grid,
    fedmgda_update,
    min_norm_weights,
    normalize_gram,
    prior_weights,
    step_size,
    trainable_mask,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepScheduleParameters(RuleParameters):
    """The parameters of a rule with FedMGDA+'s step schedule (a ``global_lr_decay`` field)."""

    @classmethod
    def run_length_grid(cls, num_server_rounds: int) -> dict[str, tuple[Any, ...]]:
        """Hu et al.'s Table 5 decays as β (:func:`~fairfl.strategies.fedmgda_qp.decay_grid`).

        Its Decay grid is the total decay over the run, so β depends on the run's
        length; none for a run of at most 100 rounds, where the step never decays.
        """
        betas = decay_grid(num_server_rounds)
        key = cls.specs()["global_lr_decay"].key
        return {key: betas} if betas and key is not None else {}


@dataclass(frozen=True)
class FedMGDAParameters(StepScheduleParameters):
    """FedMGDA+'s hyperparameters (see :class:`FedMGDAPlus`)."""

    # Grid: Hu et al., Table 5 and Fig. 1.
    epsilon: float = real(1.0, key="fedmgda-epsilon", lower=0.0, grid=(0.05, 0.1, 0.5, 1.0))
    # Grid: Hu et al., Table 5 (FedMGDA+, FedAvg-n and MGDA-Prox alike). Its Decay grid
    # is the total decay over the run, not global_lr_decay (β per decay_every rounds).
    global_lr: float = real(
        1.0, key="fedmgda-global-lr", lower=0.0, lower_open=True, grid=(0.5, 1.0, 1.5, 2.0)
    )
    global_lr_decay: float = real(
        PAPER_DECAY_FACTOR, key="fedmgda-global-lr-decay", lower=0.0, lower_open=True, upper=1.0
    )
    decay_every: int = integer(100, key="fedmgda-decay-every", lower=1)
    normalize: bool = flag(True, key="fedmgda-normalize")
    prior: Prior = choice("uniform", PRIORS, key="fedmgda-prior")
    proximal_mu: float = real(0.0, key="fedmgda-proximal-mu", lower=0.0)
    qp_solver: str = text("quadprog", key="fedmgda-qp-solver")

    def check(self) -> None:
        """``qp_solver`` must be an installed qpsolvers backend."""
        _check_solver_parameter(self.qp_solver)


@dataclass(frozen=True)
class FedAvgNParameters(StepScheduleParameters):
    """FedAvg-n's hyperparameters: FedMGDA+'s step size schedule and prior (ε = 0)."""

    # Grid: Hu et al., Table 5 (FedMGDA+, FedAvg-n and MGDA-Prox alike). Its Decay grid
    # is the total decay over the run, not global_lr_decay (β per decay_every rounds).
    global_lr: float = real(
        1.0, key="fedmgda-global-lr", lower=0.0, lower_open=True, grid=(0.5, 1.0, 1.5, 2.0)
    )
    global_lr_decay: float = real(
        PAPER_DECAY_FACTOR, key="fedmgda-global-lr-decay", lower=0.0, lower_open=True, upper=1.0
    )
    decay_every: int = integer(100, key="fedmgda-decay-every", lower=1)
    prior: Prior = choice("uniform", PRIORS, key="fedmgda-prior")


@dataclass(frozen=True)
class MGDAProxParameters(StepScheduleParameters):
    """MGDA-Prox's hyperparameters: FedMGDA+'s with μ > 0 of its own key (see :class:`MGDAProx`)."""

    proximal_mu: float = real(0.2, key="mgda-prox-mu", lower=0.0, lower_open=True)
    epsilon: float = real(1.0, key="fedmgda-epsilon", lower=0.0)
    # Grid: Hu et al., Table 5 (FedMGDA+, FedAvg-n and MGDA-Prox alike). Its Decay grid
    # is the total decay over the run, not global_lr_decay (β per decay_every rounds).
    global_lr: float = real(
        1.0, key="fedmgda-global-lr", lower=0.0, lower_open=True, grid=(0.5, 1.0, 1.5, 2.0)
    )
    global_lr_decay: float = real(
        PAPER_DECAY_FACTOR, key="fedmgda-global-lr-decay", lower=0.0, lower_open=True, upper=1.0
    )
    decay_every: int = integer(100, key="fedmgda-decay-every", lower=1)
    prior: Prior = choice("uniform", PRIORS, key="fedmgda-prior")
    qp_solver: str = text("quadprog", key="fedmgda-qp-solver")

    def check(self) -> None:
        """``qp_solver`` must be an installed qpsolvers backend."""
        _check_solver_parameter(self.qp_solver)


def _check_solver_parameter(name: str) -> None:
    try:
        check_qp_solver(name)
    except ValueError as error:
        raise ParameterError("qp_solver", str(error)) from error


class FedMGDAPlus(FairStrategy):
    """FedMGDA+ (Hu et al., Algorithm 1) with the ε-constraint of eq. (25).

    The server computes each client's pseudo-gradient ``g_i = w_t − w_i`` from the
    reply, normalises it (whole-update L2 norm over trainable parameters), solves the
    min-norm QP over the ε-capped simplex around the prior λ0 and steps
    ``w_{t+1} = w_t − η_t Σ_i λ_i ḡ_i``. The QP weights λ are recorded as the round's
    ``weights`` (``rounds.jsonl``), the QP status and ‖d_t‖ as diagnostics.

    Parameters
    ----------
    epsilon : float (default: 1.0)
        ε, the ∞-norm radius around λ0 in eq. (25). 0 is FedAvg-n (λ = λ0); any
        ε >= 1 − min λ0 lifts the box (plain MGDA over the simplex). The paper ran every
        FedMGDA+ table with ε = 1 (spec §0).
    global_lr : float (default: 1.0)
        η_g, the global step size: an L2 step length in parameter space when
        normalising (spec §7.2.11). Paper grid {0.5, 1, 1.5, 2} (Table 5).
    global_lr_decay : float (default: PAPER_DECAY_FACTOR = 0.8913)
        β, the factor η_t shrinks by every ``decay_every`` rounds, as the authors'
        ``--global_lr_decay`` (1: no decay). The paper's tables give instead the fraction
        "decay" η shrinks to by round T, with β = decay^{100/T}; convert with
        :func:`~fairfl.strategies.fedmgda_qp.paper_decay_factor`. The default
        (:data:`~fairfl.strategies.fedmgda_qp.PAPER_DECAY_FACTOR`) is decay 1/10 over
        T = 2000 rounds (see Notes); the first decay comes after round 100.
    decay_every : int (default: 100)
        Rounds between two decays (100 in §6.1.5).
    normalize : bool (default: True)
        Normalise each g_i to unit L2 norm on the server (Algorithm 1). ``False`` gives
        the paper's FedMGDA (with ε = 1, η_g = 1) or exact FedAvg (with ε = 0, η_g = 1).
    prior : {"uniform", "num-examples"} (default: "uniform")
        λ0, the centre of the ε box: 1/n over the round's participants (the authors'
        code) or proportional to their ``num-examples`` (FLGo). Always renormalised
        over the replies that arrived (spec §7.1.3).
    proximal_mu : float (default: 0.0)
        μ of a FedProx term ``μ/2 ‖w − w_t‖²`` added to each client's local loss,
        sent as the train-config key ``proximal-mu`` (MGDA-Prox when > 0).
    qp_solver : str (default: "quadprog")
        A `qpsolvers` backend, by name. quadprog is the authors' solver and the one
        installed with fairfl; see Notes.
    **kwargs
        Sampling settings of :class:`fairfl.strategies.core.base.FairStrategy`.

    Raises
    ------
    ValueError
        If a hyperparameter is out of range (the message names it) or ``qp_solver``
        is not an installed qpsolvers backend.

    Notes
    -----
    * Paper: clients normalise (the authors' code); here the server normalises the
      update it computes from the reply, so a client cannot inflate its influence by
      scaling its update (spec §7.1.2). Replies carry local weights (wire contract v1),
      and ``g_i = w_t − w_i`` uses the paper's sign, so the step is ``−η d``.
    * Defaults: Hu et al., Table 8 (CIFAR-10 non-iid, b = 10, p = 0.1, T = 2000
      rounds), the rows η_g = 1.0, decay 1/10 of FedMGDA+ (69.87 % average), MGDA-Prox
      (its best row) and FedAvg-n, which is also the setting of the scaling attack of
      Fig. 2 (right): ε = 1, normalisation on, λ0 uniform (the authors' code), η_g = 1
      and β = 0.1^{100/2000} = 0.8913 (the authors' scripts pass 0.89). The paper's
      β depends on the run length T, which a strategy does not know: for another T set
      ``global_lr_decay = paper_decay_factor(0.1, T)``. Without decay full-batch runs
      diverged (Tables 10–11).
    * The schedule uses ``t = server_round − 1`` (Flower counts rounds from 1, the
      authors' code from 0).
    * QP backend: quadprog (Goldfarb–Idnani, dense active set) is exact to ~1e-16 on the
      constraints and scale-invariant, but needs a positive-definite P. The Gram is
      rescaled to unit maximum diagonal and a ridge of 1e-12 is added (raised up to
      1e-6 if the factorisation still fails), which keeps a singular K (duplicate or
      colinear clients, n > d) solvable and makes λ unique (in exact arithmetic,
      duplicates share their weight equally); d moves by at most √ridge. daqp would
      need no ridge (spec §1.9) but is not installed; interior-point and ADMM backends
      are less accurate. If every ridge fails, λ = λ0 and the status says so.
    * Updates with ‖g_i‖ <= 1e-12 get λ_i = 0 and stay out of the QP (spec §7.2.5).
    * At ε = 0 (FedAvg-n) λ = λ0 needs no QP: only the norms ‖g_i‖ are computed, not
      the Gram, and the diagnostic ‖d‖ is measured on the step itself.
    * The reply reader's pass over every value is skipped: the Gram pass finds NaN/Inf
      and bounds the magnitudes (:meth:`aggregate`), so a bad reply is still dropped
      with the reader's reason, at no extra pass (the round is then aggregated again
      without it, as for the rules of
      :class:`~fairfl.strategies.core.reweighted.ReweightedStrategy`).
    * Arrays whose name ends in ``running_mean``, ``running_var`` or
      ``num_batches_tracked`` are buffers: out of the norm and the QP, averaged with λ0
      (integer ones keep the global value). fairfl's model zoo has none.
    """

    #: The Gram pass reads every reply value; it checks them (see ``aggregate``).
    checks_array_values: ClassVar[bool] = True
    rule_name = "FedMGDA+"
    registry_name = "fedmgda"
    #: The rule under SecAgg+ (issue #48; :mod:`fairfl.strategies.secure`).
    secure_form = SecureForm.impossible(
        "its weights solve a QP over the Gram matrix of the normalised updates, which needs "
        "each client's update"
    )
    # RuleParameters: the variants below declare their own.
    Parameters: ClassVar[type[RuleParameters]] = FedMGDAParameters
    #: Settings a variant fixes instead of declaring (FedAvg-n: ε = 0).
    fixed: ClassVar[dict[str, Any]] = {}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # A variant declares some of FedMGDA+'s parameters and fixes others.
        values = {**FedMGDAParameters().settings(), **self.params.settings(), **self.fixed}
        self.epsilon: float = values["epsilon"]
        self.global_lr: float = values["global_lr"]
        self.global_lr_decay: float = values["global_lr_decay"]
        self.decay_every: int = values["decay_every"]
        self.normalize: bool = values["normalize"]
        self.prior: Prior = values["prior"]
        self.proximal_mu: float = values["proximal_mu"]
        self.qp_solver: str = values["qp_solver"]
        self._warned: set[str] = set()

    def settings(self) -> dict[str, Any]:
        """ε, η_g, β, decay period, normalisation, λ0, μ and the QP backend."""
        return {
            "epsilon": self.epsilon,
            "global_lr": self.global_lr,
            "global_lr_decay": self.global_lr_decay,
            "decay_every": self.decay_every,
            "normalize": self.normalize,
            "prior": self.prior,
            "proximal_mu": self.proximal_mu,
            "qp_solver": self.qp_solver,
        }

    def summary(self) -> None:
        """Log the settings and the Gram's path; where BLAS kernels are slow, which are not.

        At ε > 0 this builds or loads the compiled Gram kernel, so that the first round
        does not pay for it.
        """
        super().summary()
        if self.epsilon == 0:
            return
        logger.info("%s: Gram of the updates: %s", self.rule_name, gram_kernel_description())
        advice = openblas_kernel_advice() if gram_kernel() is None else None
        if advice is not None:
            logger.info("%s: %s", self.rule_name, advice)

    def train_config(self, server_round: int) -> dict[str, ConfigValue]:
        """``proximal-mu`` when the clients add a proximal term (MGDA-Prox)."""
        return {keys.PROXIMAL_MU: self.proximal_mu} if self.proximal_mu > 0 else {}

    def _update_products(
        self,
        global_arrays: Sequence[NDArray[Any]],
        local_arrays: Sequence[Sequence[NDArray[Any]]],
        trainable: Sequence[bool],
    ) -> NDArray[np.float64]:
        """The Gram K of the updates, (n, n); at ε = 0 only its diagonal ‖g_i‖², (n,).

        At ε = 0 the box of eq. (25) is the point λ0: there is no QP, and the norms are
        all the rule needs (:func:`squared_update_norms`: 30-35 ms of CPU where the Gram
        took 90-99 ms at 50 clients x 2M parameters, ``benchmarks/bench_fedmgda.py``);
        ‖d‖ is then measured on the step.
        """
        if self.epsilon == 0.0:
            return squared_update_norms(global_arrays, local_arrays, trainable=trainable)
        return gram_matrix(global_arrays, local_arrays, trainable=trainable)

    def aggregate(
        self, server_round: int, global_arrays: list[NDArray[Any]], replies: list[TrainReply]
    ) -> Aggregate | RejectedReplies:
        """Check the values in the Gram pass, solve the min-norm QP, step ``w_t − η_t d_t``.

        The replies with a NaN/Inf or a ``|value| > max_abs_weight``
        (:func:`~fairfl.strategies.core.intake.update_value_errors`) are returned instead:
        ``aggregate_train`` drops them and aggregates the rest again, so the Gram is
        always that of the replies aggregated.
        """
        assert self.current_arrays is not None  # set by configure_train
        trainable = trainable_mask(list(self.current_arrays.keys()), global_arrays)
        local_arrays = [r.arrays for r in replies]
        products = self._update_products(global_arrays, local_arrays, trainable)
        assert self.current_arrays is not None  # set by configure_train
        errors = intake.update_value_errors(
            replies,
            list(self.current_arrays.keys()),
            global_arrays,
            trainable,
            diagonal(products),
            self.max_abs_weight,
        )
        if errors:
            return RejectedReplies(errors)
        prior_all = prior_weights([r.num_examples for r in replies], self.prior)
        step = step_size(server_round, self.global_lr, self.global_lr_decay, self.decay_every)
        # At ε = 0 only the diagonal is known: λ = λ0 needs no more (min_norm_weights
        # returns λ0 without reading K), and ‖d‖ is measured on the step instead.
        gram = products if products.ndim == 2 else np.diag(products)
        norms = np.sqrt(np.clip(diagonal(products), 0.0, None))
        moving = norms > NORM_FLOOR
        zero_updates = int(np.count_nonzero(~moving))
        if zero_updates:
            self._warn_once(
                "zero",
                "aggregate_train: %d update(s) with norm <= %g get weight 0 (round %d); "
                "further rounds are not logged",
                zero_updates,
                NORM_FLOOR,
                server_round,
            )
        lambdas = np.zeros(len(replies))
        if moving.any():
            gram_used = gram[np.ix_(moving, moving)]
            if self.normalize:
                gram_used, _ = normalize_gram(gram_used)
            prior_moving = prior_weights(
                [r.num_examples for r, m in zip(replies, moving, strict=True) if m], self.prior
            )
            lambdas[moving], status = min_norm_weights(
                gram_used, prior_moving, self.epsilon, solver=self.qp_solver
            )
            direction_norm = math.sqrt(max(float(lambdas[moving] @ gram_used @ lambdas[moving]), 0))
        else:
            status, direction_norm = QP_NO_DIRECTION, 0.0
        if status == QP_FAILED:
            self._warn_once(
                "qp",
                "aggregate_train: the QP solver %s failed in round %d; using λ = λ0; "
                "further failures are not logged",
                self.qp_solver,
                server_round,
            )
        scales = np.where(moving, norms, 1.0) if self.normalize else None
        new_arrays, step_length = fedmgda_update(
            global_arrays,
            local_arrays,
            lambdas,
            step,
            norms=scales,
            trainable=trainable,
            buffer_weights=prior_all,
            measure=products.ndim == 1,
        )
        if products.ndim == 1:  # ‖d‖ = ‖w_{t+1} − w_t‖ / η_t over the trainable arrays
            direction_norm = step_length / step
        record = self.train_records[server_round]
        record.weights = {r.node_id: float(w) for r, w in zip(replies, lambdas, strict=True)}
        logger.debug("aggregate_train: round %d λ %s (%s)", server_round, record.weights, status)
        diagnostics: dict[str, Any] = {
            "qp-status": status,
            "qp-failed": int(status == QP_FAILED),
            "step-size": step,
            "direction-norm": direction_norm,
            "zero-updates": zero_updates,
            "lambda-max": float(lambdas.max()),
            "lambda-min": float(lambdas.min()),
        }
        entropy = weight_entropy(lambdas)
        if np.isfinite(entropy):
            diagnostics["lambda-entropy"] = entropy
        return new_arrays, diagnostics

    def _warn_once(self, topic: str, message: str, *args: object) -> None:
        if topic not in self._warned:
            self._warned.add(topic)
            logger.warning(message, *args)


class FedAvgN(FedMGDAPlus):
    """FedAvg-n (Hu et al., §6.1): FedMGDA+ with ε = 0, i.e. λ = λ0 on normalised updates.

    ``w_{t+1} = w_t − η_t Σ_i λ0_i g_i / ‖g_i‖``. Parameters as :class:`FedMGDAPlus`
    (ε and normalisation are fixed).
    """

    rule_name = "FedAvg-n"
    registry_name = "fedavg-n"
    Parameters = FedAvgNParameters
    fixed: ClassVar[dict[str, Any]] = {"epsilon": 0.0, "normalize": True}


class FedMGDAPlain(FedMGDAPlus):
    """The paper's FedMGDA (Hu et al., §6.1): plain MGDA on unnormalised updates.

    ε = 1, no normalisation, η_t ≡ 1 (the authors' ``--normalize=0 --epsilon=1``).
    Named ``fedmgda-plain`` in the registry, where ``fedmgda`` is FedMGDA+.

    Parameters
    ----------
    **kwargs
        Sampling settings of :class:`fairfl.strategies.core.base.FairStrategy`.
    """

    rule_name = "FedMGDA"
    registry_name = "fedmgda-plain"
    Parameters = NoParameters
    fixed: ClassVar[dict[str, Any]] = {
        "epsilon": 1.0,
        "normalize": False,
        "global_lr": 1.0,
        "global_lr_decay": 1.0,
    }


class MGDAProx(FedMGDAPlus):
    """MGDA-Prox (Hu et al., §6.1): FedMGDA+ whose clients add a proximal term.

    Parameters
    ----------
    proximal_mu : float (default: 0.2)
        μ of the client term ``μ/2 ‖w − w_t‖²``, > 0. The authors' code adds
        ``0.1 ‖w − w_t‖²`` without the ½ (spec §1.10), which is μ = 0.2 here.
    epsilon, global_lr, global_lr_decay, decay_every, prior, qp_solver, **kwargs
        As :class:`FedMGDAPlus`.

    Raises
    ------
    ValueError
        If ``proximal_mu`` is not > 0, or as :class:`FedMGDAPlus`.
    """

    rule_name = "MGDA-Prox"
    registry_name = "mgda-prox"
    Parameters = MGDAProxParameters
    fixed: ClassVar[dict[str, Any]] = {"normalize": True}
