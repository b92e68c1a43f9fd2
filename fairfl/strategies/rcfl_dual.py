"""RC-FL's math: the smoothed dual in η, its optimum, the α_i and the draws.

"Fairness-aware Federated Learning: A Robust Approach" (anonymous ICML submission;
``docs/specs/spec-rcfl.md``). Pure functions of eqs. (1)–(5) and Algorithm 1, used by
:class:`~fairfl.strategies.rcfl.RCFL`;
the dual objectives (eqs. (2), (4)) are also the tests' oracles for η.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fairfl.strategies.core._checks import check_positive_int, check_real

AlphaRule = Literal["shared", "uniform-cap"]
ALPHA_RULES: tuple[str, ...] = ("shared", "uniform-cap")


def softplus(x: ArrayLike, mu: float) -> NDArray[np.float64]:
    """``φ_μ(x) = μ log(1 + e^{x/μ})``, the smoothing of ``(x)_+`` in eq. (5) [RC-FL].

    The paper calls it "softmax". ``max(x, 0) <= φ_μ(x) <= max(x, 0) + μ log 2``.
    """
    return mu * np.logaddexp(0.0, np.asarray(x, dtype=np.float64) / mu)


def _check_inputs(
    losses: ArrayLike, p: ArrayLike, alphas: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    f = np.asarray(losses, dtype=np.float64)
    shares = np.asarray(p, dtype=np.float64)
    a = np.broadcast_to(np.asarray(alphas, dtype=np.float64), f.shape)
    if f.ndim != 1 or f.size == 0 or shares.shape != f.shape:
        raise ValueError(
            f"losses and p must be non-empty 1-D vectors of one shape, got {f.shape} and "
            f"{shares.shape}"
        )
    if not np.all(np.isfinite(f)):
        raise ValueError(f"losses must be finite, got {f.tolist()}")
    if not (np.all(shares > 0) and math.isclose(float(shares.sum()), 1.0, rel_tol=1e-9)):
        raise ValueError(f"p must be > 0 and sum to 1, got {shares.tolist()}")
    if not np.all((a > 0) & (a <= 1)):
        raise ValueError(f"alphas must be in (0, 1], got {a.tolist()}")
    return f, shares, a


def effective_weights(
    losses: ArrayLike, eta: float, alphas: ArrayLike, mu: float
) -> NDArray[np.float64]:
    """``q_i = σ((f_i − η)/μ) / α_i``, the factor on client i's model gradient.

    docs/specs/spec-rcfl.md §3 [D]: ``∇_ω f^{μ,i} = q_i ∇f̂ⁱ``; at the η-optimum ``Σ_i p_i q_i = 1``.
    """
    from scipy.special import expit  # here: keeps `import fairfl.strategies` light

    f = np.asarray(losses, dtype=np.float64)
    with np.errstate(over="ignore"):  # (f - η)/μ = ±inf gives q = 0 or 1/α
        q: NDArray[np.float64] = expit((f - eta) / mu) / np.asarray(alphas, dtype=np.float64)
    return q


def dual_objective(eta: float, losses: ArrayLike, p: ArrayLike, alphas: ArrayLike) -> float:
    """``η + Σ_i (p_i/α_i)(f_i − η)_+``: eq. (2) of [RC-FL] at fixed ω (eq. (4) with Σp = 1)."""
    f, shares, a = _check_inputs(losses, p, alphas)
    return float(eta + np.sum(shares / a * np.maximum(f - eta, 0.0)))


def smoothed_dual_objective(
    eta: float, losses: ArrayLike, p: ArrayLike, alphas: ArrayLike, mu: float
) -> float:
    """``Σ_i p_i [(1/α_i) φ_μ(f_i − η) + η]``: eq. (5) of [RC-FL] at fixed ω."""
    f, shares, a = _check_inputs(losses, p, alphas)
    return float(np.sum(shares * (softplus(f - eta, mu) / a + eta)))


def robust_loss(
    losses: ArrayLike, p: ArrayLike, alphas: ArrayLike
) -> tuple[float, NDArray[np.float64]]:
    """``f_α = max {Σ λ_i f_i : λ ∈ Δ, λ_i <= p_i/α_i}`` and the worst-case λ.

    Eq. (1) of [RC-FL] (``λ_i = p_i q_i``), solved greedily (docs/specs/spec-rcfl.md §2.4 [D]):
    walk the clients by decreasing loss, giving each ``min(p_i/α_i, mass left)``.

    Returns
    -------
    tuple[float, NDArray[np.float64]]
        f_α (= HCVaR_{1−α}, Lemma 1) and λ in input order.

    Raises
    ------
    ValueError
        If the shapes differ, a loss is not finite, p is not a positive vector summing
        to 1, or an α is outside (0, 1].
    """
    f, shares, a = _check_inputs(losses, p, alphas)
    caps = shares / a
    lambdas = np.zeros_like(f)
    left = 1.0
    for index in np.argsort(-f, kind="stable"):
        lambdas[index] = min(caps[index], left)
        left -= lambdas[index]
        if left <= 0:
            break
    return float(np.dot(lambdas, f)), lambdas


def optimal_eta_interval(losses: ArrayLike, p: ArrayLike, alphas: ArrayLike) -> tuple[float, float]:
    """Return the argmin ``[η_lo, η_hi]`` of eq. (2), where the cumulative cap crosses 1.

    docs/specs/spec-rcfl.md §2.4 [D]: sort by decreasing loss, take the first k with cap mass
    ``C_k = Σ_{j<=k} p_j/α_j >= 1``; η* is the k-th loss, or the interval between the
    (k+1)-th and k-th losses when ``C_k = 1`` exactly (``-inf`` below the smallest).
    """
    f, shares, a = _check_inputs(losses, p, alphas)
    order = np.argsort(-f, kind="stable")
    sorted_losses = f[order]
    cumulative = np.cumsum((shares / a)[order])
    k = int(np.argmax(cumulative >= 1.0 - 1e-12))
    if math.isclose(float(cumulative[k]), 1.0, rel_tol=1e-12, abs_tol=1e-12):
        lower = float(sorted_losses[k + 1]) if k + 1 < f.size else -math.inf
        return lower, float(sorted_losses[k])
    return float(sorted_losses[k]), float(sorted_losses[k])


def smoothed_optimal_eta(
    losses: ArrayLike, p: ArrayLike, alphas: ArrayLike, mu: float
) -> float | None:
    """Return the η minimising eq. (5) at fixed ω: the root of ``Σ_i p_i q_i = 1``.

    ``Σ p_i σ((f_i − η)/μ)/α_i`` falls from ``τ_α = Σ p_i/α_i`` to 0 as η grows, so the
    root exists iff ``τ_α > 1`` (docs/specs/spec-rcfl.md §4.6, the η probe); found by Brent's
    method.

    Returns
    -------
    float | None
        η*_μ, or ``None`` when ``τ_α <= 1`` (every α_i = 1: η drifts to −∞) or no
        bracket of the root is found within float64.

    Notes
    -----
    The bracket starts ``pad = max(20 μ, 1e-9 |f|)`` outside the losses: at losses of
    1e17 and more, ``f + 20 μ`` rounds back to ``f`` and a bracket growing by μ never
    moved (an endless loop). Both ends then move by doubling steps.
    """
    from scipy.optimize import brentq  # here: keeps `import fairfl.strategies` light
    from scipy.special import expit

    f, shares, a = _check_inputs(losses, p, alphas)
    check_real("mu", mu, lower=0.0, lower_open=True)
    caps = shares / a
    if float(caps.sum()) <= 1.0 + 1e-12:
        return None

    def excess(eta: float) -> float:
        with np.errstate(over="ignore"):
            return float(np.dot(caps, expit((f - eta) / mu))) - 1.0

    pad = max(20 * mu, 1e-9 * float(np.abs(f).max()))
    low = _move_until(excess, float(f.min()) - pad, -pad, lambda value: value > 0)
    high = _move_until(excess, float(f.max()) + 2 * pad, pad, lambda value: value < 0)
    if low is None or high is None:
        return None
    return float(brentq(excess, low, high, xtol=1e-12 * max(1.0, abs(high)), rtol=1e-12))


def _move_until(
    function: Callable[[float], float], start: float, step: float, done: Callable[[float], bool]
) -> float | None:
    """Move from ``start`` by doubling steps until ``done(function(x))``; None past float64."""
    point = start
    for _ in range(2100):  # 2^1100 > 1.8e308 / 1e-300: past float64 either way
        if not math.isfinite(point):
            return None
        if done(function(point)):
            return point
        point, step = point + step, 2 * step
    return None


def eta_reach(eta: float, lr_eta: float, local_steps: int, alpha: float) -> tuple[float, float]:
    """The interval κ SGD steps on η can reach from η^t (Algorithm 1's client update).

    The η-gradient of ``(1/α) φ_μ(f − η) + η`` is ``1 − q`` with
    ``q = σ((f − η)/μ)/α ∈ [0, 1/α]``, so one step of size β_η moves η by
    ``−β_η (1 − q) ∈ [−β_η, β_η (1/α − 1)]``, and κ steps reach
    ``[η − κ β_η, η + κ β_η (1/α − 1)]``. The interval is widened by ``1e-5`` of its
    scale for a client computing in float32.

    Raises
    ------
    ValueError
        If ``lr_eta`` is not > 0, ``local_steps`` not >= 1 or ``alpha`` not in (0, 1].
    """
    check_real("lr_eta", lr_eta, lower=0.0, lower_open=True)
    check_positive_int("local_steps", local_steps)
    check_real("alpha", alpha, lower=0.0, upper=1.0, lower_open=True)
    check_real("eta", eta)
    down, up = local_steps * lr_eta, local_steps * lr_eta * (1.0 / alpha - 1.0)
    slack = 1e-5 * (abs(eta) + down + up)
    return eta - down - slack, eta + up + slack


def aggregate_eta(etas: ArrayLike, weights: ArrayLike) -> float:
    """``η^{t+1} = Σ_j W_j η_j / Σ_j W_j``: Algorithm 1's average of the local η_j."""
    values = np.asarray(etas, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if values.shape != w.shape or values.size == 0:
        raise ValueError(f"etas and weights must have one shape, got {values.shape}, {w.shape}")
    if not (np.all(w >= 0) and w.sum() > 0):
        raise ValueError(f"weights must be >= 0 with a positive sum, got {w.tolist()}")
    return float(np.dot(w, values) / w.sum())


def client_alphas(
    p: ArrayLike, alpha: float, rule: AlphaRule, num_clients: int
) -> NDArray[np.float64]:
    """Per-client α_i from the run's ``alpha`` and the data shares p_i, clipped to [p_i, 1].

    ``"shared"``: α_i = α (CVaR_{1−α} of [RC-FL] §3.1). ``"uniform-cap"``: α_i = α n p_i,
    so the cap ``p_i/α_i`` on client i's mixture weight is ``1/(α n)`` for every client
    (docs/specs/spec-rcfl.md §9.11: "enforce α_i ∈ [p_i, 1]").

    Parameters
    ----------
    p : ArrayLike
        Data shares ``n_i / n`` of the clients asked for (over the whole federation).
    alpha : float
        α ∈ (0, 1].
    rule : {"shared", "uniform-cap"}
        The rule.
    num_clients : int
        n, the number of clients the shares are over.
    """
    shares = np.asarray(p, dtype=np.float64)
    if rule == "shared":
        raw = np.full_like(shares, alpha)
    elif rule == "uniform-cap":
        raw = alpha * num_clients * shares
    else:
        raise ValueError(f"rule must be one of {ALPHA_RULES}, got {rule!r}")
    return np.clip(raw, shares, 1.0)


def draw_with_replacement(
    rng: np.random.Generator, node_ids: Sequence[int], p: ArrayLike, num_draws: int
) -> dict[int, int]:
    """K draws with replacement ∝ p_i; returns the count of each drawn node.

    Theorem 2 of [RC-FL]: the 1/K average over these draws, duplicates counted by
    multiplicity, is unbiased for the p-weighted average (docs/specs/spec-rcfl.md §9.8).
    """
    if num_draws < 1:
        return {}
    picks = rng.choice(len(node_ids), size=num_draws, replace=True, p=np.asarray(p, float))
    counts = np.bincount(picks, minlength=len(node_ids))
    return {int(node_ids[i]): int(c) for i, c in enumerate(counts) if c > 0}


def round_diagnostics(
    losses: ArrayLike, p: ArrayLike, alphas: ArrayLike, eta: float, mu: float
) -> tuple[NDArray[np.float64], dict[str, float], float | None]:
    """A round's RC-FL diagnostics from the clients' losses at ω^t and η^t.

    Returns
    -------
    tuple[NDArray[np.float64], dict[str, float], float | None]
        The q_i of :func:`effective_weights`; ``rcfl-sum-pq`` (Σ p_i q_i, 1 at the
        η-optimum), ``rcfl-q-max``, ``rcfl-active`` (the share of clients whose
        σ((f_i − η)/μ) = q_i α_i exceeds 1/2), ``rcfl-robust-loss`` (f_α of eq. (1), by
        :func:`robust_loss`) and ``rcfl-eta-star`` when :func:`smoothed_optimal_eta`
        has a root; and that η*_μ (``None`` without one).
    """
    q = effective_weights(losses, eta, alphas, mu)
    a = np.broadcast_to(np.asarray(alphas, dtype=np.float64), q.shape)
    diagnostics = {
        "rcfl-sum-pq": float(np.dot(np.asarray(p, dtype=np.float64), q)),
        "rcfl-q-max": float(q.max()),
        "rcfl-active": float(np.mean(q * a > 0.5)),
        "rcfl-robust-loss": robust_loss(losses, p, alphas)[0],
    }
    eta_star = smoothed_optimal_eta(losses, p, alphas, mu)
    if eta_star is not None:
        diagnostics["rcfl-eta-star"] = eta_star
    return q, diagnostics, eta_star
