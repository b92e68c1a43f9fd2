"""FedMGDA+: federated multi-objective aggregation through a min-norm QP.

Hu, Shaloudegi, Zhang and Yu, *Federated Learning Meets Multi-objective Optimization*,
IEEE TNSE 2022, https://arxiv.org/abs/2006.11489 (paper 001; spec-fedmgda). Each client's
loss is a separate objective; each round the server moves along the minimum-norm
element of the convex hull of the (normalised) client updates, a common descent
direction for every participant (Algorithm 1, eqs. (22)–(25)):

    g_i = w_t − w_i,      ḡ_i = g_i / ‖g_i‖                        (Alg. 1, normalise)
    λ* = argmin { λᵀ K λ : λ ∈ Δ, ‖λ − λ0‖_∞ ≤ ε },  K_ij = ⟨ḡ_i, ḡ_j⟩      (eq. 25)
    d_t = Σ_i λ*_i ḡ_i,   w_{t+1} = w_t − η_t d_t                               (eq. 22)
    η_t = η_g β^{⌊t / 100⌋}                                                  (§6.1.5)

The variants of the paper are settings of the same code (spec §1.10): FedAvg-n is
ε = 0; FedMGDA is no normalisation, ε = 1, η = 1; MGDA-Prox adds a proximal term on the
clients. The math is in the module-level functions below the classes.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from flwr.app import Message
from numpy.typing import ArrayLike, NDArray

from fairfl.contract import (
    ModelLayout,
    ReplyError,
    TrainReply,
    array_view,
    check_array_values,
    keys,
)
from fairfl.strategies._checks import check_real
from fairfl.strategies._ops.blas import openblas_kernel_advice
from fairfl.strategies._ops.gram import (
    GRAM_RTOL,
    check_shapes,
    diagonal,
    difference_step,
    float_mask,
    gram_matrix,
    squared_update_norms,
)
from fairfl.strategies._ops.gram_kernel import gram_kernel, gram_kernel_description
from fairfl.strategies._ops.passes import max_abs
from fairfl.strategies.aggregation import reweighted_average, sample_weights, weight_entropy
from fairfl.strategies.base import ConfigValue, FairStrategy, check_positive_int
from fairfl.strategies.params import (
    NoParameters,
    ParameterError,
    RuleParameters,
    choice,
    flag,
    integer,
    real,
    text,
)

logger = logging.getLogger(__name__)

Prior = Literal["uniform", "num-examples"]
PRIORS: tuple[str, ...] = ("uniform", "num-examples")

#: An update with ‖g_i‖ at or below this is treated as zero and left out of the QP
#: (spec §7.2.5: 0/0 otherwise, and a zero vector in the hull forces d = 0).
NORM_FLOOR = 1e-12

#: Ridges tried in turn on the rescaled Gram (unit max diagonal) so that quadprog's
#: Cholesky factorisation succeeds on a singular K (spec §7.2.1).
RIDGES: tuple[float, ...] = (1e-12, 1e-10, 1e-8, 1e-6)

#: Name suffixes of state-dict buffers (BatchNorm statistics) that are not trainable:
#: they stay out of the norm, the Gram and the step (spec §1.5) and are averaged with λ0.
BUFFER_SUFFIXES: tuple[str, ...] = ("running_mean", "running_var", "num_batches_tracked")

#: β of the default schedule: η shrinks to 1/10 by round T = 2000, by a factor β every
#: 100 rounds (paper 001, Table 8, rows η_g = 1.0, decay 1/10; §6.1.5):
#: ``paper_decay_factor(0.1, 2000)``.
PAPER_DECAY_FACTOR = 0.1 ** (100 / 2000)

#: Box widths ``ub − lb`` at or below this fix the coordinate at λ0 (a tiny ε).
FIXED_WIDTH = 1e-9

QP_OPTIMAL = "optimal"
QP_PRIOR = "prior"
QP_SINGLE = "single-client"
QP_ZERO_GRAM = "zero-gram"
QP_FAILED = "failed-fallback-prior"
QP_NO_DIRECTION = "no-direction"


@dataclass(frozen=True)
class FedMGDAParameters(RuleParameters):
    """FedMGDA+'s hyperparameters (see :class:`FedMGDAPlus`)."""

    epsilon: float = real(1.0, key="fedmgda-epsilon", lower=0.0)
    global_lr: float = real(1.0, key="fedmgda-global-lr", lower=0.0, lower_open=True)
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
class FedAvgNParameters(RuleParameters):
    """FedAvg-n's hyperparameters: FedMGDA+'s step size schedule and prior (ε = 0)."""

    global_lr: float = real(1.0, key="fedmgda-global-lr", lower=0.0, lower_open=True)
    global_lr_decay: float = real(
        PAPER_DECAY_FACTOR, key="fedmgda-global-lr-decay", lower=0.0, lower_open=True, upper=1.0
    )
    decay_every: int = integer(100, key="fedmgda-decay-every", lower=1)
    prior: Prior = choice("uniform", PRIORS, key="fedmgda-prior")


@dataclass(frozen=True)
class MGDAProxParameters(RuleParameters):
    """MGDA-Prox's hyperparameters: FedMGDA+'s with μ > 0 of its own key (see :class:`MGDAProx`)."""

    proximal_mu: float = real(0.2, key="mgda-prox-mu", lower=0.0, lower_open=True)
    epsilon: float = real(1.0, key="fedmgda-epsilon", lower=0.0)
    global_lr: float = real(1.0, key="fedmgda-global-lr", lower=0.0, lower_open=True)
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
    """FedMGDA+ (paper 001, Algorithm 1) with the ε-constraint of eq. (25).

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
    global_lr_decay : float (default: :data:`PAPER_DECAY_FACTOR` = 0.8913)
        β, the factor η_t shrinks by every ``decay_every`` rounds, as the authors'
        ``--global_lr_decay`` (1: no decay). The paper's tables give instead the fraction
        "decay" η shrinks to by round T, with β = decay^{100/T}; convert with
        :func:`paper_decay_factor`. The default is decay 1/10 over T = 2000 rounds
        (see Notes); the first decay comes after round 100.
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
        Sampling settings of :class:`fairfl.strategies.base.FairStrategy`.

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
    * Defaults: paper 001, Table 8 (CIFAR-10 non-iid, b = 10, p = 0.1, T = 2000
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
      and bounds the magnitudes (:meth:`read_train_replies`), so a bad reply is still
      dropped with the reader's reason, at no extra pass.
    * Arrays whose name ends in ``running_mean``, ``running_var`` or
      ``num_batches_tracked`` are buffers: out of the norm and the QP, averaged with λ0
      (integer ones keep the global value). fairfl's model zoo has none.
    """

    #: The Gram pass reads every reply value; it checks them (see ``read_train_replies``).
    checks_array_values: ClassVar[bool] = True
    rule_name = "FedMGDA+"
    registry_name = "fedmgda"
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
        self._gram_cache: tuple[tuple[int, ...], NDArray[np.float64]] | None = None

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

    def read_train_replies(
        self, server_round: int, replies: Iterable[Message], layout: ModelLayout
    ) -> tuple[list[TrainReply], dict[int, str]]:
        """Validate as usual, checking the array values in the Gram pass.

        The reader skips its own pass over the values (:attr:`checks_array_values`):
        the Gram's diagonal ‖g_i‖² is NaN/Inf when a value is, and bounds every value by
        ``max|w_t| + ‖g_i‖``. Only a reply that fails this bound goes through
        :func:`fairfl.contract.check_array_values`, which names the reason exactly as
        the reader would. Buffers, outside the Gram, are checked directly. At ε = 0 the
        pass computes only the diagonal (:meth:`_update_products`).
        """
        accepted, dropped = super().read_train_replies(server_round, replies, layout)
        self._gram_cache = None
        if not accepted:
            return accepted, dropped
        assert self.current_arrays is not None  # set by configure_train; checked by caller
        global_arrays = [array_view(a) for a in self.current_arrays.values()]
        trainable = trainable_mask(layout.keys, global_arrays)
        products = self._update_products(global_arrays, [r.arrays for r in accepted], trainable)
        squared_norms = diagonal(products)
        peak = max(
            (max_abs(g) for g, m in zip(global_arrays, trainable, strict=True) if m), default=0
        )
        kept: list[int] = []
        for index, reply in enumerate(accepted):
            reason = self._value_problem(reply, layout.keys, trainable, squared_norms[index], peak)
            if reason is None:
                kept.append(index)
                continue
            logger.info("aggregate_train: dropped reply from node %d: %s", reply.node_id, reason)
            dropped[reply.node_id] = reason
        replies_kept = [accepted[i] for i in kept]
        self._gram_cache = (
            tuple(r.node_id for r in replies_kept),
            products[kept] if products.ndim == 1 else products[np.ix_(kept, kept)],
        )
        return replies_kept, dropped

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

    def _value_problem(
        self,
        reply: TrainReply,
        array_keys: Sequence[str],
        trainable: Sequence[bool],
        squared_norm: float,
        peak: float,
    ) -> str | None:
        """The reader's reason to reject the reply's values, or None (see above)."""
        bounded = math.isfinite(squared_norm) and (
            self.max_abs_weight is None
            or (peak + math.sqrt(squared_norm)) * (1 + GRAM_RTOL) <= self.max_abs_weight
        )
        try:
            for key, value, in_gram in zip(array_keys, reply.arrays, trainable, strict=True):
                if not (in_gram and bounded):
                    check_array_values(reply.node_id, key, value, self.max_abs_weight)
        except ReplyError as error:
            return f"{error.field} {error.reason}"
        if not math.isfinite(squared_norm):  # finite values whose squares overflow
            return "arrays: the update's squared norm overflows float64"
        return None

    def aggregate(
        self, server_round: int, global_arrays: list[NDArray[Any]], replies: list[TrainReply]
    ) -> tuple[list[NDArray[Any]], dict[str, Any]]:
        """Solve the round's min-norm QP and take the step ``w_t − η_t d_t``."""
        assert self.current_arrays is not None  # set by configure_train
        trainable = trainable_mask(list(self.current_arrays.keys()), global_arrays)
        local_arrays = [r.arrays for r in replies]
        prior_all = prior_weights([r.num_examples for r in replies], self.prior)
        step = step_size(server_round, self.global_lr, self.global_lr_decay, self.decay_every)
        cached, self._gram_cache = self._gram_cache, None
        if cached is not None and cached[0] == tuple(r.node_id for r in replies):
            products = cached[1]
        else:
            products = self._update_products(global_arrays, local_arrays, trainable)
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
    """FedAvg-n (paper 001, §6.1): FedMGDA+ with ε = 0, i.e. λ = λ0 on normalised updates.

    ``w_{t+1} = w_t − η_t Σ_i λ0_i g_i / ‖g_i‖``. Parameters as :class:`FedMGDAPlus`
    (ε and normalisation are fixed).
    """

    rule_name = "FedAvg-n"
    registry_name = "fedavg-n"
    Parameters = FedAvgNParameters
    fixed: ClassVar[dict[str, Any]] = {"epsilon": 0.0, "normalize": True}


class FedMGDAPlain(FedMGDAPlus):
    """The paper's FedMGDA (paper 001, §6.1): plain MGDA on unnormalised updates.

    ε = 1, no normalisation, η_t ≡ 1 (the authors' ``--normalize=0 --epsilon=1``).
    Named ``fedmgda-plain`` in the registry, where ``fedmgda`` is FedMGDA+.

    Parameters
    ----------
    **kwargs
        Sampling settings of :class:`fairfl.strategies.base.FairStrategy`.
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
    """MGDA-Prox (paper 001, §6.1): FedMGDA+ whose clients add a proximal term.

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


# --------------------------------------------------------------------------- the math


def check_qp_solver(name: str) -> None:
    """Raise ``ValueError`` unless ``name`` is an installed qpsolvers backend."""
    import qpsolvers  # here: it costs ~0.1 s, paid only by the rules that solve QPs

    if name not in qpsolvers.available_solvers:
        raise ValueError(
            f"qp_solver must be one of the installed qpsolvers backends "
            f"{sorted(qpsolvers.available_solvers)}, got {name!r}"
        )


def is_buffer_key(key: str) -> bool:
    """Whether a state-dict key names a non-trainable buffer (BatchNorm statistics)."""
    return key.endswith(BUFFER_SUFFIXES)


def trainable_mask(names: Sequence[str], arrays: Sequence[NDArray[Any]]) -> list[bool]:
    """Which arrays are trainable parameters: floating, and not named like a buffer."""
    return [
        bool(np.issubdtype(a.dtype, np.floating)) and not is_buffer_key(k)
        for k, a in zip(names, arrays, strict=True)
    ]


def prior_weights(num_examples: ArrayLike, prior: Prior) -> NDArray[np.float64]:
    """λ0 over the round's participants: uniform 1/n, or n_i / Σ n_j (paper 001, §3).

    Raises
    ------
    ValueError
        If ``prior`` is unknown, or the counts are empty or not positive.
    """
    counts = sample_weights(num_examples)  # validates the counts
    if prior == "uniform":
        return np.full(counts.size, 1.0 / counts.size)
    if prior == "num-examples":
        return counts
    raise ValueError(f"prior must be one of {list(PRIORS)}, got {prior!r}")


def step_size(server_round: int, global_lr: float, decay: float, decay_every: int = 100) -> float:
    """η_t = η_g · β^{⌊t / decay_every⌋} with t = server_round − 1 (paper 001, §6.1.5).

    Parameters
    ----------
    server_round : int
        Flower's round, from 1.
    global_lr : float
        η_g.
    decay : float
        β in (0, 1], the factor per period (1: constant step).
    decay_every : int
        Rounds per period (100 in the paper).

    Raises
    ------
    ValueError
        If ``server_round < 1``, ``global_lr <= 0``, β is outside (0, 1] or
        ``decay_every < 1``.
    """
    check_positive_int("server_round", server_round)
    check_real("global_lr", global_lr, lower=0.0, lower_open=True)
    check_real("decay", decay, lower=0.0, lower_open=True, upper=1.0)
    check_positive_int("decay_every", decay_every)
    return global_lr * decay ** ((server_round - 1) // decay_every)


def paper_decay_factor(decay: float, num_rounds: int, decay_every: int = 100) -> float:
    """β = decay^{decay_every / T}: the per-period factor of the paper's tables (§6.1.5).

    ``decay`` is the fraction η shrinks to by round T (tables' "decay 1/10"; their
    "decay 0" means no decay, i.e. ``decay = 1`` here, spec §7.1.1).

    Raises
    ------
    ValueError
        If ``decay`` is outside (0, 1] or a count is < 1.
    """
    check_real("decay", decay, lower=0.0, lower_open=True, upper=1.0)
    check_positive_int("num_rounds", num_rounds)
    check_positive_int("decay_every", decay_every)
    return float(decay ** (decay_every / num_rounds))


def normalize_gram(gram: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """K̄_ij = K_ij / (‖g_i‖ ‖g_j‖), the Gram of the ḡ_i; and the norms ‖g_i‖.

    Rows and columns of updates with norm <= :data:`NORM_FLOOR` are zero.
    """
    k = np.asarray(gram, dtype=np.float64)
    norms = np.sqrt(np.clip(np.diag(k), 0.0, None))
    inverse = np.where(norms > NORM_FLOOR, 1.0 / np.where(norms > NORM_FLOOR, norms, 1.0), 0.0)
    return k * inverse[:, None] * inverse[None, :], norms


def box_bounds(prior: ArrayLike, epsilon: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Bounds of Λ_ε: ``max(0, λ0 − ε) <= λ <= min(1, λ0 + ε)`` (paper 001, eq. (25))."""
    lam0 = np.asarray(prior, dtype=np.float64)
    return np.maximum(0.0, lam0 - epsilon), np.minimum(1.0, lam0 + epsilon)


def min_norm_weights(
    gram: ArrayLike,
    prior: ArrayLike,
    epsilon: float,
    *,
    solver: str = "quadprog",
) -> tuple[NDArray[np.float64], str]:
    """λ* = argmin λᵀKλ over λ ∈ Δ with ‖λ − λ0‖_∞ <= ε (paper 001, eqs. (23), (25)).

    Parameters
    ----------
    gram : ArrayLike
        K, a symmetric positive semi-definite (n, n) matrix (the Gram of ḡ_i, or of g_i
        for FedMGDA). Any positive scale: it is rescaled to unit maximum diagonal.
    prior : ArrayLike
        λ0 on the simplex (>= 0, summing to 1).
    epsilon : float
        ε >= 0.
    solver : str
        qpsolvers backend.

    Returns
    -------
    tuple[NDArray, str]
        λ (on the simplex and in the box: clipped to it and renormalised after the
        solver) and a status: ``"optimal"``; ``"prior"`` (ε = 0, or a box too
        narrow to leave a choice: λ = λ0 with no solve); ``"single-client"``;
        ``"zero-gram"`` (K = 0: every λ is optimal, λ0 is returned);
        ``"failed-fallback-prior"`` (the solver failed at every ridge of
        :data:`RIDGES`; λ = λ0).

    Raises
    ------
    ValueError
        If K is not a finite symmetric square matrix matching λ0, λ0 is not on the
        simplex, ε is negative or the solver is not installed.

    Notes
    -----
    When K is singular λ is not unique but d = Σ λ_i ḡ_i is; the ridge added for
    quadprog picks the λ of least norm (spec §1.9).
    """
    k = np.asarray(gram, dtype=np.float64)
    lam0 = np.asarray(prior, dtype=np.float64)
    epsilon = check_real("epsilon", epsilon, lower=0.0)
    check_qp_solver(solver)
    n = lam0.size
    if lam0.ndim != 1 or n == 0:
        raise ValueError(f"prior must be a non-empty 1-D vector, got shape {lam0.shape}")
    if k.shape != (n, n):
        raise ValueError(f"gram must have shape ({n}, {n}) to match prior, got {k.shape}")
    if not np.all(np.isfinite(k)) or not np.allclose(k, k.T, rtol=1e-10, atol=1e-12 * _scale(k)):
        raise ValueError("gram must be a finite symmetric matrix")
    if np.any(lam0 < 0) or not np.isclose(lam0.sum(), 1.0, rtol=0.0, atol=1e-9):
        raise ValueError(f"prior must be >= 0 and sum to 1, got {lam0.tolist()}")
    if n == 1:
        return np.ones(1), QP_SINGLE
    if epsilon == 0.0:
        return lam0.copy(), QP_PRIOR
    scale = float(np.max(np.diag(k)))
    if not scale > 0:
        return lam0.copy(), QP_ZERO_GRAM
    lower, upper = box_bounds(lam0, epsilon)
    # Coordinates whose box is (numerically) a point are fixed at λ0: quadprog fails
    # on such degenerate constraint sets, and they have nothing to choose.
    free = upper - lower > FIXED_WIDTH
    if np.count_nonzero(free) < 2:
        return lam0.copy(), QP_PRIOR
    import qpsolvers

    lam = lam0.copy()
    p = (k + k.T) / (2 * scale)
    p_free = p[np.ix_(free, free)]
    # λᵀPλ = λ_fᵀ P_ff λ_f + 2 λ_fᵀ P_fx λ0_x + const: qpsolvers' ½xᵀPx + qᵀx form.
    q_free = p[np.ix_(free, ~free)] @ lam0[~free]
    m = int(np.count_nonzero(free))
    # λ >= lb as rows -λ <= -lb; λ <= ub only where ub < 1 (Σλ = 1 and λ >= 0 imply
    # the rest): at ε = 1 that halves quadprog's constraints.
    capped = upper[free] < 1.0
    identity = np.eye(m)
    g_rows = np.vstack([-identity, identity[capped]])
    h_rows = np.concatenate([-lower[free], upper[free][capped]])
    for ridge in RIDGES:
        problem = qpsolvers.Problem(
            p_free + ridge * identity,
            q_free,
            G=g_rows,
            h=h_rows,
            A=np.ones((1, m)),
            b=np.array([lam0[free].sum()]),
        )
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                solution = qpsolvers.solve_problem(problem, solver=solver)
        except (qpsolvers.ProblemError, qpsolvers.SolverError, ValueError):
            continue
        if solution.found and solution.x is not None and np.all(np.isfinite(solution.x)):
            lam[free] = solution.x
            return project_to_box_simplex(lam, lower, upper), QP_OPTIMAL
    return lam0.copy(), QP_FAILED


def project_to_box_simplex(
    weights: ArrayLike, lower: ArrayLike, upper: ArrayLike, *, sweeps: int = 5
) -> NDArray[np.float64]:
    """Clip a solver's λ to its box and renormalise to sum 1 (a solver-accuracy fix).

    The solution is already feasible up to the solver's tolerance; clipping, then
    spreading the remaining mass over the coordinates with room, keeps it in the box.
    """
    lam = np.clip(np.asarray(weights, dtype=np.float64), lower, upper)
    lo = np.asarray(lower, dtype=np.float64)
    hi = np.asarray(upper, dtype=np.float64)
    for _ in range(sweeps):
        gap = 1.0 - lam.sum()
        if abs(gap) <= 1e-15:
            break
        room = (hi - lam) if gap > 0 else (lam - lo)
        if room.sum() <= 0:
            break
        lam = np.clip(lam + gap * room / room.sum(), lo, hi)
    return lam


def fedmgda_update(
    global_arrays: Sequence[NDArray[Any]],
    local_arrays: Sequence[Sequence[NDArray[Any]]],
    lambdas: ArrayLike,
    step: float,
    *,
    norms: ArrayLike | None = None,
    trainable: Sequence[bool] | None = None,
    buffer_weights: ArrayLike | None = None,
    measure: bool = False,
) -> tuple[list[NDArray[Any]], float]:
    """w_{t+1} = w_t − η_t Σ_i λ_i g_i / s_i, and optionally ‖w_{t+1} − w_t‖ (eq. (22)).

    This is the unified form ``w_t − Σ_i c_i (w_t − w_i)`` with ``c_i = η_t λ_i / s_i``
    (which need not sum to 1), applied to the trainable arrays as
    ``w_t + Σ_i c_i (w_i − w_t)`` in the blocks of
    :func:`~fairfl.strategies._ops.gram.gram_matrix`: float32 for
    float32 models (the differences exact or rounded once, then one float32
    matrix-vector product per block, each value summing n terms: a relative error of
    ~n · 2^-24 of the step, far below the float32 rounding of w_{t+1}); a block whose
    result is not finite is redone in float64. Wider floats are computed in float64.
    Buffers are averaged in float64 by
    :func:`fairfl.strategies.aggregation.reweighted_average`.

    Parameters
    ----------
    global_arrays, local_arrays
        w_t and the clients' w_i.
    lambdas : ArrayLike
        λ, one per client.
    step : float
        η_t.
    norms : ArrayLike | None
        s_i = ‖g_i‖ to normalise by (``None``: no normalisation, FedMGDA / FedAvg).
    trainable : Sequence[bool] | None
        Arrays the step applies to (default: the floating ones).
    buffer_weights : ArrayLike | None
        Weights averaging the non-trainable floating arrays (buffers); ``None`` keeps
        their global values. Non-floating arrays always keep the global value.
    measure : bool
        Also measure the step's length ``‖Σ_i c_i (w_i − w_t)‖`` over the trainable
        arrays (summed in float64 from the step's values before w_t is added);
        otherwise 0.0 is returned for it.

    Returns
    -------
    tuple[list[NDArray], float]
        The new model, each array in its original dtype; the step's length.

    Notes
    -----
    A client with ``c_i = 0`` adds nothing and is not read (MGDA's λ is often sparse).

    Raises
    ------
    ValueError
        If a norm is not > 0, a weight is not finite, or a client's arrays do not match
        ``global_arrays`` in number or shape.
    """
    lam = np.asarray(lambdas, dtype=np.float64)
    scales = np.ones_like(lam) if norms is None else np.asarray(norms, dtype=np.float64)
    if scales.shape != lam.shape or not np.all(scales > 0):
        raise ValueError(f"norms must be > 0, one per client, got {scales.tolist()}")
    if not np.all(np.isfinite(lam)) or lam.shape != (len(local_arrays),):
        raise ValueError(f"lambdas must be finite, one per client, got {lam.tolist()}")
    coefficients = step * lam / scales
    mask = float_mask(global_arrays, trainable)
    check_shapes(global_arrays, local_arrays)
    active = np.flatnonzero(coefficients)
    stepped, squared_length = difference_step(
        global_arrays,
        [local_arrays[int(i)] for i in active],
        coefficients[active],
        mask,
        measure=measure,
    )
    new_arrays = [
        stepped[i] if m else np.array(array, copy=True)
        for i, (array, m) in enumerate(zip(global_arrays, mask, strict=True))
    ]
    buffers = [i for i, m in enumerate(mask) if not m]
    if buffer_weights is not None and buffers:
        averaged = reweighted_average(
            [global_arrays[i] for i in buffers],
            [[local[i] for i in buffers] for local in local_arrays],
            np.asarray(buffer_weights, dtype=np.float64),
        )
        for i, value in zip(buffers, averaged, strict=True):
            new_arrays[i] = value
    return new_arrays, math.sqrt(squared_length)


def _scale(k: NDArray[np.float64]) -> float:
    return float(np.max(np.abs(k))) if k.size else 1.0
