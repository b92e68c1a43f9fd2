"""How a rule runs under secure aggregation: its form, and the client's part of it.

Under SecAgg+ the server learns ``Σ_k a_k u_k`` and ``Σ_k a_k`` only: each client masks a
weight a_k and a payload u_k (the spec's table, ``docs/specs/spec-secure-aggregation.md``),
and the new global model is ``w^{t+1} = w^t + s Σ_k a_k u_k / Σ_k a_k`` with s the
rule's step scale (1 unless the server's weights do not sum to 1). A rule declares one
:class:`SecureForm` beside its parameters; :func:`client_part` is what a client computes
from its update ``Δ_k = w_k - w^t`` and the scalars the server sends (its n_k and F_k as
the rule read them, public constants, or its weight).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from fairfl.contract.qffl import QFFL_EPSILON, h_term, lipschitz_estimate
from fairfl.secagg.fairfed import fairness_gap, moved_weight
from fairfl.secagg.protocol import weight_ratio

__all__ = [
    "ACCURACY_TOTAL",
    "COUNT",
    "EXCESS",
    "FAIRFED_BETA",
    "FAIRFED_HELD",
    "FAIRFED_MEAN_GAP",
    "FAIRFED_METRIC",
    "FAIRFED_PREVIOUS",
    "FAIRFED_TOTAL_COUNTS",
    "FAIRFED_WEIGHT",
    "FAIRFED_WEIGHT_TOTAL",
    "FEDFA_BETA",
    "FEDFA_INFORMATION_MAX",
    "FORM_KINDS",
    "FREQUENCY_SHARE",
    "INFORMATION_TOTAL",
    "LOSS",
    "MEAN_LOSS",
    "NUM_EXAMPLES",
    "PRIVATE_BOUND",
    "PRIVATE_KEY",
    "QFFL_BY_SIZE",
    "QFFL_LIPSCHITZ",
    "QFFL_Q",
    "SCALAR_STAGES",
    "SEMIVRED_BETA",
    "SEMIVRED_CLIP",
    "SHARE",
    "SIGNED_WEIGHTS",
    "TERM_ALPHA",
    "TERM_SHIFT",
    "WEIGHT",
    "WEIGHTS",
    "WEIGHT_KIND",
    "WEIGHT_SCALE",
    "FormKind",
    "SecureForm",
    "WeightKind",
    "client_part",
    "fairfed_weight",
    "held_after",
    "restarted_held",
    "weight_magnitude",
]

FormKind = Literal["one-round", "scalars-in-clear", "two-rounds", "impossible"]
#: The forms of the issue (#48): all but ``impossible`` run under fairfl's SecAgg+.
FORM_KINDS: tuple[FormKind, ...] = ("one-round", "scalars-in-clear", "two-rounds", "impossible")
WeightKind = Literal[
    "num-examples", "qffl", "qfedsgd", "term", "broadcast", "semivred", "fedfa", "fairfed"
]
#: The client weights :func:`client_part` computes.
WEIGHTS: tuple[WeightKind, ...] = (
    "num-examples",
    "qffl",
    "qfedsgd",
    "term",
    "broadcast",
    "semivred",
    "fedfa",
    "fairfed",
)
#: The parts of a two-round form's secure sums of scalars (before its weighted sum):
#: the client masks a vector of its private scalars, with the weight a_max.
SCALAR_STAGES = (
    "semivred-mean",
    "semivred-excess",
    "fedfa-accuracy",
    "fedfa-information",
    "fairfed-counts",
    "fairfed-gaps",
)
#: The weights that may be negative (VRed's broadcast λ_k, Semi-VRed's eq. 12 above the
#: round's β_max): masked as they are, the modular sum keeping their sign.
SIGNED_WEIGHTS: tuple[WeightKind, ...] = ("broadcast", "semivred")

#: Keys of the client part's ConfigRecord (server -> client, collect stage).
WEIGHT_KIND = "weight-kind"
WEIGHT = "weight"  # broadcast: the client's weight λ_k
WEIGHT_SCALE = "weight-scale"  # a public factor on n_k (num-examples, term), so a_k <= a_max
NUM_EXAMPLES = "num-examples"  # n_k as the rule weighs it (after the server's count defences)
LOSS = "loss"  # F_k(w^t) as the rule reads it (after the server's loss defences)
QFFL_Q = "qffl-q"
QFFL_LIPSCHITZ = "qffl-lipschitz"
QFFL_BY_SIZE = "qffl-by-size"
TERM_ALPHA = "term-alpha"
TERM_SHIFT = "term-shift"
SHARE = "share"  # σ n_k: the client's public share of a scalar sum (n_k are clear)
PRIVATE_KEY = "private-key"  # the train metric the client kept (F_k(w^t), Acc_k)
PRIVATE_BOUND = "private-bound"  # its range's top: it must lie in [0, bound]
MEAN_LOSS = "mean-loss"  # f̄ = Σ p_k F_k, the first sum's public statistic
EXCESS = "excess"  # A = Σ p_k (F_k - f̄)_+, the second's
SEMIVRED_BETA = "semivred-beta"
SEMIVRED_CLIP = "semivred-clip-negative"
ACCURACY_TOTAL = "accuracy-total"  # Σ Acc_k, FedFa's first sum
INFORMATION_TOTAL = "information-total"  # Σ I^acc_k, its second
COUNT = "count"  # m, the clients in FedFa's first sum (equal shares if Σ Acc_k = 0)
FEDFA_BETA = "fedfa-beta"
FREQUENCY_SHARE = "frequency-share"  # I^f_k / Σ I^f_j, from the server's own counts
FAIRFED_PREVIOUS = "fairfed-previous"  # ω_k^0 = n_k / n (FF5), for a client holding no ω_k
FAIRFED_TOTAL_COUNTS = "fairfed-total-counts"  # the summed group counts (FF3), exact
FAIRFED_METRIC = "fairfed-metric"
FAIRFED_WEIGHT_TOTAL = "fairfed-weight-total"  # Σ ω_k^{t-1}, FairFed's first sum
FAIRFED_MEAN_GAP = "fairfed-mean-gap"  # mean Δ, its second
FAIRFED_BETA = "fairfed-beta"
FAIRFED_WEIGHT = "fairfed-weight"  # the ω̄_k a client keeps (client.HELD) for its next round
FAIRFED_HELD = "fairfed-held"  # whether the server counts the client as holding ω_k
#: -log2(1e-6): the largest I^acc_k (FedFa's F2), the public scale of its second sum.
FEDFA_INFORMATION_MAX = -math.log2(1e-6)


@dataclass(frozen=True)
class SecureForm:
    """A rule's form under secure aggregation (issue #48, spec table).

    Attributes
    ----------
    kind : FormKind
        ``"one-round"``: each client computes its own weight from its scalars (and
        public constants); ``"scalars-in-clear"``: the server computes each client's
        weight from what the clients report in the clear (losses, counts) and sends it;
        ``"two-rounds"``: secure sums of the clients' private scalars come first, the
        server broadcasts their public statistics, and each client computes its own
        weight from them (:data:`SCALAR_STAGES`);
        ``"impossible"``: the rule reads each update (a Gram matrix, projections).
    reason : str
        Why, in one sentence: what the server still sees, or why it cannot run.
    weight : WeightKind | None
        The client weight :func:`client_part` computes (``None`` where not supported).
    """

    kind: FormKind
    reason: str
    weight: WeightKind | None = None

    def __post_init__(self) -> None:
        """Check that a supported form names its weight, and only then."""
        if self.kind not in FORM_KINDS:
            raise ValueError(f"SecureForm kind must be one of {FORM_KINDS}, got {self.kind!r}")
        if self.supported != (self.weight is not None):
            needs = "needs a weight" if self.supported else "takes no weight"
            raise ValueError(f"SecureForm {self.kind!r} {needs}")
        if self.weight is not None and self.weight not in WEIGHTS:
            raise ValueError(f"SecureForm weight must be one of {WEIGHTS}, got {self.weight!r}")

    @property
    def supported(self) -> bool:
        """Whether fairfl's SecAgg+ runs the rule."""
        return self.kind in ("one-round", "scalars-in-clear", "two-rounds")

    @classmethod
    def two_rounds(cls, weight: WeightKind, reason: str) -> SecureForm:
        """A rule whose clients compute their weight from securely summed statistics."""
        return cls("two-rounds", reason, weight)

    @classmethod
    def one_round(cls, weight: WeightKind, reason: str) -> SecureForm:
        """A rule whose clients compute their own weight."""
        return cls("one-round", reason, weight)

    @classmethod
    def scalars_in_clear(cls, reason: str) -> SecureForm:
        """A rule whose server computes each weight from clear scalars and sends it."""
        return cls("scalars-in-clear", reason, "broadcast")

    @classmethod
    def impossible(cls, reason: str) -> SecureForm:
        """A rule that needs each client's update."""
        return cls("impossible", reason)


def client_part(
    part: Mapping[str, Any],
    update: list[NDArray[np.float64]],
    private: Mapping[str, Any] | None = None,
) -> tuple[float, list[NDArray[Any]]]:
    """The weight a_k and payload u_k one client masks (spec table).

    The server sends back the n_k and F_k(w^t) the rule read from the client's clear
    reply (``num-examples``, ``loss``), after its defences (registered counts,
    ``num-examples-clip``, ``loss-clip-mad``), so that the weight is the rule's; only what
    depends on the update (q-FFL's h_k) is the client's alone.

    ``num-examples`` (FedAvg): ``a_k = σ n_k``, ``u_k = Δ_k``, with σ the public scale the
    server sends (``a_max / max_j n_j``: the counts are reported in the clear); a common
    factor of every a_k leaves ``Σ a_k u_k / Σ a_k`` unchanged.

    ``qffl`` (q-FedAvg, Li et al., ICLR 2020, Algorithm 2 l. 6-8): with
    ``Δw_k = L (w^t - w̄_k) = -L Δ_k``, ``Δ_k^q = (F_k + ε)^q Δw_k`` and
    ``h_k = q (F_k + ε)^{q-1} ‖Δw_k‖² + L (F_k + ε)^q``, ``a_k = s_k h_k`` and
    ``u_k = -Δ_k^q / h_k``: the sum gives ``w^t - Σ s_k Δ_k^q / Σ s_k h_k``
    (s_k = 1, or n_k for the ``"p"`` weighting). ``|u_k| <= |Δ_k|`` since
    ``h_k >= L (F_k + ε)^q``.

    ``qfedsgd`` (q-FedSGD, Li et al., ICLR 2020, Algorithm 1 l. 5-7): the client's
    "update" is its full-batch gradient ``g_k = ∇F_k(w^t)`` (the reply's ``gradient``
    record, not a difference of models), ``Δ_k = (F_k + ε)^q g_k`` and
    ``h_k = q (F_k + ε)^{q-1} ‖g_k‖² + L (F_k + ε)^q`` (Lemma 3, eq. 3); ``a_k = s_k h_k``
    and ``u_k = -Δ_k / h_k``, so the sum gives ``w^t - Σ s_k Δ_k / Σ s_k h_k``,
    Algorithm 1's step. ``|u_k| <= |g_k| / L``.

    ``term`` (TERM, Li et al., ICLR 2021): ``a_k = σ n_k exp(α (F_k - c))``, ``u_k = Δ_k``,
    with c the public shift the server sends (the largest reported loss, so a_k <= σ n_k).

    ``broadcast`` (AFL, Δ-FL, GiFair, VRed, RC-FL):
    ``a_k = λ_k`` as the server sent it, ``u_k = Δ_k``.

    Semi-VRed (Malekmohammadi & Yu, 2024, eq. 12: ``w_k = p_k (1 + 2β (a_k - A))``,
    ``a_k = (F_k - f̄)_+``, ``A = Σ_j p_j a_j``, ``f̄ = Σ_j p_j F_j``) in three secure
    sums, F_k never leaving the client in the clear: ``semivred-mean`` masks
    ``u_k = [σ n_k F_k]`` (f̄ is the sum over ``Σ_k σ n_k``), ``semivred-excess`` masks
    ``u_k = [σ n_k (F_k - f̄)_+]`` (A likewise), each with ``a_k = a_max``; ``semivred``
    masks ``a_k = σ' n_k (1 + 2β (a_k - A))``, ``u_k = Δ_k`` (σ' = σ / (1 + 4βC) keeps
    ``|a_k| <= a_max``: ``(F_k - f̄)_+ <= 2C`` for losses in ``[0, C]``), set to 0 if negative
    with ``semivred-clip-negative`` (the clear rule's clipping then renormalises, as the
    quotient ``Σ a_k u_k / Σ a_k`` does), else masked negative as the clear rule weighs it
    (:data:`SIGNED_WEIGHTS`).

    FairFed (Ezzeldin et al., AAAI 2023, FF3-FF6) in three secure sums, each client
    keeping its ``group-counts`` and its weight ω_k (DecLearn's client-held weights):
    ``fairfed-counts`` masks ``u_k = [c_k, s ω_k^{t-1}]``, its 8 counts c_k as exact
    integers (the server reads their sum exactly) and its previous weight (ω_k^0 = n_k / n
    as the server sent it, for a client holding none) times ``s = 1 / (2 (1 + β))``;
    ``fairfed-gaps`` masks ``u_k = [Δ_k / 2]``, Δ_k (FF4) from its counts and the summed
    ones (:func:`~fairfl.secagg.fairfed.fairness_gap`); each with ``a_k = a_max``;
    ``fairfed`` masks ``a_k = σ ω̄_k`` (:func:`fairfed_weight`), ``u_k = Δ_k``, σ = a_max /
    (2 (1 + β)) (ω̄_k <= 1 + 2β), and the client keeps ω̄_k (:func:`held_after`).

    Parameters
    ----------
    part : Mapping[str, Any]
        The client-part record the server sent (``weight-kind`` and its scalars).
    update : list[NDArray[np.float64]]
        Δ_k = w_k - w^t.
    private : Mapping[str, Any] | None
        What the client kept, by name: the train metrics a two-round form hides (F_k,
        Acc_k, FairFed's ``group-counts``) and what it holds across rounds (FairFed's
        ω̄_k, ``fairfed-weight``).

    Raises
    ------
    ValueError
        If the part is malformed, a scalar it needs is missing, or the weight is not
        a finite number (>= 0 but for :data:`SIGNED_WEIGHTS`).
    """
    kind = part.get(WEIGHT_KIND)
    payload: list[NDArray[Any]]
    if kind == "num-examples":
        weight, payload = float(part[WEIGHT_SCALE]) * int(part[NUM_EXAMPLES]), update
    elif kind == "qffl":
        value = _loss(part, kind)
        num_examples = int(part[NUM_EXAMPLES])
        q, lipschitz = float(part[QFFL_Q]), float(part[QFFL_LIPSCHITZ])
        distance = float(sum(np.vdot(d, d) for d in update))  # ‖w^t - w̄_k‖²
        h = h_term(value, distance, q=q, lipschitz=lipschitz)
        # u_k = -Δ_k^q / h_k = (F_k + ε)^q L (w̄_k - w^t) / h_k
        factor = lipschitz * (value + QFFL_EPSILON) ** q / h
        weight = h * (num_examples if bool(part[QFFL_BY_SIZE]) else 1.0)
        payload = [factor * d for d in update]
    elif kind == "qfedsgd":
        value = _loss(part, kind)
        q, lipschitz = float(part[QFFL_Q]), float(part[QFFL_LIPSCHITZ])
        squared_norm = float(sum(np.vdot(g, g) for g in update))  # ‖∇F_k(w^t)‖²
        h = lipschitz_estimate(value, squared_norm, q=q, lipschitz=lipschitz)
        factor = -((value + QFFL_EPSILON) ** q) / h  # u_k = -Δ_k / h_k
        weight = h * (int(part[NUM_EXAMPLES]) if bool(part[QFFL_BY_SIZE]) else 1.0)
        payload = [factor * g for g in update]
    elif kind == "term":
        value = _loss(part, kind)
        exponent = float(part[TERM_ALPHA]) * (value - float(part[TERM_SHIFT]))
        weight = float(part[WEIGHT_SCALE]) * int(part[NUM_EXAMPLES]) * math.exp(exponent)
        payload = update
    elif kind == "broadcast":
        weight, payload = float(part[WEIGHT]), update
    elif kind == "fairfed-counts":
        counts = np.array(_counts(part, private or {}), dtype=np.int64)
        previous = float(part[SHARE]) * _previous(part, private or {})
        weight, payload = float(part[WEIGHT]), [counts, np.array([previous])]
    elif kind == "fairfed-gaps":
        gap = _gap(part, private or {})
        weight, payload = float(part[WEIGHT]), [np.array([float(part[SHARE]) * gap])]
    elif kind == "fairfed":
        weight = float(part[WEIGHT_SCALE]) * fairfed_weight(part, private or {})
        payload = update
    elif kind in SCALAR_STAGES:
        value = _private(part, private or {}, kind)
        if kind == "semivred-excess":
            value = max(value - float(part[MEAN_LOSS]), 0.0)
        elif kind == "fedfa-information":
            value = _information(value, part)
        weight, payload = float(part[WEIGHT]), [np.array([float(part[SHARE]) * value])]
    elif kind == "semivred":
        excess = max(_private(part, private or {}, kind) - float(part[MEAN_LOSS]), 0.0)
        factor = 1.0 + 2.0 * float(part[SEMIVRED_BETA]) * (excess - float(part[EXCESS]))
        if bool(part[SEMIVRED_CLIP]):
            factor = max(factor, 0.0)
        weight = float(part[WEIGHT_SCALE]) * int(part[NUM_EXAMPLES]) * factor
        payload = update
    elif kind == "fedfa":
        information = _information(_private(part, private or {}, kind), part)
        total = float(part[INFORMATION_TOTAL])
        share = information / total if total > 0 else 1.0 / int(part[COUNT])  # F4
        beta = float(part[FEDFA_BETA])
        weight = float(part[WEIGHT_SCALE]) * (
            (1.0 - beta) * share + beta * float(part[FREQUENCY_SHARE])
        )  # F5
        payload = update
    else:
        raise ValueError(f"secure aggregation: unknown client weight {kind!r} (one of {WEIGHTS})")
    if not (math.isfinite(weight) and (weight >= 0 or kind in SIGNED_WEIGHTS)):
        raise ValueError(f"secure aggregation: the client's {kind} weight is {weight!r}")
    return weight, payload


def weight_magnitude(part: Mapping[str, Any], max_weight: float, quantization: int) -> int | None:
    """A bound on ``|round(Q a_k / a_max)|`` for a part whose weight may be negative.

    ``broadcast``: the server's own λ_k, so the magnitude itself
    (:func:`~fairfl.secagg.protocol.weight_ratio`'s). ``semivred`` without
    ``semivred-clip-negative``: its factor ``1 + 2β ((F_k - f̄)_+ - A)`` is at least
    ``1 - 2βA``, negative only above the round's β_max = 1/(2A); then Q, the most a
    ratio can be. ``None`` for a weight that is never negative.
    """
    kind = part.get(WEIGHT_KIND)
    if kind == "broadcast":
        return abs(weight_ratio(float(part[WEIGHT]), max_weight, quantization))
    if kind == "semivred" and not bool(part[SEMIVRED_CLIP]):
        lowest = 1.0 - 2.0 * float(part[SEMIVRED_BETA]) * float(part[EXCESS])
        return quantization if lowest < 0 else None
    return None


def fairfed_weight(part: Mapping[str, Any], private: Mapping[str, Any]) -> float:
    """FairFed's ω̄_k from the broadcast Σ ω^{t-1} and mean Δ (FF6, before normalising).

    ``max(ω_k^{t-1} / Σ_i ω_i^{t-1} - β (Δ_k - mean Δ), 0)``: the clear rule's
    (:func:`fairfl.strategies.fairfed.fairfed_weights`), whose normalisation over the
    round's clients the quotient ``Σ a_k u_k / Σ a_k`` takes.

    Raises
    ------
    ValueError
        If Σ ω^{t-1} is not > 0, or the client's counts are not usable (:func:`client_part`).
    """
    total = float(part[FAIRFED_WEIGHT_TOTAL])
    if not total > 0:
        raise ValueError(f"secure aggregation: FairFed's Σ ω^(t-1) is {total!r}, not > 0")
    previous = _previous(part, private) / total
    return moved_weight(
        previous, _gap(part, private), float(part[FAIRFED_MEAN_GAP]), float(part[FAIRFED_BETA])
    )


def held_after(part: Mapping[str, Any], private: Mapping[str, Any]) -> dict[str, float]:
    """What the client keeps for later rounds once it masked ``part``: FairFed's ω̄_k.

    ``{}`` for every other part. The client keeps ω̄_k, not ω̄_k / Σ_i ω̄_i (which no
    client learns); the next round's first sum renormalises the weights over that
    round's clients, as the clear rule does.
    """
    if part.get(WEIGHT_KIND) != "fairfed":
        return {}
    return {FAIRFED_WEIGHT: fairfed_weight(part, private)}


def restarted_held(part: Mapping[str, Any], held: Mapping[str, float]) -> dict[str, float] | None:
    """What a client that lost its held weight keeps instead; ``None`` if it lost none.

    FairFed's first sum tells each client whether the server counts it among the
    clients holding ω_k (``fairfed-held``: it was in an earlier round's weighted sum).
    One that is but holds none (a SuperNode restarted without node config
    ``secagg-state-dir``) has lost ω_k: it keeps ω_k^0 = n_k / n as this part sent it,
    from which its next round starts. ``None`` for every other part.
    """
    if part.get(WEIGHT_KIND) != "fairfed-counts" or not bool(part.get(FAIRFED_HELD, False)):
        return None
    if FAIRFED_WEIGHT in held:
        return None
    return {FAIRFED_WEIGHT: float(part[FAIRFED_PREVIOUS])}


def _counts(part: Mapping[str, Any], private: Mapping[str, Any]) -> list[int]:
    """The client's ``group-counts``: 8 ints >= 0 counting from 1 to the part's bound.

    As the clear rule's intake checks them (:func:`fairfl.strategies.fairfed.counts_error`).
    """
    key = str(part[PRIVATE_KEY])
    value = private.get(key)
    bound = int(part[PRIVATE_BOUND])
    if not (
        isinstance(value, list)
        and len(value) == 8
        and all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in value)
    ):
        raise ValueError(
            f"secure aggregation: FairFed needs this client's {key!r}, 8 ints >= 0 (a binary "
            f"attribute), got {value!r}"
        )
    if not 1 <= sum(value) <= bound:
        raise ValueError(
            f"secure aggregation: this client's {key} must count from 1 to "
            f"max-num-examples={bound} samples, got {sum(value)}"
        )
    return [int(c) for c in value]


def _previous(part: Mapping[str, Any], private: Mapping[str, Any]) -> float:
    """ω_k^{t-1}: the weight the client holds, else ω_k^0 = n_k / n as the server sent it."""
    held = private.get(FAIRFED_WEIGHT)
    return float(part[FAIRFED_PREVIOUS]) if held is None else float(held)


def _gap(part: Mapping[str, Any], private: Mapping[str, Any]) -> float:
    """Δ_k (FF4) from the client's counts and the summed ones the server sent."""
    total = [int(c) for c in part[FAIRFED_TOTAL_COUNTS]]
    return fairness_gap(_counts(part, private), total, str(part[FAIRFED_METRIC]))


def _loss(part: Mapping[str, Any], kind: str) -> float:
    if LOSS not in part:
        raise ValueError(
            f"secure aggregation: the {kind} weight needs F_k(w^t), and the server sent none"
        )
    return float(part[LOSS])


def _information(accuracy: float, part: Mapping[str, Any]) -> float:
    """FedFa's ``I^acc_k = max(-log2(Acc_k / Σ_j Acc_j + 1e-6), 0)`` (F1-F2; 1/m if Σ = 0)."""
    total = float(part[ACCURACY_TOTAL])
    share = accuracy / total if total > 0 else 1.0 / int(part[COUNT])
    return max(-math.log2(share + 1e-6), 0.0)


def _private(part: Mapping[str, Any], private: Mapping[str, Any], kind: str) -> float:
    """The metric the client kept from its train reply (F_k(w^t), Acc_k); in ``[0, bound]``."""
    key = str(part[PRIVATE_KEY])
    if key not in private:
        raise ValueError(
            f"secure aggregation: the {kind} part needs this client's {key!r}, which its "
            "train reply did not carry"
        )
    value, bound = float(private[key]), float(part[PRIVATE_BOUND])
    if not 0.0 <= value <= bound:
        raise ValueError(
            f"secure aggregation: this client's {key} {value!r} lies outside [0, {bound:g}], "
            "the range its secure sum holds (losses: raise secagg-clipping-range)"
        )
    return value
