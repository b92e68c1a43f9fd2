"""Opt-in defences of the loss-aware rules against clients that inflate their loss.

AFL, TERM, q-FFL, GiFair, Δ-FL, VRed and Semi-VRed weight each client by the loss
F_k(w^t) it *reports* (``train_loss_key``), and RC-FL sets its first η from the reported
losses: a client with a high loss gets more weight, which is their fairness. None of
the papers bounds what a client gains by reporting more than it has; the wire contract
only refuses a loss outside ``[0, max-loss]`` (:mod:`fairfl.contract.bounds`).
``docs/results/loss-inflation/results.md`` measures the gain and both defences. Both are
off by default, so every rule is the paper's unless one is asked for:

``loss_clip_mad`` (run-config ``loss-clip-mad``) = k > 0
    Each round, every reported loss is clipped to ``[max(0, m - k·MAD), m + k·MAD]``,
    m the median of the round's reported losses and MAD their median absolute
    deviation (:func:`mad_clip_range`). While fewer than half of the replies lie, m
    lies within the honest losses and MAD below their spread, so a liar gains at most
    what an honest loss of ``m + k·MAD`` gets. The cost: an honest client whose loss is
    that far above the median is clipped too.
``max_client_share`` (run-config ``max-client-share``) = c < 1
    No client's aggregation weight λ_i may exceed c times the round's total ``Σ_j λ_j``;
    the excess goes to the others (:func:`cap_weights`), as RC-FL caps a client's
    mixture weight at ``p_i/α_i`` and Δ-FL at ``p_i/α``. It applies to the rules of the
    form ``w^t - Σ_i λ_i (w^t - w_i)``
    (:class:`~fairfl.strategies.core.reweighted.ReweightedStrategy`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fairfl.contract import TrainReply, keys

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LossClip:
    """One round's clipping of the reported losses (:func:`clip_reported_losses`).

    Attributes
    ----------
    low, high : float
        The round's range ``[max(0, m - k·MAD), m + k·MAD]``.
    reported : dict[int, float]
        The loss each clipped reply reported, by node id.
    """

    low: float
    high: float
    reported: dict[int, float]

    def diagnostics(self) -> dict[str, Any]:
        """The round's record entries: the range, the count and the clipped reports."""
        return {
            "loss-clip-low": self.low,
            "loss-clip-high": self.high,
            "loss-clipped": len(self.reported),
            "loss-reported": dict(self.reported),
        }


def mad_clip_range(losses: ArrayLike, k: float) -> tuple[float, float]:
    """``[max(0, m - k·MAD), m + k·MAD]``, ``m = median_i f_i``, ``MAD = median_i |f_i - m|``.

    The raw MAD (not scaled by 1.4826 to estimate a normal σ). When more than half of
    the losses are equal, MAD is 0 and the range is the median alone.

    Parameters
    ----------
    losses : ArrayLike
        The round's reported losses f_i >= 0, finite, at least one.
    k : float
        Half-width of the range in MADs, >= 0.

    Raises
    ------
    ValueError
        If ``losses`` is empty or not finite, or ``k`` is negative or not finite.
    """
    f = np.asarray(losses, dtype=np.float64).reshape(-1)
    if f.size == 0 or not np.all(np.isfinite(f)):
        raise ValueError(f"losses must be a non-empty finite vector, got {f.tolist()}")
    if not (np.isfinite(k) and k >= 0):
        raise ValueError(f"k must be a finite number >= 0, got {k!r}")
    median = float(np.median(f))
    mad = float(np.median(np.abs(f - median)))
    return max(0.0, median - k * mad), median + k * mad


def clip_reported_losses(
    replies: list[TrainReply], loss_key: str, k: float
) -> tuple[list[TrainReply], LossClip | None]:
    """Clip each reply's ``loss_key`` metric to the round's :func:`mad_clip_range`.

    A clipped reply is a copy whose metric holds the clipped value and which has no
    ``qffl-h`` (the client computed it from the loss it reported; q-FFL then uses the
    server's h_k from the clipped loss). Each clipped reply is logged at INFO with its
    node.

    Parameters
    ----------
    replies : list[TrainReply]
        The round's validated replies (losses, where present, finite and >= 0).
    loss_key : str
        The metric holding F_k(w^t).
    k : float
        Half-width in MADs; 0 turns the defence off.

    Returns
    -------
    tuple[list[TrainReply], LossClip | None]
        The replies in the same order (unclipped ones unchanged), and the round's
        clipping (``None`` when off or no reply carries ``loss_key``).
    """
    reported = {r.node_id: float(r.metrics[loss_key]) for r in replies if loss_key in r.metrics}  # type: ignore[arg-type]
    if k == 0 or not reported:
        return replies, None
    low, high = mad_clip_range(list(reported.values()), k)
    out: list[TrainReply] = []
    clipped: dict[int, float] = {}
    for reply in replies:
        loss = reported.get(reply.node_id)
        if loss is None or low <= loss <= high:
            out.append(reply)
            continue
        value = min(max(loss, low), high)
        metrics = {key: v for key, v in reply.metrics.items() if key != keys.QFFL_H}
        metrics[loss_key] = value
        out.append(replace(reply, metrics=metrics))
        clipped[reply.node_id] = loss
        logger.info(
            "aggregate_train: node %d reported %s %.6g, clipped to %.6g (median ± %g MAD)",
            reply.node_id,
            loss_key,
            loss,
            value,
            k,
        )
    return out, LossClip(low=low, high=high, reported=clipped)


def cap_weights(
    weights: ArrayLike, cap: float, *, allow_negative: bool = False
) -> NDArray[np.float64]:
    """Cap every weight at ``cap`` times their sum S and share the excess among the others.

    Equitable FL's ``max_client_weight`` (its spec §7) and the ``max_client_share`` defence.

    Water-filling: weights above ``cap · S`` are set to it, and the excess is spread over
    the uncapped weights in proportion to their positive part (equally when none is
    positive: a rule extrapolating with negative weights, VRed's β above its bound),
    until none exceeds the cap. The sum and the order of the weights are kept; for
    non-negative weights the uncapped ones keep their ratios.

    Parameters
    ----------
    weights : ArrayLike
        The weights, summing to S > 0 (non-negative unless ``allow_negative``).
    cap : float
        The cap, in (0, 1]. Below ``1 / len(weights)`` no weights can satisfy it: the
        uniform weights ``S / n``, the smallest possible maximum, are returned (WARNING).
    allow_negative : bool (default: False)
        Accept negative weights (they receive the excess as described above).

    Returns
    -------
    NDArray[np.float64]
        The capped weights.

    Raises
    ------
    ValueError
        If ``cap`` is not in (0, 1], a weight is negative (unless ``allow_negative``),
        or the weights sum to <= 0.
    """
    if not 0 < cap <= 1:
        raise ValueError(f"cap must be in (0, 1], got {cap}")
    p = np.asarray(weights, dtype=np.float64).copy()
    if not allow_negative and np.any(p < 0):
        raise ValueError(f"weights must be >= 0, got {p.tolist()}")
    total = float(p.sum())
    if not total > 0:
        raise ValueError(f"weights must sum to > 0, got {p.tolist()}")
    if cap * p.size < 1.0 - 1e-12:
        logger.warning("cap_weights: cap %s < 1/%d cannot hold; using uniform weights", cap, p.size)
        return np.full(p.size, total / p.size)
    limit = cap * total
    capped = np.zeros(p.size, dtype=bool)
    for _ in range(p.size):
        over = (p > limit * (1.0 + 1e-12)) & ~capped
        if not over.any():
            break
        capped |= over
        p[capped] = limit
        rest = p[~capped]
        if rest.size == 0:
            break
        extra = total - limit * capped.sum() - rest.sum()
        positive = np.maximum(rest, 0.0)
        if positive.sum() > 0:
            share = positive / positive.sum()
        else:
            share = np.full(rest.size, 1.0 / rest.size)
        p[~capped] = rest + extra * share
    return p


def share_capped(weights: NDArray[np.float64], cap: float) -> NDArray[np.float64] | None:
    """The weights capped at ``cap`` of their sum (:func:`cap_weights`), or ``None``.

    ``None`` when the cap is off (``cap = 1``), does not bind, or the weights do not sum
    to > 0 (no share to cap): the rule's own weights are then applied unchanged.
    """
    total = float(weights.sum())
    if cap >= 1 or not total > 0 or float(weights.max()) <= cap * total * (1.0 + 1e-12):
        return None
    return cap_weights(weights, cap, allow_negative=True)
