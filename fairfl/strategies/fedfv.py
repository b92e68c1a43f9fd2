"""FedFV: federated fair averaging, projecting conflicting client gradients before averaging.

Wang, Fan, Qi, Wen, Wang and Yu, *Federated Learning with Fair Averaging*, IJCAI 2021,
https://arxiv.org/abs/2104.14937. The paper's text was not available; the steps are those
of the official code (``method/fedfv.py`` on the ``easyFL_v1.0`` branch of
``WwZzz/easyFL``, which holds the paper's experiment records; today
``flgo/algorithm/fedfv.py``, commit ``ea07f1d``), numbered as in ``docs/specs/spec-fedfv.md``.
With g_i = w^t - w_i and the clients in ascending order of their loss F_i(w^t)::

    K = order[⌈(m - 1)(1 - α)⌉:]   (α > 0; the highest losses keep their gradient)   (F1)
    g_i ← g_i - (g_j · g_i / ‖g_j‖²) g_j   for j in order, when g_j · g_i < 0, i ∉ K  (F2)
    g' = (1/m) Σ_i g_i                                                             (F3)
    g' ← g' - (g' · g_con / ‖g_con‖²) g_con,  g_con = Σ of the gradients remembered
         from one window round that conflict with g', oldest window round first     (F4, F5)
    g^t = g' ‖(1/m) Σ_i g_i‖ / ‖g'‖ (original g_i),   w^{t+1} = w^t - g^t          (F6, F7)

The window of F4 (``history``): ``"experiments"`` (default), rounds t - τ, ..., t - 1 from
round τ + 1 on, so only clients absent from round t, as the code the paper's experiments
ran (the first upload and ``easyFL_v1.0``; its rounds count from 0 and it corrects from
t >= τ); ``"flgo"``, rounds t - τ + 1, ..., t from round τ on, this round's clients
included, as easyFL since its August 2021 refactor and FLGo.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, ClassVar, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fairfl.contract import TrainReply, sorted_client_keys
from fairfl.secagg.forms import SecureForm
from fairfl.strategies._ops.gram import GRAM_RTOL, float_mask, gram_matrix
from fairfl.strategies._ops.passes import reweighted_sum
from fairfl.strategies.core import intake
from fairfl.strategies.core._checks import check_real
from fairfl.strategies.core.base import Aggregate, FairStrategy, RejectedReplies
from fairfl.strategies.core.params import RuleParameters, choice, integer, real

logger = logging.getLogger(__name__)

#: Which past rounds the external correction (F4-F5) reads.
History = Literal["experiments", "flgo"]
HISTORIES: tuple[History, ...] = ("experiments", "flgo")

#: g' counts as cancelled when ‖g'‖ <= this share of (1/m) Σ_i ‖g_i‖, the longest g' can
#: be (projections never lengthen a vector). Float64 rounding leaves ~1e-16 of it where
#: the projections cancel g' exactly; the reference would rescale that noise to the plain
#: average's norm, a direction set by rounding alone.
CANCELLED_SHARE = 1e-6
#: Bound on the relative error of a float64 Gram entry (BLAS sums of up to ~1e6 terms,
#: well inside n·2^-53); float32 models use the float32 blocks' :data:`GRAM_RTOL`.
FLOAT64_GRAM_RTOL = 1e-9


@dataclass(frozen=True)
class FedFVParameters(RuleParameters):
    """FedFV's hyperparameters: α, τ and the history window (see :class:`FedFV`)."""

    alpha: float = real(0.1, key="fedfv-alpha", lower=0.0, upper=1.0)
    tau: int = integer(1, key="fedfv-tau", lower=0)
    history: History = choice("experiments", HISTORIES, key="fedfv-history")


class FedFV(FairStrategy):
    """Federated fair averaging: conflicting gradients projected in order of loss.

    Each client reports F_k(w^t), the loss of the received model measured before local
    training, under ``train_loss_key`` (default ``loss-before-training``). The server
    takes g_k = w^t - w_k over the floating-point arrays as one vector, computes
    :func:`fedfv_direction` and sets w^{t+1} = w^t - g^t (spec-fedfv F7; no server
    learning rate, as the official code).

    Parameters
    ----------
    alpha : float (default: 0.1)
        α in [0, 1]: the share of highest-loss clients whose gradients are not projected
        (the official code's default; K of F1).
    tau : int (default: 1)
        τ >= 0: how many past rounds of remembered gradients correct the average
        (F4-F5); 0 switches the correction off.
    history : {"experiments", "flgo"} (default: "experiments")
        The rounds the correction reads (:func:`window_rounds`). ``"experiments"``:
        t - τ, ..., t - 1 from round τ + 1 on, each client's latest gradient, so only
        clients absent from round t: the code the paper's experiments ran
        (``easyFL_v1.0``). ``"flgo"``: t - τ + 1, ..., t from round τ on, this round's
        own gradients included: easyFL after its August 2021 refactor, and FLGo.
    **kwargs
        Sampling settings of :class:`fairfl.strategies.core.base.FairStrategy`.

    Raises
    ------
    ValueError
        If ``alpha`` is not a finite number in [0, 1], ``tau`` not an int >= 0 or
        ``history`` not one of the two.

    Notes
    -----
    * The averages are uniform (the code's ``_model_average``): n_k is not used.
    * Where the window reads past rounds (τ >= 1 with ``"experiments"``, τ >= 2 with
      ``"flgo"``) the server remembers each client's latest g_k (float64) and its round,
      by client key, for the rounds a later correction can read; they are checkpointed.
      Otherwise (τ = 0, or τ = 1 with ``"flgo"``, whose window is the round's own
      gradients) nothing is remembered, and F1-F6 run on the Gram of the replies
      (float32 blocks summed in float64 for float32 models) with one weighted pass for
      w^{t+1}: no (m, d) float64 copy. The result equals the float64 formulation within
      float32 rounding of the Gram (model within half a float32 ulp + 1e-9 in
      ``tests/strategies/test_fedfv.py``).
    * Arrays that are not floating point (counters) keep the global value.
    * A cancelled direction, for every τ and window: where ‖g'‖ <= 1e-6 · (1/m) Σ_i ‖g_i‖
      (:data:`CANCELLED_SHARE`; the reference divides by ‖g'‖, 0 or rounding noise there)
      the round keeps w^t and reports ``fedfv-zero-direction`` = 1. Where the Gram's
      rounding cannot tell (‖g'‖² within its error bound of that threshold) the round is
      computed from float64 gradients instead.
    * A reply's values (NaN/Inf, ``max_abs_weight``) are checked from ‖g_k‖², the
      Gram's diagonal or the gradient's norm, not by a pass of the reader's
      (:func:`~fairfl.strategies.core.intake.update_value_errors`); a bad reply is dropped
      and the round aggregated without it.
    * Diagnostics: ``fedfv-projections`` (F2), ``fedfv-external-projections`` (F5),
      ``fedfv-kept`` (``|K|``).
    """

    needs_loss = True
    #: The Gram or the gradients read every value: they check them.
    checks_array_values: ClassVar[bool] = True
    rule_name = "FedFV"
    registry_name = "fedfv"
    #: The rule under SecAgg+ (issue #48; :mod:`fairfl.strategies.secure`).
    secure_form = SecureForm.impossible(
        "it projects each update onto the others it conflicts with, which needs each "
        "client's update"
    )
    Parameters = FedFVParameters
    params: FedFVParameters

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: Client key -> (round last seen, its g_k as float64), for the window of F4.
        self.history: dict[str, tuple[int, NDArray[np.float64]]] = {}

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state: each remembered client's round and g_k, by client key."""
        return {
            "history": {
                key: {"round": self.history[key][0], "gradient": self.history[key][1].tolist()}
                for key in sorted_client_keys(self.history)
            }
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output; ``{}`` forgets every client."""
        self.history = {
            str(key): (int(entry["round"]), np.asarray(entry["gradient"], dtype=np.float64))
            for key, entry in state.get("history", {}).items()
        }

    def aggregate(
        self, server_round: int, global_arrays: list[NDArray[Any]], replies: list[TrainReply]
    ) -> Aggregate | RejectedReplies:
        """w^{t+1} = w^t - g^t with g^t of :func:`fedfv_direction` (spec-fedfv F1-F7)."""
        reads_past = self.params.tau >= (1 if self.params.history == "experiments" else 2)
        stepped = None
        if not reads_past:
            stepped = self._aggregate_in_span(global_arrays, replies)
        if stepped is None:  # a past window, or a Gram too coarse to tell a cancelled g'
            stepped = self._aggregate_with_history(server_round, global_arrays, replies)
        if isinstance(stepped, RejectedReplies):
            return stepped
        new_arrays, step = stepped
        if step.zero_direction:
            logger.warning(
                "aggregate_train: round %d: the projected gradients cancel (‖g'‖ <= %g of "
                "the mean ‖g_k‖); keeping the previous global model",
                server_round,
                CANCELLED_SHARE,
            )
        return new_arrays, {
            "fedfv-projections": step.projections,
            "fedfv-external-projections": step.external_projections,
            "fedfv-kept": step.kept,
            "fedfv-zero-direction": int(step.zero_direction),
        }

    def _check_values(
        self,
        replies: list[TrainReply],
        global_arrays: list[NDArray[Any]],
        squared_norms: NDArray[np.float64],
    ) -> RejectedReplies | None:
        """The replies with a bad value, if any.

        ``squared_norms`` are ‖g_k‖² over the floating arrays
        (:func:`~fairfl.strategies.core.intake.update_value_errors`).
        """
        assert self.current_arrays is not None  # set by configure_train
        errors = intake.update_value_errors(
            replies,
            list(self.current_arrays.keys()),
            global_arrays,
            float_mask(global_arrays, None),
            squared_norms,
            self.max_abs_weight,
        )
        return RejectedReplies(errors) if errors else None

    def _aggregate_in_span(
        self, global_arrays: list[NDArray[Any]], replies: list[TrainReply]
    ) -> tuple[list[NDArray[Any]], FedFVStep] | RejectedReplies | None:
        """τ = 0, or τ = 1 with ``"flgo"``: F1-F6 from the Gram of the replies alone.

        The window is empty or the round's own gradients, so every dot of F2 and F4-F5
        is a product of coefficients with the Gram K = g gᵀ (:func:`gram_matrix`: float32
        blocks summed in float64 for float32 models, float64 blocks otherwise), and
        w^{t+1} = w^t - Σ_i c_i g_i is one weighted pass over the replies
        (:func:`reweighted_sum`). Nothing is remembered (the next round reads no window).
        ``None`` where the Gram's rounding cannot tell whether g' is cancelled.
        """
        local_arrays = [reply.arrays for reply in replies]
        gram = gram_matrix(global_arrays, local_arrays)
        rejected = self._check_values(replies, global_arrays, np.diag(gram))
        if rejected is not None:
            return rejected
        windows = [np.arange(len(replies))] if self.params.tau == 1 else []
        floating = [a for a in global_arrays if np.issubdtype(a.dtype, np.floating)]
        wide = all(a.dtype == np.float64 for a in floating)
        spanned = _span_step(
            gram,
            self.losses_of(replies),
            self.params.alpha,
            windows,
            gram_rtol=FLOAT64_GRAM_RTOL if wide else GRAM_RTOL,
        )
        if spanned is None:
            return None
        coefficients, step = spanned
        self.state_updates.set(self, history={})
        if step.zero_direction:
            return [a.copy() for a in global_arrays], step
        return reweighted_sum(global_arrays, local_arrays, coefficients, None), step

    def _aggregate_with_history(
        self, server_round: int, global_arrays: list[NDArray[Any]], replies: list[TrainReply]
    ) -> tuple[list[NDArray[Any]], FedFVStep] | RejectedReplies:
        """F1-F7 on float64 gradients, the window read from the remembered g_k."""
        floating = [i for i, a in enumerate(global_arrays) if np.issubdtype(a.dtype, np.floating)]
        local = [[r.arrays[i] for i in floating] for r in replies]
        current, gradients = _flat_differences([global_arrays[i] for i in floating], local)
        squared_norms = np.einsum("ij,ij->i", gradients, gradients)
        rejected = self._check_values(replies, global_arrays, squared_norms)
        if rejected is not None:
            return rejected
        history = dict(self.history)
        for reply, gradient in zip(replies, gradients, strict=True):
            history[self.client_key(reply)] = (server_round, gradient)
        tau, window = self.params.tau, self.params.history
        ordered = sorted_client_keys(history)
        windows = []
        for past in window_rounds(server_round, tau, window):  # F4, oldest first
            seen = [history[c][1] for c in ordered if history[c][0] == past]
            windows.append(np.reshape(seen, (len(seen), current.size)))
        step = fedfv_direction(gradients, self.losses_of(replies), self.params.alpha, windows)
        # Forget what no later window reads: before the next round's first window round.
        first_read = server_round + 1 - tau + (1 if window == "flgo" else 0)
        reads_past = tau >= (1 if window == "experiments" else 2)
        kept = {c: e for c, e in history.items() if reads_past and e[0] >= first_read}
        self.state_updates.set(self, history=kept)
        new_arrays = [a if i in floating else a.copy() for i, a in enumerate(global_arrays)]
        offset = 0
        for i in floating:
            size = global_arrays[i].size
            part = step.direction[offset : offset + size].reshape(global_arrays[i].shape)
            new_arrays[i] = (global_arrays[i].astype(np.float64) - part).astype(
                global_arrays[i].dtype
            )
            offset += size
        return new_arrays, step


def window_rounds(server_round: int, tau: int, history: History) -> list[int]:
    """The rounds whose clients' latest gradients F4 reads in round t, oldest first.

    ``"experiments"``: t - τ, ..., t - 1, once t > τ (``easyFL_v1.0`` counts rounds from
    0 and corrects from its t >= τ, Flower's round τ + 1). A client of round t was last
    seen in round t, so only clients absent from this round are read. ``"flgo"``:
    t - τ + 1, ..., t once t >= τ (FLGo counts from 1, as Flower), this round's clients
    included. Empty for τ = 0.
    """
    if history == "experiments":
        return list(range(server_round - tau, server_round)) if server_round > tau else []
    return list(range(server_round - tau + 1, server_round + 1)) if server_round >= tau else []


@dataclass(frozen=True)
class FedFVStep:
    """FedFV's direction g^t and what it did to get there.

    Attributes
    ----------
    direction : NDArray[np.float64]
        g^t (F6); the new model is w^t - g^t. Zeros where g' vanished.
    projections : int
        Internal projections made (F2).
    external_projections : int
        External corrections made (F5), at most one per window round.
    kept : int
        ``|K|``, the gradients left as they were (F1).
    zero_direction : bool
        Whether the projections cancelled g' (‖g'‖ = 0; the reference divides by it).
    """

    direction: NDArray[np.float64]
    projections: int
    external_projections: int
    kept: int
    zero_direction: bool


def kept_clients(order: Sequence[int], alpha: float) -> list[int]:
    """K of F1: the clients whose gradients are not projected, as the official code takes them.

    ``order[ceil((m - 1) * (1 - α)):]`` for α > 0 (computed in floating point exactly as
    there; it keeps at least one client), none for α = 0. ``order`` is ascending in loss.
    """
    if alpha <= 0:
        return []
    return list(order[math.ceil((len(order) - 1) * (1 - alpha)) :])


def fedfv_direction(
    gradients: ArrayLike,
    losses: ArrayLike,
    alpha: float,
    windows: Sequence[ArrayLike] = (),
) -> FedFVStep:
    """FedFV's step g^t from the round's pseudo-gradients (spec-fedfv F1-F6).

    Parameters
    ----------
    gradients : ArrayLike
        g_i = w^t - w_i, shape (m, d), in the replies' order (client-key order in fairfl).
    losses : ArrayLike
        F_i(w^t), shape (m,), finite; sorted ascending with ties in the given order (a
        stable sort, as Python's ``sorted`` in the reference).
    alpha : float
        α in [0, 1]: the share of highest-loss clients whose gradients are kept.
    windows : Sequence[ArrayLike] (default: ())
        For F4-F5: the remembered gradients of the clients last seen in each window round
        (:func:`window_rounds`), oldest round first, each of shape (k, d). Empty for
        τ = 0 or before the window's first round.

    Returns
    -------
    FedFVStep
        g^t and the counts of what the steps did. Where g' is cancelled,
        ‖g'‖ <= :data:`CANCELLED_SHARE` · (1/m) Σ_i ‖g_i‖ (the longest g' can be:
        projections never lengthen a vector), g^t = 0 and ``zero_direction`` is set;
        the reference divides by ‖g'‖ there, rescaling 0 or rounding noise.

    Raises
    ------
    ValueError
        If ``gradients`` is not a non-empty (m, d) array of finite numbers, ``losses`` not
        m finite numbers, a window not (k, d) finite, or ``alpha`` not in [0, 1].
    """
    grads = np.asarray(gradients, dtype=np.float64)
    f = np.asarray(losses, dtype=np.float64)
    if grads.ndim != 2 or grads.shape[0] == 0 or f.shape != (grads.shape[0],):
        raise ValueError(
            f"gradients must be (m, d) and losses (m,) with m >= 1, got {grads.shape} and {f.shape}"
        )
    if not (np.all(np.isfinite(grads)) and np.all(np.isfinite(f))):
        raise ValueError("gradients and losses must be finite")
    alpha = check_real("alpha", alpha, lower=0.0, upper=1.0)
    remembered = [np.asarray(w, dtype=np.float64).reshape(-1, grads.shape[1]) for w in windows]
    if not all(np.all(np.isfinite(w)) for w in remembered):
        raise ValueError("the remembered gradients must be finite")

    order = [int(i) for i in np.argsort(f, kind="stable")]
    kept = set(kept_clients(order, alpha))  # F1
    # F2 works in the span of the originals: g_i^PC = Σ_k C[i, k] g_k, so every dot
    # g_j · g_i^PC is C[i] · G[j] with the Gram G = g gᵀ. One BLAS product of m² d and
    # m³ scalar steps replace m² passes over d (50 x 200k float64: 3.9 s -> 0.08 s CPU).
    gram = grads @ grads.T
    coefficients, projections = _project(gram, order, kept)
    direction = coefficients.mean(axis=0) @ grads  # F3

    external = 0
    for window in remembered:  # F4-F5, oldest window round first
        conflicting = window[window @ direction < 0]
        if conflicting.shape[0] == 0:
            continue
        g_con = conflicting.sum(axis=0)
        dot = float(direction @ g_con)
        if dot < 0:
            direction = direction - g_con * (dot / float(g_con @ g_con))
            external += 1

    norm = float(np.linalg.norm(direction))
    longest = float(np.sqrt(np.maximum(np.diag(gram), 0.0)).mean())
    if norm <= CANCELLED_SHARE * longest:
        return FedFVStep(np.zeros_like(direction), projections, external, len(kept), True)
    share = np.full(grads.shape[0], 1.0 / grads.shape[0])
    target = float(np.sqrt(max(share @ gram @ share, 0.0)))  # F6: ‖mean g‖
    return FedFVStep(direction * (target / norm), projections, external, len(kept), False)


def _project(
    gram: NDArray[np.float64], order: Sequence[int], kept: set[int]
) -> tuple[NDArray[np.float64], int]:
    """F2 in the span of the originals: C with g_i^PC = Σ_k C[i, k] g_k, and the count.

    Every dot g_j · g_i^PC is C[i] · K[j] with the Gram K = g gᵀ: m³ scalar steps
    replace m² passes over d.
    """
    coefficients = np.eye(gram.shape[0])
    projections = 0
    for i in range(len(order)):
        if i in kept:
            continue
        for j in order:  # F2, against the original g_j
            if j == i:
                continue
            dot = float(coefficients[i] @ gram[j])
            if dot < 0:
                coefficients[i, j] -= dot / gram[j, j]
                projections += 1
    return coefficients, projections


def _span_step(
    gram: NDArray[np.float64],
    losses: ArrayLike,
    alpha: float,
    windows: Sequence[NDArray[np.intp]],
    *,
    gram_rtol: float,
) -> tuple[NDArray[np.float64], FedFVStep] | None:
    """F1-F6 in coefficients: g^t = Σ_i c_i g_i, from the Gram K = g gᵀ alone.

    As :func:`fedfv_direction` where every window holds some of the round's own
    gradients (``windows``: their indices, in client-key order): g' = c · g, its dot
    with g_j is (K c)_j, g_con = Σ_{j ∈ S} g_j adds -dot / (1_S K 1_S) on S (F5), and
    ‖g'‖² = c K c (F6). Returns c (zeros where g' is cancelled, the rule of
    :func:`fedfv_direction`) and the step, whose ``direction`` is empty (the caller sums
    Σ_i c_i g_i itself); ``None`` where K's rounding (entries within ``gram_rtol`` of
    ‖g_i‖ ‖g_j‖) leaves c K c on both sides of the cancellation threshold.
    """
    f = np.asarray(losses, dtype=np.float64)
    if not (np.all(np.isfinite(gram)) and np.all(np.isfinite(f))):
        raise ValueError("gradients and losses must be finite")
    m = gram.shape[0]
    order = [int(i) for i in np.argsort(f, kind="stable")]
    kept = set(kept_clients(order, alpha))  # F1
    coefficients, projections = _project(gram, order, kept)
    c = coefficients.mean(axis=0)  # F3
    external = 0
    for window in windows:  # F4-F5
        dots = gram[window] @ c
        conflicting = window[dots < 0]
        if conflicting.size == 0:
            continue
        dot = float(dots[dots < 0].sum())
        if dot < 0:
            c = c.copy()
            c[conflicting] -= dot / float(gram[np.ix_(conflicting, conflicting)].sum())
            external += 1
    squared_norm = float(c @ gram @ c)
    norms = np.sqrt(np.maximum(np.diag(gram), 0.0))
    threshold = (CANCELLED_SHARE * float(norms.mean())) ** 2
    # |c K c - c K_exact c| <= gram_rtol (Σ_i |c_i| ‖g_i‖)²: undecided within that.
    error = gram_rtol * float(np.abs(c) @ norms) ** 2
    if abs(squared_norm - threshold) <= error:
        return None
    empty = np.zeros(0)
    if squared_norm < threshold:
        return np.zeros(m), FedFVStep(empty, projections, external, len(kept), True)
    share = np.full(m, 1.0 / m)
    target = float(np.sqrt(max(share @ gram @ share, 0.0)))  # F6: ‖mean g‖
    return c * (target / math.sqrt(squared_norm)), FedFVStep(
        empty, projections, external, len(kept), False
    )


def _flat_differences(
    global_arrays: Sequence[NDArray[Any]], local_arrays: Sequence[Sequence[NDArray[Any]]]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """w^t as one float64 vector and the rows w^t - w_k, filled in place (no copies to stack)."""
    ends = np.cumsum([0, *(a.size for a in global_arrays)])
    current = np.empty(int(ends[-1]), dtype=np.float64)
    gradients = np.empty((len(local_arrays), current.size), dtype=np.float64)
    for j, (start, end) in enumerate(pairwise(ends)):
        current[start:end] = global_arrays[j].reshape(-1)
        for row, arrays in zip(gradients, local_arrays, strict=True):
            np.subtract(current[start:end], arrays[j].reshape(-1), out=row[start:end])
    return current, gradients
