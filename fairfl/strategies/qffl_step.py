"""q-FFL's math (Li et al. 2020): the λ of q-FedAvg's step, the h_k, and q-FedSGD's update.

Li, Sanjabi, Beirami and Smith, *Fair Resource Allocation in Federated Learning*, ICLR
2020 (Li et al. 2020). Pure functions of Algorithms 1 and 2 and eq. (3) (L = 1/η), used by
:class:`~fairfl.strategies.qffl.QFFL` and :class:`~fairfl.strategies.qfedsgd.QFedSGD`;
the one-difference pass is in the private ``_ops`` package.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from flwr.app import ConfigRecord
from numpy.typing import ArrayLike, NDArray

from fairfl.contract import keys
from fairfl.contract.qffl import QFFL_EPSILON

Weighting = Literal["uniform", "p"]
WEIGHTINGS: tuple[str, ...] = ("uniform", "p")


def qfedavg_squared_norms(squared_distances: ArrayLike, lipschitz: float) -> NDArray[np.float64]:
    """``‖Δw_k‖² = L² ‖w^t - w̄_k‖²``: q-FedAvg's direction norms (Li et al. 2020, Alg. 2, l. 6).

    q-FedAvg is the q-FFL core below with ``g_k = Δw_k = L (w^t - w̄_k)``, so its
    unified-form weights on ``w^t - w̄_k`` are ``λ_k = L c_k`` (:func:`qffl_coefficients`
    with these norms) and λ_k's numerators ``L s_k (F_k + ε)^q`` (:func:`qffl_numerators`
    times L). A norm beyond float64 (learning rates below ~1e-154) is held at the
    largest float: λ is then 0 or too small there, never NaN. Entries that are not > 0
    (negative, NaN) pass unchanged, for :func:`qffl_coefficients` to refuse by name.
    """
    d = np.asarray(squared_distances, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(d > 0, np.minimum(lipschitz * lipschitz * d, np.finfo(np.float64).max), d)


# ---------------------------------------------------------------- the q-FFL core
# Both solvers of Li et al. 2020 end a round with the same server step (Algorithm 1, line 7;
# Algorithm 2, line 8), over the directions g_k the devices send: ∇F_k(w^t) (q-FedSGD)
# or Δw_k = L (w^t - w̄_k) (q-FedAvg). With Δ_k = (F_k + ε)^q g_k and h_k of eq. (3)
# (fairfl.contract.qffl.lipschitz_estimate):
#
#     w^{t+1} = w^t - Σ_k s_k Δ_k / Σ_k s_k h_k = w^t - Σ_k c_k g_k,
#     c_k = s_k (F_k + ε)^q / Σ_j s_j h_j                     (qffl_coefficients)
#
# QFedSGD applies it with qffl_update; QFFL with λ_k = L c_k on w^t - w̄_k
# (qfedavg_squared_norms, fused with its distance pass).


def qffl_numerators(
    losses: ArrayLike,
    *,
    q: float,
    weights: ArrayLike | None = None,
    epsilon: float = QFFL_EPSILON,
) -> NDArray[np.float64]:
    """``s_k (F_k + ε)^q``: the factor of g_k in Δ_k (Li et al. 2020, Alg. 1 l. 5, Alg. 2 l. 6).

    Unchecked (the caller checks).
    """
    f = np.asarray(losses, dtype=np.float64)
    s = np.ones_like(f) if weights is None else np.asarray(weights, dtype=np.float64)
    return s * np.float_power(f + epsilon, q)


def qffl_coefficients(
    losses: ArrayLike,
    squared_norms: ArrayLike,
    *,
    q: float,
    lipschitz: float,
    weights: ArrayLike | None = None,
    client_h: ArrayLike | None = None,
    epsilon: float = QFFL_EPSILON,
    norms_name: str = "squared_norms",
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The server step of q-FedSGD and q-FedAvg: c_k of ``w^{t+1} = w^t - Σ_k c_k g_k``.

    ``c_k = s_k (F_k + ε)^q / Σ_j s_j h_j`` with h_k of eq. (3), so that
    ``Σ_k c_k g_k = Σ_k s_k Δ_k / Σ_k s_k h_k`` (Li et al. 2020, Algorithm 1 line 7 and
    Algorithm 2 line 8; s = 1 in the paper).

    Parameters
    ----------
    losses : ArrayLike
        F_k(w^t), one per client.
    squared_norms : ArrayLike
        ``‖g_k‖²``: ``‖∇F_k(w^t)‖²`` (q-FedSGD) or ``‖Δw_k‖² = L² ‖w^t - w̄_k‖²``
        (q-FedAvg), one per client.
    q : float
        q >= 0.
    lipschitz : float
        L > 0.
    weights : ArrayLike | None
        s_k: ``None`` for the paper's unweighted sums (s = 1), else e.g. p_k.
    client_h : ArrayLike | None
        Client-sent h_k to use instead of the server's; NaN where a client sent none.
    epsilon : float
        ε added to the losses.
    norms_name : str
        The name of ``squared_norms`` in error messages.

    Returns
    -------
    tuple[NDArray[np.float64], NDArray[np.float64]]
        c (finite and >= 0 for any accepted input) and the h_k used (``inf`` where h_k
        is beyond float64).

    Raises
    ------
    ValueError
        If the inputs differ in length or are empty, hold negative or non-finite
        values, no weight is > 0, or a client h_k is not > 0.

    Notes
    -----
    ``(F_k + ε)^q`` and h_k overflow float64 for large losses or q (``1e6^60`` already
    does), and ``∞/∞`` is NaN. Numerator and denominator are therefore both divided by
    ``(F_M + ε)^q``, M the weighted client with the largest loss:
    ``c_k = s_k r_k / Σ_j s_j r_j (q ‖g_j‖² / (F_j + ε) + L)`` with
    ``r_k = ((F_k + ε)/(F_M + ε))^q <= 1`` taken through logarithms, and a client h_k
    divided the same way. Every term is then finite or +inf: c is finite (0 where the
    denominator is beyond float64: no step).
    """
    f = np.asarray(losses, dtype=np.float64)
    d = np.asarray(squared_norms, dtype=np.float64)
    s = np.ones_like(f) if weights is None else np.asarray(weights, dtype=np.float64)
    if f.ndim != 1 or f.size == 0 or d.shape != f.shape or s.shape != f.shape:
        raise ValueError(
            f"losses, {norms_name} and weights must be non-empty vectors of one "
            f"length, got shapes {f.shape}, {d.shape} and {s.shape}"
        )
    for name, values in (("losses", f), (norms_name, d), ("weights", s)):
        if not np.all(np.isfinite(values)) or np.any(values < 0):
            raise ValueError(f"{name} must be finite and >= 0, got {values.tolist()}")
    if not np.any(s > 0):
        raise ValueError(f"weights must have an entry > 0, got {s.tolist()}")
    sent = np.full_like(f, np.nan) if client_h is None else np.asarray(client_h, np.float64)
    given = np.isfinite(sent)
    if sent.shape != f.shape or np.any(sent[given] <= 0):
        raise ValueError(f"client_h must be one h_k > 0 (or NaN) per client, got {sent.tolist()}")
    base = f + epsilon
    log_top = float(np.log(base[s > 0]).max())  # log (F_M + ε)
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        ratio = np.where(s > 0, np.exp(q * (np.log(base) - log_top)), 0.0)  # r_k
        # h_j / (F_M + ε)^q; a client whose r_j underflowed to 0 adds 0 (not 0 · inf).
        server = np.where(ratio > 0, ratio * (q * d / base + lipschitz), 0.0)
        scaled = np.where(given, np.exp(np.log(sent) - q * log_top), server)
        denominator = float(np.dot(s, scaled))
        coefficients = s * ratio / denominator if math.isfinite(denominator) else 0.0 * s
        h = np.where(given, sent, np.exp(np.log(server) + q * log_top))  # 0 stays 0
    return coefficients, h


def qffl_update(
    global_arrays: Sequence[ArrayLike],
    directions: Sequence[Sequence[ArrayLike]],
    coefficients: ArrayLike,
) -> list[NDArray[Any]]:
    """``w^{t+1} = w^t - Σ_k c_k g_k`` (Li et al. 2020, Algorithm 1 line 7, Algorithm 2 line 8).

    Sums in float64, the clients added in the order given; the result has each global
    array's dtype. Non-floating arrays (counters) keep their global value.

    Parameters
    ----------
    global_arrays : Sequence[ArrayLike]
        w^t.
    directions : Sequence[Sequence[ArrayLike]]
        g_k of each client, arrays in the order (and shapes) of ``global_arrays``.
    coefficients : ArrayLike
        c_k (:func:`qffl_coefficients`), one per client.

    Returns
    -------
    list[NDArray]
        w^{t+1}.

    Raises
    ------
    ValueError
        If the numbers of clients and coefficients differ, or an array's shape does not
        match.
    """
    c = np.asarray(coefficients, dtype=np.float64)
    if c.shape != (len(directions),):
        raise ValueError(
            f"need one coefficient per client: {len(directions)} clients, "
            f"coefficients of shape {c.shape}"
        )
    updated: list[NDArray[Any]] = []
    for index, g in enumerate(global_arrays):
        g_arr = np.asarray(g)
        if not np.issubdtype(g_arr.dtype, np.floating):
            updated.append(g_arr.copy())
            continue
        step = np.zeros(g_arr.shape, dtype=np.float64)
        for k, client in enumerate(directions):
            d_arr = np.asarray(client[index])
            if d_arr.shape != g_arr.shape:
                raise ValueError(
                    f"array {index} of client {k} has shape {d_arr.shape}, the global "
                    f"one {g_arr.shape}"
                )
            step += c[k] * d_arr.astype(np.float64)
        updated.append((g_arr.astype(np.float64) - step).astype(g_arr.dtype))
    return updated


def is_real(value: object) -> bool:
    """Whether ``value`` is an int or float (not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_learning_rate(value: object) -> bool:
    """Whether ``value`` is a real number in (0, inf)."""
    return is_real(value) and 0 < value < math.inf  # type: ignore[operator]


def round_learning_rate(config: ConfigRecord, needs: str) -> float:
    """The clients' η of a round: the train config's ``lr`` (q-FFL's L = 1/η, eq. 3).

    Raises
    ------
    ValueError
        If ``config`` has no ``lr`` > 0; the message starts with ``needs`` (what the rule
        needs and the constructor argument that avoids it).
    """
    lr = config.get(keys.LR)
    if not is_learning_rate(lr):
        raise ValueError(
            f"{needs}, or send '{keys.LR}' (> 0) in the train config; the round's config "
            f"has {keys.LR}={lr!r}"
        )
    return float(lr)  # type: ignore[arg-type]


def qffl_sensitivity_share(
    losses: ArrayLike,
    *,
    q: float,
    lipschitz: float,
    clipping_norm: float,
    weights: ArrayLike | None = None,
    epsilon: float = QFFL_EPSILON,
) -> float:
    """``S / C`` of q-FedAvg's step on updates clipped to C, given the losses (central DP).

    The step is ``U = Σ_k a_k d_k / Σ_j h_j`` on the clipped updates ``d_k = w^t - w̄_k``
    (``‖d_k‖ <= C``), with ``a_k = L s_k (F_k + ε)^q`` and, from eq. (3) on
    ``Δw_k = L d_k``, ``h_k = a_k + q L² s_k (F_k + ε)^{q-1} ‖d_k‖²`` (Li et al. 2020,
    Alg. 2). Zeroing client k's update (``d_k = 0``, so ``h_k = a_k``; the adjacency of
    McMahan et al., ICLR 2018) moves U by ``(a_k d_k - (h_k - a_k) U_0) / (D' + h_k)``
    with ``U_0`` the step without it and ``D'`` the others' ``Σ h_j``. As ``a_j <= h_j``,
    ``‖U_0‖ <= C``, so the move is at most ``C h_k / (D' + h_k)``, which grows with h_k and
    shrinks with D'. With ``ĥ_k = a_k + q L² s_k (F_k + ε)^{q-1} C²`` (h_k at ‖d_k‖ = C)
    and ``D' >= A'_k = Σ_{j≠k} a_j``::

        S = C max_k ĥ_k / (A'_k + ĥ_k)

    which reads only the losses and C, never an update. At q = 0 (ĥ = a) it is
    ``C max_k a_k / Σ_j a_j``, the weighted mean's ``C λ_max``; for q > 0 it is at least
    the round's ``C max_k λ_k`` (``λ_k = a_k / Σ_j h_j``).
    """
    f = np.asarray(losses, dtype=np.float64) + epsilon
    s = np.ones_like(f) if weights is None else np.asarray(weights, dtype=np.float64)
    a = lipschitz * s * np.float_power(f, q)
    h_max = a + q * lipschitz**2 * s * np.float_power(f, q - 1) * clipping_norm**2
    others = a.sum() - a
    return float(np.max(h_max / (others + h_max)))
