"""FairFed: aggregation weights moved by each client's gap to the global group fairness.

Ezzeldin, Yan, He, Ferrara and Avestimehr, *FairFed: Enabling Group Fairness in
Federated Learning*, AAAI 2023, https://arxiv.org/abs/2110.00857. The paper's text is
not among the project's papers; the formulas are numbered as in
``docs/specs/spec-fairfed.md`` (FF1-FF7), which maps them to the paper's sections and
Algorithm 1 and says where DecLearn's implementation (``declearn/fairness/fairfed``)
differs::

    F = P(ŷ=1 | A=0) - P(ŷ=1 | A=1)                  (SPD)      (FF1)
    F = P(ŷ=1 | A=0, y=1) - P(ŷ=1 | A=1, y=1)        (EOD)      (FF2)
    F_global from the summed group counts of all clients         (FF3)
    Δ_k = |F_global - F_k|,  or |Acc_global - Acc_k| where F_k is undefined   (FF4)
    ω_k^0 = n_k / n                                               (FF5)
    ω̄_k^t = ω_k^{t-1} - β (Δ_k - (1/K) Σ_i Δ_i),  ω_k^t = ω̄_k^t / Σ_i ω̄_i^t   (FF6)
    w^{t+1} = Σ_k ω_k^t w_k^{t+1}                                 (FF7)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from flwr.app import Message
from numpy.typing import ArrayLike, NDArray

from fairfl.contract import ModelLayout, ReplyError, TrainReply, keys, sorted_client_keys
from fairfl.contract.sensitive import sum_counts
from fairfl.secagg.fairfed import METRICS, Metric, fairness_gap, signed_metric
from fairfl.secagg.forms import SecureForm
from fairfl.strategies.core import intake
from fairfl.strategies.core._checks import check_real
from fairfl.strategies.core.base import ConfigValue
from fairfl.strategies.core.params import RuleParameters, choice, real
from fairfl.strategies.core.reweighted import LossRule, TrainRound, Weights


@dataclass(frozen=True)
class FairFedParameters(RuleParameters):
    """FairFed's hyperparameters: β and the fairness metric (see :class:`FairFed`)."""

    beta: float = real(1.0, key="fairfed-beta", lower=0.0, grid=(0.1, 0.5, 1.0))
    metric: Metric = choice("spd", METRICS, key="fairfed-metric")


class FairFed(LossRule):
    """FairFed (Ezzeldin et al., AAAI 2023): weights track the local-global fairness gap.

    Every round each client reports the ``group-counts`` of the *received* model on its
    training split (the rule asks with ``want-group-counts``): its samples per
    (sensitive attribute, label, prediction), never predictions. The server sums them
    into the global metric F_global (FF3), takes each client's gap Δ_k (FF4) and moves
    the weights by :func:`fairfed_weights` (FF6): clients whose local fairness is far
    from the global one lose weight, close ones gain. β = 0 is FedAvg.

    Parameters
    ----------
    beta : float (default: 1.0)
        β >= 0, the fairness budget of each weight update (FF6).
    metric : {"spd", "eod"} (default: "spd")
        The fairness metric F: statistical-parity difference (FF1) or
        equal-opportunity difference (FF2), as the paper's experiments target.
    **kwargs
        Sampling settings of :class:`fairfl.strategies.core.base.FairStrategy`.

    Raises
    ------
    ValueError
        If a setting is out of range.

    Notes
    -----
    * The weights ω_k persist across rounds by client key and are checkpointed. A
      client first seen gets ω_k^0 = n_k / n over the round's participants (FF5); the
      participants' weights are renormalised over them before the update. With every
      client in every round (the paper's setting) this is the paper's recursion; the
      paper does not say what sampling does.
    * The attribute must be binary (8 counts per client), and the counts must count
      between 1 and ``max-num-examples`` samples (the run's bound on a client's
      ``num-examples``); any other reply is dropped at intake naming the client
      (:func:`counts_error`), so no reply can end the round or give an undefined gap.
    * Diagnostics: ``fairfed-global-metric`` (F_global) and ``fairfed-delta-mean``.
    * Under ``secure-aggregation = "secagg+"`` (:class:`~fairfl.strategies.secure_sums.FairFedSums`)
      the counts and ω_k stay on the clients: each client keeps ω̄_k, the weight before
      FF6's normalisation, in its ``Context.state`` (checkpointed with the run), and the
      next round's sum of Σ ω_k renormalises the weights over that round's clients. That
      is this rule's recursion whenever Σ ω̄ = 1 (no weight clipped at 0) or every
      client takes part in every round; a client clipped at 0 while others sit out
      leaves the two weighing the absent clients' next round differently. The server
      state holds no ω_k then.
    """

    rule_name = "FairFed"
    registry_name = "fairfed"
    #: The rule under SecAgg+ (issue #48; :mod:`fairfl.strategies.secure_sums`).
    secure_form = SecureForm.two_rounds(
        "fairfed",
        "each client keeps its group counts and its weight ω_k (DecLearn's client-held "
        "weights): a secure sum gives the summed counts, exactly, and Σ ω_k, a second the "
        "mean gap, and each client computes its gap Δ_k and ω_k itself; the server sees "
        "the summed counts (so F_global), Σ ω_k and the mean gap, never one client's "
        "counts, gap or ω_k",
    )
    needs_loss = False
    required_train_metrics = (keys.GROUP_COUNTS,)
    Parameters = FairFedParameters
    params: FairFedParameters

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: ω_k^{t-1} by client key (FF6), normalised over the last round's participants.
        self.fair_weights: dict[str, float] = {}

    def train_config(self, server_round: int) -> dict[str, ConfigValue]:
        """Ask every client for ``group-counts`` of the received model on its training split."""
        return {keys.WANT_GROUP_COUNTS: True}

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state: ω_k by client key."""
        return {"weights": {k: self.fair_weights[k] for k in sorted_client_keys(self.fair_weights)}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output; ``{}`` is the state before round 1."""
        self.fair_weights = {str(k): float(v) for k, v in state.get("weights", {}).items()}

    def read_train_replies(
        self, server_round: int, replies: Iterable[Message], layout: ModelLayout
    ) -> tuple[list[TrainReply], dict[int, str]]:
        """Validate as every rule does, and drop a reply whose counts FairFed cannot use."""
        accepted, dropped = super().read_train_replies(server_round, replies, layout)
        check = partial(counts_error, max_count=self.client_keys.counts.max_num_examples)
        return intake.drop_failing("aggregate_train", accepted, dropped, check), dropped

    def weights(self, round: TrainRound) -> Weights:
        """ω_k^t of :func:`fairfed_weights` for this round's participants (FF4-FF6)."""
        counts = [[int(c) for c in r.metrics[keys.GROUP_COUNTS]] for r in round.replies]  # type: ignore[union-attr]
        gaps, global_metric = fairfed_gaps(counts, self.params.metric)
        client_keys = [self.client_key(r) for r in round.replies]
        previous = np.array(
            [self.fair_weights.get(k, f) for k, f in zip(client_keys, round.shares, strict=True)]
        )  # FF5 for a client first seen
        weights = fairfed_weights(previous / previous.sum(), gaps, self.params.beta)
        new = dict(zip(client_keys, weights.tolist(), strict=True))
        self.state_updates.set(self, fair_weights={**self.fair_weights, **new})
        diagnostics = {
            "fairfed-global-metric": global_metric,
            "fairfed-delta-mean": float(np.mean(gaps)),
        }
        return weights, diagnostics


def counts_error(reply: TrainReply, max_count: int) -> ReplyError | None:
    """Why FairFed cannot use a reply's ``group-counts``, or ``None``.

    The reader has checked that they are ints >= 0. FairFed also needs a binary
    attribute's 8 counts that count between 1 and ``max_count`` samples in all (the
    run's ``max-num-examples``): a client that counts no sample has no accuracy, and a
    bound on the total keeps every sum of the round exact and its gaps defined. The
    total is summed in Python ints, so no count can wrap it.
    """
    value = reply.metrics[keys.GROUP_COUNTS]
    where = f"metrics[{keys.GROUP_COUNTS!r}]"
    if not (isinstance(value, list) and len(value) == 8):
        return ReplyError(
            reply.node_id,
            where,
            "FairFed needs a binary sensitive attribute: 8 counts "
            f"(2 attribute values x label x prediction), got {value!r}",
        )
    total = sum(int(count) for count in value)
    if not 1 <= total <= max_count:
        return ReplyError(
            reply.node_id,
            where,
            f"must count from 1 to max-num-examples={max_count} samples, got {total}",
        )
    return None


def fairfed_gaps(counts: Sequence[ArrayLike], metric: str) -> tuple[NDArray[np.float64], float]:
    """Δ_k of every client (FF4) and F_global (FF3) from the clients' group counts.

    F_global is :func:`signed_metric` of the summed counts: the paper's decomposition of
    the global metric into clients' terms (docs/specs/spec-fairfed.md §3) sums to exactly that.
    Where a client's F_k is undefined (it lacks a group) ``Δ_k = |Acc_global - Acc_k|``, as
    Algorithm 1 says; so is every Δ_k where F_global itself is undefined.

    Returns
    -------
    tuple[NDArray[np.float64], float]
        Δ (one per client, in [0, 2]) and F_global (NaN when undefined).
    """
    total = sum_counts(counts)
    gaps = [fairness_gap(client, total, metric) for client in counts]
    return np.asarray(gaps, dtype=np.float64), signed_metric(total, metric)


def fairfed_weights(previous: ArrayLike, gaps: ArrayLike, beta: float) -> NDArray[np.float64]:
    """ω^t from ω^{t-1} and the gaps Δ (FF6).

    ``ω̄_k = ω_k^{t-1} - β (Δ_k - mean Δ)``, then ``ω_k^t = ω̄_k / Σ_i ω̄_i``.

    Parameters
    ----------
    previous : ArrayLike
        ω^{t-1} >= 0, summing to 1 (ω^0 = n_k / n, FF5).
    gaps : ArrayLike
        Δ_k >= 0 (FF4).
    beta : float
        β >= 0; 0 keeps ω^{t-1}.

    Returns
    -------
    NDArray[np.float64]
        ω^t >= 0, summing to 1.

    Raises
    ------
    ValueError
        If the vectors are empty or of different shapes, ``previous`` has a negative or
        non-finite entry or does not sum to 1, a gap is negative or not finite, or
        ``beta`` < 0.

    Notes
    -----
    The centred step keeps Σ ω̄ = Σ ω^{t-1} = 1, but not ω̄ >= 0: a client whose gap
    stays above the mean loses β (Δ_k - mean Δ) every round and would reach a negative
    weight, which an average of models does not define and the paper does not treat.
    Here ω̄ is clipped at 0 before the normalisation (all clipped: equal weights).
    """
    old = np.asarray(previous, dtype=np.float64)
    delta = np.asarray(gaps, dtype=np.float64)
    if old.ndim != 1 or old.size == 0 or old.shape != delta.shape:
        raise ValueError(
            f"previous and gaps must be non-empty 1-D of one shape, got {old.shape} and "
            f"{delta.shape}"
        )
    if not np.all(np.isfinite(old) & (old >= 0)) or not np.isclose(old.sum(), 1.0):
        raise ValueError(f"previous must be weights >= 0 summing to 1, got {old.tolist()}")
    if not np.all(np.isfinite(delta) & (delta >= 0)):
        raise ValueError(f"gaps must be finite and >= 0, got {delta.tolist()}")
    beta = check_real("beta", beta, lower=0.0)
    moved = np.maximum(old - beta * (delta - delta.mean()), 0.0)  # FF6, clipped at 0
    total = moved.sum()
    if total == 0:
        return np.full(old.size, 1.0 / old.size)
    weights: NDArray[np.float64] = moved / total  # FF6's normalisation
    return weights
