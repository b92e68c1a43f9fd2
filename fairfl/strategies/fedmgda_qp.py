"""FedMGDA+'s math (Hu et al.): the Gram, the prior λ0, the step size and its decay, the QP.

Hu, Shaloudegi, Zhang and Yu, *Federated Learning Meets Multi-objective Optimization*,
IEEE TNSE 2022, https://arxiv.org/abs/2006.11489 (spec-fedmgda). Pure functions of
Algorithm 1 and eqs. (22)–(25), used by :class:`~fairfl.strategies.fedmgda.FedMGDAPlus`
and its variants; the cache-blocked Gram and step are in the private ``_ops`` package
(:func:`update_gram` computes the Gram as a round does, :func:`gram_path` says which path).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fairfl.strategies._ops.gram import check_shapes, difference_step, float_mask, gram_matrix
from fairfl.strategies._ops.gram_kernel import gram_kernel_description
from fairfl.strategies.core._checks import check_positive_int, check_real
from fairfl.strategies.core.aggregation import reweighted_average, sample_weights

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
#: 100 rounds (Hu et al., Table 8, rows η_g = 1.0, decay 1/10; §6.1.5):
#: ``paper_decay_factor(0.1, 2000)``.
PAPER_DECAY_FACTOR = 0.1 ** (100 / 2000)

#: The decays of Hu et al.'s Table 5 grid: the fraction η shrinks to by the last round
#: (1: none), searched as β = decay^{100/T} (:func:`decay_grid`).
PAPER_DECAYS: tuple[float, ...] = (1.0, 1 / 40, 1 / 30, 1 / 20, 1 / 10, 1 / 3, 1 / 2)

#: Box widths ``ub − lb`` at or below this fix the coordinate at λ0 (a tiny ε).
FIXED_WIDTH = 1e-9

QP_OPTIMAL = "optimal"
QP_PRIOR = "prior"
QP_SINGLE = "single-client"
QP_ZERO_GRAM = "zero-gram"
QP_FAILED = "failed-fallback-prior"
QP_NO_DIRECTION = "no-direction"


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
    """λ0 over the round's participants: uniform 1/n, or n_i / Σ n_j (Hu et al., §3).

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
    """η_t = η_g · β^{⌊t / decay_every⌋} with t = server_round − 1 (Hu et al., §6.1.5).

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


def decay_grid(num_rounds: int, decay_every: int = 100) -> tuple[float, ...]:
    """β of each of Table 5's decays (:data:`PAPER_DECAYS`) over ``num_rounds`` rounds.

    Empty when ``num_rounds <= decay_every``: the step never decays in such a run, so
    every β gives the same run (Hu et al. §6.1.5, η_t = η_g β^{⌊t / 100⌋}).
    """
    if num_rounds <= decay_every:
        return ()
    return tuple(paper_decay_factor(d, num_rounds, decay_every) for d in PAPER_DECAYS)


def normalize_gram(gram: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """K̄_ij = K_ij / (‖g_i‖ ‖g_j‖), the Gram of the ḡ_i; and the norms ‖g_i‖.

    Rows and columns of updates with norm <= :data:`NORM_FLOOR` are zero.
    """
    k = np.asarray(gram, dtype=np.float64)
    norms = np.sqrt(np.clip(np.diag(k), 0.0, None))
    inverse = np.where(norms > NORM_FLOOR, 1.0 / np.where(norms > NORM_FLOOR, norms, 1.0), 0.0)
    return k * inverse[:, None] * inverse[None, :], norms


def box_bounds(prior: ArrayLike, epsilon: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Bounds of Λ_ε: ``max(0, λ0 − ε) <= λ <= min(1, λ0 + ε)`` (Hu et al., eq. (25))."""
    lam0 = np.asarray(prior, dtype=np.float64)
    return np.maximum(0.0, lam0 - epsilon), np.minimum(1.0, lam0 + epsilon)


def min_norm_weights(
    gram: ArrayLike,
    prior: ArrayLike,
    epsilon: float,
    *,
    solver: str = "quadprog",
) -> tuple[NDArray[np.float64], str]:
    """λ* = argmin λᵀKλ over λ ∈ Δ with ‖λ − λ0‖_∞ <= ε (Hu et al., eqs. (23), (25)).

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
    ``w_t + Σ_i c_i (w_i − w_t)``. For float32 models the compiled kernel
    (:func:`fairfl.strategies._ops.sum_kernel.difference_step`, where
    ``FAIRFL_GRAM_KERNEL`` allows it) takes each difference and the sum in float64 and
    rounds w_{t+1} once; numpy's path uses the blocks of
    :func:`~fairfl.strategies._ops.gram.gram_matrix` in float32 (the differences exact
    or rounded once, then one float32 matrix-vector product per block, each value
    summing n terms: a relative error of ~n · 2^-24 of the step, far below the float32
    rounding of w_{t+1}), and redoes a block whose result is not finite in float64.
    Wider floats are computed in float64.
    Buffers are averaged in float64 by
    :func:`fairfl.strategies.core.aggregation.reweighted_average`.

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


def gram_path() -> str:
    """Which path FedMGDA+'s Gram of the updates takes in this process, and why.

    ``compiled AVX2 kernel`` where the C kernel built (or its cached build loaded) and
    ``FAIRFL_GRAM_KERNEL`` allows it; otherwise ``numpy (BLAS syrk):`` and the reason
    (``FAIRFL_GRAM_KERNEL=numpy``, no C compiler, a CPU without AVX2 and FMA, ...). The
    first call in a process builds or loads the kernel. A FedMGDA+ run logs the same at
    INFO (``Gram of the updates: ...``).

    Raises
    ------
    ValueError
        If ``FAIRFL_GRAM_KERNEL`` is not ``auto``, ``numpy`` or ``compiled``.
    """
    return gram_kernel_description(with_path=False)


def update_gram(
    global_arrays: Sequence[NDArray[Any]], local_arrays: Sequence[Sequence[NDArray[Any]]]
) -> NDArray[np.float64]:
    """The Gram ``K_ij = ⟨g_i, g_j⟩`` of the updates ``g_i = w_t − w_i`` that FedMGDA+ solves on.

    Eq. (25) of Hu et al. (IEEE TNSE 2022) before normalising. Float32 models go through
    the path :func:`gram_path` names (float32 differences and products, sums in float64),
    other floats through numpy in float64.

    Parameters
    ----------
    global_arrays : Sequence[NDArray]
        w_t, the global model's arrays.
    local_arrays : Sequence[Sequence[NDArray]]
        Each client's w_i, arrays in the order of ``global_arrays``.

    Returns
    -------
    NDArray[np.float64]
        The symmetric (n, n) Gram matrix.

    Raises
    ------
    ValueError
        If a client's arrays do not match ``global_arrays`` in number or shape.
    """
    return gram_matrix(global_arrays, local_arrays)
