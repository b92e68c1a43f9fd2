"""The server half of the two-round forms: the sums of scalars before the weighted sum.

A two-round form (:meth:`fairfl.secagg.forms.SecureForm.two_rounds`) keeps a train metric
on each client (Semi-VRed's loss F_k, FedFa's accuracy Acc_k, FairFed's group counts) and
runs, in one round, secure sums of scalars whose public statistics the server
broadcasts, then the weighted sum whose weights the clients compute from them
(:func:`fairfl.secagg.forms.client_part`).
Each sum of scalars masks ``u_k = [s_k x_k]`` with the weight a_max, so every quantised
weight is Q and the server reads ``Σ_k s_k x_k`` (s_k a public share) within
``b Σ_k r̂_k / Q`` (b the sum's :func:`~fairfl.secagg.protocol.quantisation_bound`).

Each rule's error analysis ends in ε, a bound on the l1 distance between the clients'
weights and the clear rule's (both summing to 1 up to ε); the quotient
``Σ a_k u_k / Σ a_k`` then moves by at most ``2εC / (1 - ε)`` per coordinate, which
``TwoRoundSums.extra_bound`` adds to the weighted sum's bound.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

from flwr.serverapp.exception import AggregationError

from fairfl.contract import TrainReply, keys
from fairfl.secagg import forms
from fairfl.secagg.config import SecAggSettings
from fairfl.secagg.fairfed import signed_metric
from fairfl.secagg.protocol import quantisation_bound
from fairfl.secagg.server import SecureSum
from fairfl.strategies.core.aggregation import sample_weights
from fairfl.strategies.core.base import FairStrategy
from fairfl.strategies.fairfed import FairFed
from fairfl.strategies.fedfa import FedFa, fedfa_weights

__all__ = [
    "FairFedSums",
    "FedFaSums",
    "SemiVRedSums",
    "SumParts",
    "TwoRoundSums",
    "two_round_sums",
]

#: Each client's part of one sum, by node id.
SumParts = dict[int, dict[str, Any]]


class TwoRoundSums(ABC):
    """One two-round form's sums: the first parts, then each next sum's from the last.

    Parameters
    ----------
    strategy : FairStrategy
        The rule (Semi-VRed, FedFa).
    settings : SecAggSettings
        The run's secure-aggregation settings.
    """

    def __init__(self, strategy: FairStrategy, settings: SecAggSettings) -> None:
        self.strategy = strategy
        self.settings = settings
        self.stage = 0  # the sums of scalars done this round
        self.server_round = 0
        self.shares: dict[int, float] = {}  # s_k of each client, public
        self.stats: dict[str, float] = {}  # the round's public statistics and their errors
        #: Each round's share of ``secagg-bound`` from its statistics' errors.
        self.extra_bound: dict[int, float] = {}

    @property
    @abstractmethod
    def hidden(self) -> tuple[str, ...]:
        """The train metric the clients keep."""

    @abstractmethod
    def first(self, server_round: int, replies: list[TrainReply]) -> SumParts:
        """The first sum's parts, for the round's screened replies."""

    @abstractmethod
    def next(self, last: SecureSum) -> SumParts | None:
        """The next sum's parts from the last sum; ``None`` after the weighted sum."""

    def scalar_part(self, kind: str, nid: int, bound: float, **extra: Any) -> dict[str, Any]:
        """The part of a sum of scalars: a_max, the share s_k, the private metric's key."""
        return {
            forms.WEIGHT_KIND: kind,
            forms.WEIGHT: self.settings.secagg_max_weight,
            forms.SHARE: self.shares[nid],
            forms.PRIVATE_KEY: self.hidden[0],
            forms.PRIVATE_BOUND: bound,
            **extra,
        }

    def statistic(self, last: SecureSum, index: int = 0) -> tuple[float, float, list[int]]:
        """``Σ_k s_k x_k`` of the last sum's array ``index``, its error bound, its clients."""
        assert last.mean is not None
        quantisation = self.settings.secagg_quantization_range
        in_sum = [int(m.metadata.src_node_id) for m in last.replies]
        total = float(last.mean[index].reshape(-1)[0]) * last.weight_total / quantisation
        bound = quantisation_bound(
            len(in_sum), self.settings.secagg_clipping_range, last.weight_total
        )
        return total, bound * last.weight_total / quantisation, in_sum

    def exact_total(self, last: SecureSum, index: int) -> list[int]:
        """The exact sum of the integers the clients masked as array ``index``.

        Each client masked its integers c as they are (:mod:`fairfl.secagg.client`), with
        the weight a_max: the sum's mean is then ``(Σ c 2C/Q - n C) Q / W``, W = n Q, from
        which ``Σ c = (mean W / Q + n C) Q / (2C)`` comes back exactly (it is below
        2^32, so the float error of the few steps is far below 1/2).

        Raises
        ------
        AggregationError
            If a client's weight was not a_max (W != n Q).
        """
        assert last.mean is not None
        clipping = self.settings.secagg_clipping_range
        quantisation = self.settings.secagg_quantization_range
        n = len(last.replies)
        if last.weight_total != n * quantisation:
            raise AggregationError(
                f"secure aggregation: an exact sum needs every weight at a_max, got "
                f"{last.weight_total} for {n} clients"
            )
        values = (last.mean[index].reshape(-1) * n + n * clipping) * quantisation / (2 * clipping)
        return [round(float(v)) for v in values]

    def record(self, **diagnostics: float) -> None:
        """Put the round's public statistics in its record."""
        self.strategy.train_records[self.server_round].diagnostics.update(diagnostics)

    def settle(self, eps: float) -> None:
        """The round's extra bound from ε (see the module docstring)."""
        clipping = self.settings.secagg_clipping_range
        self.extra_bound[self.server_round] = (
            2.0 * eps * clipping / (1.0 - eps) if eps < 1 else math.inf
        )

    def begin(self, server_round: int, shares: dict[int, float]) -> None:
        """A new round: its clients' shares."""
        self.server_round, self.stage, self.shares, self.stats = server_round, 0, shares, {}


class SemiVRedSums(TwoRoundSums):
    """Semi-VRed (Malekmohammadi & Yu, 2024, eq. 12): f̄, then A, then the weighted sum.

    s_k = σ n_k (σ = 1 / max_j n_j, public: the counts are clear); f̄ and A are the sums
    over ``Σ_k s_k``, each within e of its clear value; the weights
    ``p_k (1 + 2β ((F_k - f̄)_+ - A))`` then move by ``ε = 2β (2 e_f̄ + e_A)`` in l1
    ((·)_+ is 1-Lipschitz and Σ p_k = 1).
    """

    @property
    def hidden(self) -> tuple[str, ...]:
        """F_k(w^t): the rule's ``train_loss_key``."""
        return (self.strategy.train_loss_key,)

    def first(self, server_round: int, replies: list[TrainReply]) -> SumParts:
        """Each client masks ``σ n_k F_k``."""
        top = max(reply.num_examples for reply in replies)
        self.begin(server_round, {r.node_id: r.num_examples / top for r in replies})
        self.counts = {reply.node_id: reply.num_examples for reply in replies}
        self.stats["top"] = top
        clipping = self.settings.secagg_clipping_range
        return {nid: self.scalar_part("semivred-mean", nid, clipping) for nid in self.shares}

    def next(self, last: SecureSum) -> SumParts | None:
        """A from f̄, then the weights from f̄ and A; ``None`` after the weighted sum."""
        if self.stage == 2:
            return None
        total, error, in_sum = self.statistic(last)
        shares = sum(self.shares[nid] for nid in in_sum)
        value, error = total / shares, error / shares
        clipping = self.settings.secagg_clipping_range
        self.stage += 1
        if self.stage == 1:
            self.stats.update(mean=value, mean_error=error)
            self.record(**{"secagg-mean-loss": value})
            mean = {forms.MEAN_LOSS: value}
            return {n: self.scalar_part("semivred-excess", n, clipping, **mean) for n in in_sum}
        self.record(
            **{
                "secagg-excess": value,
                "beta-max": math.inf if value <= 0 else 1.0 / (2.0 * value),
            }
        )
        params = self.strategy.params
        beta = float(params.beta)  # type: ignore[attr-defined]
        self.settle(2.0 * beta * (2.0 * self.stats["mean_error"] + error))
        common = {
            forms.WEIGHT_KIND: "semivred",
            # (F_k - f̄)_+ <= 2C for losses in [0, C]: a_k <= a_max.
            forms.WEIGHT_SCALE: self.settings.secagg_max_weight
            / (self.stats["top"] * (1.0 + 4.0 * beta * clipping)),
            forms.MEAN_LOSS: self.stats["mean"],
            forms.EXCESS: value,
            forms.SEMIVRED_BETA: beta,
            forms.SEMIVRED_CLIP: bool(params.clip_negative_weights),  # type: ignore[attr-defined]
            forms.PRIVATE_KEY: self.hidden[0],
            forms.PRIVATE_BOUND: clipping,
        }
        return {n: {**common, forms.NUM_EXAMPLES: self.counts[n]} for n in in_sum}


class FedFaSums(TwoRoundSums):
    """FedFa (Huang et al., 2020; spec-fedfa F1-F5): Σ Acc, then Σ I^acc, then the sum.

    The first sum gives ``S = Σ_k Acc_k`` within e_1; each client's
    ``I^acc_k = max(-log2(Acc_k / Ŝ + 1e-6), 0)`` is then within
    ``d = log2(Ŝ / (Ŝ - e_1))`` of the clear one (the ratio of the two arguments lies
    between 1 and S/Ŝ). The second sum gives ``S_I = Σ_k I^acc_k`` within e_I (masked as
    ``I^acc_k / I_max``, ``I_max = -log2(1e-6)``, inside [0, 1]); the participation
    term is the server's own (its counts). The accuracy term's normalised weights move
    by at most ``(2 m d + e_I) / Ŝ_I`` in l1 (m clients), so ``ε = (1 - β)`` times that.
    """

    @property
    def hidden(self) -> tuple[str, ...]:
        """Acc_k: the rule's ``accuracy_key``."""
        return (self.fedfa.accuracy_key,)

    @property
    def fedfa(self) -> FedFa:
        """The rule, as FedFa."""
        assert isinstance(self.strategy, FedFa)
        return self.strategy

    def first(self, server_round: int, replies: list[TrainReply]) -> SumParts:
        """Each client masks ``Acc_k`` (share 1)."""
        self.begin(server_round, {reply.node_id: 1.0 for reply in replies})
        self.keys = {reply.node_id: self.fedfa.client_key(reply) for reply in replies}
        return {nid: self.scalar_part("fedfa-accuracy", nid, 1.0) for nid in self.shares}

    def next(self, last: SecureSum) -> SumParts | None:
        """Σ I^acc from Ŝ, then the weights; ``None`` after the weighted sum."""
        if self.stage == 2:
            return None
        total, error, in_sum = self.statistic(last)
        self.stage += 1
        if self.stage == 1:
            self.stats.update(accuracy=total, accuracy_error=error, count=len(in_sum))
            self.record(**{"secagg-accuracy-total": total})
            self.shares = {nid: 1.0 / forms.FEDFA_INFORMATION_MAX for nid in in_sum}
            extra = {forms.ACCURACY_TOTAL: total, forms.COUNT: len(in_sum)}
            return {n: self.scalar_part("fedfa-information", n, 1.0, **extra) for n in in_sum}
        information = total * forms.FEDFA_INFORMATION_MAX
        information_error = error * forms.FEDFA_INFORMATION_MAX
        self.record(**{"secagg-information-total": information})
        rule = self.fedfa
        # f_k: the server's own counts, of the clients entering the weighted sum.
        participation = dict(rule.participation)
        for nid in in_sum:
            participation[self.keys[nid]] = participation.get(self.keys[nid], 0) + 1
        rule.state_updates.set(rule, participation=participation)
        counts = [participation[self.keys[nid]] for nid in in_sum]
        frequency = fedfa_weights([0.0] * len(in_sum), counts, 1.0)  # β = 1: F3 normalised
        beta = float(rule.params.beta)
        accuracy, accuracy_error = self.stats["accuracy"], self.stats["accuracy_error"]
        if accuracy > accuracy_error and information > information_error:
            d = math.log2(accuracy / (accuracy - accuracy_error))
            self.settle((1.0 - beta) * (2 * len(in_sum) * d + information_error) / information)
        else:  # a sum within its error of 0: the clear rule's branch may differ
            self.settle(math.inf)
        common = {
            forms.WEIGHT_KIND: "fedfa",
            # p_k <= 1 up to the statistics' error: a_max / 2 leaves room.
            forms.WEIGHT_SCALE: self.settings.secagg_max_weight / 2.0,
            forms.ACCURACY_TOTAL: accuracy,
            forms.INFORMATION_TOTAL: information,
            forms.COUNT: int(self.stats["count"]),
            forms.FEDFA_BETA: beta,
            forms.PRIVATE_KEY: self.hidden[0],
            forms.PRIVATE_BOUND: 1.0,
        }
        return {
            nid: {**common, forms.FREQUENCY_SHARE: float(share)}
            for nid, share in zip(in_sum, frequency, strict=True)
        }


class FairFedSums(TwoRoundSums):
    """FairFed (Ezzeldin et al., AAAI 2023; FF3-FF6): counts and Σ ω, then mean Δ, then the sum.

    Each client keeps its ``group-counts`` and its weight ω_k (DecLearn's client-held
    weights; :func:`fairfl.secagg.forms.client_part`). The first sum gives the summed
    counts exactly (integers masked as they are) and ``Ŝ = Σ_k ω_k^{t-1}`` within e_S
    (masked as ``s ω_k^{t-1}``, s = 1 / (2 (1 + β))): the server learns F_global and
    Acc_global (FF3) as the clear rule does, and broadcasts the summed counts. Each
    client computes Δ_k (FF4) from them; the second sum gives ``mean Δ`` within e_Δ
    (masked as ``Δ_k / 2``). The weights ``ω_k^{t-1} / Ŝ - β (Δ_k - mean Δ)`` then move
    by at most ``ε = e_S / Ŝ + m β e_Δ`` in l1 (m clients; the clipping at 0 is
    1-Lipschitz), and the clear ones sum to >= 1, so ``TwoRoundSums.settle`` holds.
    """

    def __init__(self, strategy: FairStrategy, settings: SecAggSettings) -> None:
        super().__init__(strategy, settings)
        #: The client keys whose ω_k entered an unmasked weighted sum of this run: they
        #: hold one (the server, resumed from a checkpoint, starts this list again).
        self.holders: set[str] = set()

    @property
    def hidden(self) -> tuple[str, ...]:
        """The client's ``group-counts``."""
        return (keys.GROUP_COUNTS,)

    @property
    def fairfed(self) -> FairFed:
        """The rule, as FairFed."""
        assert isinstance(self.strategy, FairFed)
        return self.strategy

    def first(self, server_round: int, replies: list[TrainReply]) -> SumParts:
        """Each client masks its counts and ``s ω_k^{t-1}`` (ω_k^0 = n_k / n: FF5).

        Each part says whether the client holds ω_k (``fairfed-held``: it was in an
        earlier round's weighted sum), so that one that lost it refuses the round.
        """
        rule = self.fairfed
        share = 1.0 / (2.0 * (1.0 + rule.params.beta))
        self.begin(server_round, {reply.node_id: share for reply in replies})
        shares = sample_weights([reply.num_examples for reply in replies])
        self.defaults = {r.node_id: float(p) for r, p in zip(replies, shares, strict=True)}
        self.keys = {reply.node_id: rule.client_key(reply) for reply in replies}
        self.max_count = rule.client_keys.counts.max_num_examples
        return {
            nid: self.scalar_part(
                "fairfed-counts",
                nid,
                self.max_count,
                **{
                    forms.FAIRFED_PREVIOUS: self.defaults[nid],
                    forms.FAIRFED_HELD: self.keys[nid] in self.holders,
                },
            )
            for nid in self.shares
        }

    def next(self, last: SecureSum) -> SumParts | None:
        """Mean Δ from the summed counts, then the weights; ``None`` after the weighted sum."""
        if self.stage == 2:  # the clients in the weighted sum now hold ω̄_k
            self.holders |= {self.keys[int(m.metadata.src_node_id)] for m in last.replies}
            return None
        rule = self.fairfed
        self.stage += 1
        if self.stage == 1:
            counts = self.exact_total(last, 0)
            weights, error, in_sum = self.statistic(last, 1)
            share = next(iter(self.shares.values()))
            self.stats.update(weights=weights / share, weights_error=error / share)
            self.counts = counts
            self.record(**{"fairfed-global-metric": signed_metric(counts, rule.params.metric)})
            self.shares = {nid: 0.5 for nid in in_sum}  # Δ_k in [0, 2]
            extra = {
                forms.FAIRFED_TOTAL_COUNTS: counts,
                forms.FAIRFED_METRIC: rule.params.metric,
            }
            return {n: self.scalar_part("fairfed-gaps", n, self.max_count, **extra) for n in in_sum}
        total, error, in_sum = self.statistic(last)
        mean, mean_error = 2.0 * total / len(in_sum), 2.0 * error / len(in_sum)
        self.record(**{"fairfed-delta-mean": mean})
        beta = float(rule.params.beta)
        weights, weights_error = self.stats["weights"], self.stats["weights_error"]
        if weights > weights_error:
            self.settle(weights_error / weights + len(in_sum) * beta * mean_error)
        else:  # Σ ω^{t-1} within its error of 0
            self.settle(math.inf)
        common = {
            forms.WEIGHT_KIND: "fairfed",
            # ω̄_k <= ω_k^{t-1} / Ŝ + 2β, about 1 + 2β: a_max / (2 (1 + β)) leaves room.
            forms.WEIGHT_SCALE: self.settings.secagg_max_weight / (2.0 * (1.0 + beta)),
            forms.FAIRFED_TOTAL_COUNTS: self.counts,
            forms.FAIRFED_METRIC: rule.params.metric,
            forms.FAIRFED_WEIGHT_TOTAL: weights,
            forms.FAIRFED_MEAN_GAP: mean,
            forms.FAIRFED_BETA: beta,
            forms.PRIVATE_KEY: self.hidden[0],
            forms.PRIVATE_BOUND: self.max_count,
        }
        return {n: {**common, forms.FAIRFED_PREVIOUS: self.defaults[n]} for n in in_sum}


def two_round_sums(
    weight: str | None, strategy: FairStrategy, settings: SecAggSettings
) -> TwoRoundSums:
    """The sums of a two-round form with client weight ``weight``."""
    if weight == "semivred":
        return SemiVRedSums(strategy, settings)
    if weight == "fedfa":
        return FedFaSums(strategy, settings)
    if weight == "fairfed":
        return FairFedSums(strategy, settings)
    raise ValueError(f"secure aggregation: no two-round sums for {weight!r} weights")
