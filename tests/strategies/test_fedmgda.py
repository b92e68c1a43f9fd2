"""FedMGDA+ (paper 001): the min-norm QP, the step, the variants and the strategy."""

import logging
from unittest.mock import Mock

import numpy as np
import pytest
import qpsolvers
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from fairfl.client.objectives import local_objective
from fairfl.contract import keys
from fairfl.contract.keys import PROXIMAL_MU
from fairfl.strategies import (
    STRATEGIES,
    FedAvg,
    FedAvgN,
    FedMGDAPlain,
    FedMGDAPlus,
    MGDAProx,
    build_strategy,
)
from fairfl.strategies import fedmgda as fm
from fairfl.strategies._ops import gram as gram_ops
from fairfl.strategies._ops.gram import gram_matrix, squared_update_norms
from fairfl.strategies.fedmgda_qp import (
    box_bounds,
    fedmgda_update,
    min_norm_weights,
    normalize_gram,
    paper_decay_factor,
    prior_weights,
    step_size,
)
from tests.conftest import arrays_of, make_reply
from tests.strategies.baseline_helpers import configure, pyproject_config
from tests.strategies.reference import fedmgda_step, normalized_pseudo_gradients

# --------------------------------------------------------------------------- helpers


def direction(vectors, lam):
    """d = Σ λ_i v_i."""
    return np.asarray(lam) @ np.asarray(vectors)


def unit_rows(m):
    m = np.asarray(m, dtype=np.float64)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def reference_qp(gram, prior, epsilon):
    """An independent solve of eq. (25): scipy's SLSQP on the same QP."""
    n = len(prior)
    lower, upper = box_bounds(prior, epsilon)
    start = np.asarray(prior, dtype=np.float64)
    result = minimize(
        lambda x: x @ gram @ x,
        start,
        jac=lambda x: 2 * gram @ x,
        bounds=list(zip(lower, upper, strict=True)),
        constraints=[{"type": "eq", "fun": lambda x: x.sum() - 1, "jac": lambda x: np.ones(n)}],
        method="SLSQP",
        options={"ftol": 1e-16, "maxiter": 2000},
    )
    return result.x


def closed_form_two(g1, g2, prior, epsilon):
    """λ_1 for n = 2 (spec §1.11): clip(⟨g2 − g1, g2⟩ / ‖g1 − g2‖², l, u)."""
    low = max(0.0, prior[0] - epsilon, 1 - min(1.0, prior[1] + epsilon))
    high = min(1.0, prior[0] + epsilon, 1 - max(0.0, prior[1] - epsilon))
    return float(np.clip(np.dot(g2 - g1, g2) / np.dot(g1 - g2, g1 - g2), low, high))


GLOBAL = [np.zeros((2, 2), np.float32), np.zeros(2, np.float32)]


def model(values):
    """A two-array model whose flattened trainable vector is ``values`` (length 6)."""
    v = np.asarray(values, dtype=np.float32)
    return [v[:4].reshape(2, 2), v[4:]]


def configured(strategy, arrays=GLOBAL, nodes=(1, 2, 3), server_round=1):
    return configure(strategy, nodes, server_round, arrays)


def aggregate(strategy, locals_, counts=None, server_round=1, global_=GLOBAL):
    counts = counts or [10] * len(locals_)
    # At least the strategy's min_available_nodes (2), or sampling waits for more nodes.
    nodes = range(1, max(len(locals_), 3) + 1)
    configured(strategy, global_, nodes=nodes, server_round=server_round)
    replies = [
        make_reply(i + 1, arrays, {keys.NUM_EXAMPLES: c})
        for i, (arrays, c) in enumerate(zip(locals_, counts, strict=True))
    ]
    arrays, metrics = strategy.aggregate_train(server_round, replies)
    return [arrays[k].numpy() for k in arrays], metrics


def flat(arrays):
    return np.concatenate([np.ravel(a).astype(np.float64) for a in arrays])


# --------------------------------------------------------------------------- schedule


def test_step_size_decays_by_beta_every_period_from_round_one():
    # spec §1.11: η_t at t = 0, 99, 100, 199, 200 is η_g·(1, 1, β, β, β²); t = round − 1.
    got = [step_size(r, 2.0, 0.5, 100) for r in (1, 100, 101, 200, 201)]
    assert got == [2.0, 2.0, 1.0, 1.0, 0.5]
    assert step_size(1000, 1.5, 1.0) == 1.5


def test_paper_decay_factor_matches_the_scripts():
    # The authors' scripts pass β = 0.89 for decay 1/10 over 2000 rounds and 0.884 for
    # decay 1/40 over 3000 rounds (spec §1.7 table).
    assert paper_decay_factor(0.1, 2000) == pytest.approx(0.8913, abs=1e-4)
    assert paper_decay_factor(1 / 40, 3000) == pytest.approx(0.8843, abs=1e-4)
    assert paper_decay_factor(1.0, 50) == 1.0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: step_size(0, 1.0, 1.0), "server_round must be an int >= 1, got 0"),
        (lambda: step_size(1, 0.0, 1.0), "global_lr must be > 0, got 0.0"),
        (lambda: step_size(1, 1.0, 1.5), "decay must be <= 1, got 1.5"),
        (lambda: step_size(1, 1.0, 0.5, 0), "decay_every must be an int >= 1, got 0"),
        (lambda: paper_decay_factor(0.0, 10), "decay must be > 0, got 0.0"),
        (lambda: paper_decay_factor(0.5, 0), "num_rounds must be an int >= 1, got 0"),
    ],
)
def test_schedule_rejects_bad_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# --------------------------------------------------------------------------- the QP


def test_two_orthogonal_clients_hand_worked():
    # ḡ1 = (1, 0), ḡ2 = (0, 1): λ1 = ⟨ḡ2 − ḡ1, ḡ2⟩ / ‖ḡ1 − ḡ2‖² = 1/2, d = (½, ½).
    lam, status = min_norm_weights(np.eye(2), [0.5, 0.5], 1.0)
    assert status == "optimal"
    np.testing.assert_allclose(lam, [0.5, 0.5], atol=1e-9)
    # Prior (0.8, 0.2) with ε = 0.1: the box is λ1 ∈ [0.7, 0.9], so λ1 = clip(½) = 0.7.
    lam, _ = min_norm_weights(np.eye(2), [0.8, 0.2], 0.1)
    np.testing.assert_allclose(lam, [0.7, 0.3], atol=1e-9)


def test_two_unnormalised_clients_hand_worked():
    # FedMGDA (no normalisation): g1 = (2, 0), g2 = (0, 1):
    # λ1 = ⟨g2 − g1, g2⟩ / ‖g1 − g2‖² = 1/5, d = (0.4, 0.8), ‖d‖² = 0.8.
    g = np.array([[2.0, 0.0], [0.0, 1.0]])
    lam, _ = min_norm_weights(g @ g.T, [0.5, 0.5], 1.0)
    np.testing.assert_allclose(lam, [0.2, 0.8], atol=1e-9)
    np.testing.assert_allclose(direction(g, lam), [0.4, 0.8], atol=1e-9)


@pytest.mark.parametrize("epsilon", [0.0, 0.05, 0.2, 0.5, 1.0])
@pytest.mark.parametrize("prior", [(0.5, 0.5), (0.7, 0.3)])
def test_two_clients_match_the_closed_form(epsilon, prior):
    rng = np.random.default_rng(int(epsilon * 100) + int(prior[0] * 10))
    for _ in range(20):
        g = unit_rows(rng.standard_normal((2, 5)))
        lam, _ = min_norm_weights(g @ g.T, prior, epsilon)
        expected = closed_form_two(g[0], g[1], prior, epsilon)
        assert lam[0] == pytest.approx(expected, abs=1e-8)
        assert lam.sum() == pytest.approx(1.0, abs=1e-12)


def test_epsilon_zero_returns_the_prior_without_solving(monkeypatch):
    monkeypatch.setattr(qpsolvers, "solve_problem", Mock(side_effect=AssertionError))
    lam, status = min_norm_weights(np.eye(3), [0.2, 0.3, 0.5], 0.0)
    assert status == "prior"
    np.testing.assert_array_equal(lam, [0.2, 0.3, 0.5])


def test_orthonormal_gives_uniform_and_antipodal_gives_zero_direction():
    lam, _ = min_norm_weights(np.eye(4), np.full(4, 0.25), 1.0)
    np.testing.assert_allclose(lam, 0.25, atol=1e-9)
    assert np.linalg.norm(direction(np.eye(4), lam)) == pytest.approx(0.5, abs=1e-9)
    g = np.array([[1.0, 2.0], [-1.0, -2.0]]) / np.sqrt(5)
    lam, _ = min_norm_weights(g @ g.T, [0.5, 0.5], 1.0)
    assert np.linalg.norm(direction(g, lam)) < 1e-6


@pytest.mark.parametrize("copies", [2, 4])
def test_duplicate_clients_singular_gram_is_solved(copies):
    rng = np.random.default_rng(copies)
    base = unit_rows(rng.standard_normal((3, 6)))
    g = np.vstack([base, np.repeat(base[:1], copies - 1, axis=0)])  # client 0 repeated
    gram = g @ g.T
    assert np.linalg.matrix_rank(gram) == 3  # singular: quadprog alone refuses it
    prior = np.full(len(g), 1 / len(g))
    lam, status = min_norm_weights(gram, prior, 1.0)
    assert status == "optimal"
    reference = reference_qp(gram, prior, 1.0)
    np.testing.assert_allclose(direction(g, lam), direction(g, reference), atol=1e-6)
    assert lam @ gram @ lam <= reference @ gram @ reference + 1e-9


def test_more_clients_than_dimensions():
    rng = np.random.default_rng(3)
    g = unit_rows(rng.standard_normal((12, 3)))  # n > d: 0 is likely in the hull
    prior = np.full(12, 1 / 12)
    lam, status = min_norm_weights(g @ g.T, prior, 1.0)
    assert status == "optimal"
    reference = reference_qp(g @ g.T, prior, 1.0)
    np.testing.assert_allclose(direction(g, lam), direction(g, reference), atol=1e-5)


def random_instance(rng):
    n = int(rng.integers(2, 13))
    d = int(rng.integers(2, 30))
    # Correlated updates (a shared component), as clients of one model tend to send.
    g = unit_rows(rng.standard_normal((n, d)) + rng.uniform(0, 2) * rng.standard_normal(d))
    prior = rng.dirichlet(np.ones(n)) if rng.random() < 0.5 else np.full(n, 1 / n)
    epsilon = float(rng.choice([0.02, 0.1, 0.3, 1.0]))
    return g, prior, epsilon


def test_direction_agrees_with_an_independent_scipy_solve():
    rng = np.random.default_rng(2024)
    for _ in range(60):
        g, prior, epsilon = random_instance(rng)
        gram = g @ g.T
        lam, status = min_norm_weights(gram, prior, epsilon)
        assert status == "optimal"
        reference = reference_qp(gram, prior, epsilon)
        # The min-norm direction is unique even where λ is not (spec §7.2.9).
        np.testing.assert_allclose(direction(g, lam), direction(g, reference), atol=1e-5)
        assert lam @ gram @ lam <= reference @ gram @ reference + 1e-10


def test_common_descent_kkt_at_epsilon_one():
    # At ε = 1, ⟨ḡ_i, d⟩ >= ‖d‖² for every client (spec §1.11): no participant's loss
    # rises to first order (paper 001, eq. (24)).
    rng = np.random.default_rng(7)
    for _ in range(20):
        g, _, _ = random_instance(rng)
        lam, _ = min_norm_weights(g @ g.T, np.full(len(g), 1 / len(g)), 1.0)
        d = direction(g, lam)
        assert np.min(g @ d) >= d @ d - 1e-8


def test_reply_order_does_not_change_the_direction():
    rng = np.random.default_rng(11)
    for _ in range(20):
        g, prior, epsilon = random_instance(rng)
        lam, _ = min_norm_weights(g @ g.T, prior, epsilon)
        order = rng.permutation(len(g))
        lam_p, _ = min_norm_weights(g[order] @ g[order].T, prior[order], epsilon)
        np.testing.assert_allclose(direction(g[order], lam_p), direction(g, lam), atol=1e-7)


def test_unnormalised_scale_does_not_change_lambda():
    # spec §7.2.2: tiny unnormalised Grams (entries ~1e-8) must not fall back to λ0.
    rng = np.random.default_rng(5)
    g = rng.standard_normal((5, 8))
    prior = np.full(5, 0.2)
    lam, _ = min_norm_weights(g @ g.T, prior, 1.0)
    lam_small, _ = min_norm_weights(1e-8 * (g @ g.T), prior, 1.0)
    np.testing.assert_allclose(lam_small, lam, atol=1e-7)
    assert np.abs(lam - prior).max() > 0.05


def test_solver_failure_falls_back_to_the_prior(monkeypatch):
    monkeypatch.setattr(
        qpsolvers, "solve_problem", Mock(side_effect=qpsolvers.ProblemError("not PD"))
    )
    lam, status = min_norm_weights(np.eye(3), [0.2, 0.3, 0.5], 1.0)
    assert status == "failed-fallback-prior"
    np.testing.assert_array_equal(lam, [0.2, 0.3, 0.5])


def test_single_client_and_zero_gram():
    assert min_norm_weights([[4.0]], [1.0], 1.0)[1] == "single-client"
    lam, status = min_norm_weights(np.zeros((2, 2)), [0.5, 0.5], 1.0)
    assert status == "zero-gram"
    np.testing.assert_array_equal(lam, [0.5, 0.5])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((np.eye(2), [0.5, 0.5], -0.1), "epsilon must be >= 0, got -0.1"),
        ((np.eye(3), [0.5, 0.5], 1.0), r"gram must have shape \(2, 2\) to match prior"),
        (([[1.0, 0.5], [0.0, 1.0]], [0.5, 0.5], 1.0), "gram must be a finite symmetric"),
        (([[np.nan, 0.0], [0.0, 1.0]], [0.5, 0.5], 1.0), "gram must be a finite symmetric"),
        ((np.eye(2), [0.6, 0.6], 1.0), "prior must be >= 0 and sum to 1"),
        ((np.eye(2), [1.5, -0.5], 1.0), "prior must be >= 0 and sum to 1"),
        ((np.zeros((0, 0)), [], 1.0), "prior must be a non-empty 1-D vector"),
    ],
)
def test_min_norm_weights_rejects_bad_input(args, message):
    with pytest.raises(ValueError, match=message):
        min_norm_weights(*args)


def test_unknown_solver_is_rejected():
    with pytest.raises(ValueError, match="qp_solver must be one of the installed"):
        min_norm_weights(np.eye(2), [0.5, 0.5], 1.0, solver="no-such-solver")


@st.composite
def qp_instances(draw):
    n = draw(st.integers(1, 8))
    d = draw(st.integers(1, 6))
    entries = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)
    g = np.array(draw(st.lists(st.lists(entries, min_size=d, max_size=d), min_size=n, max_size=n)))
    raw = np.array(draw(st.lists(st.floats(0.01, 1.0), min_size=n, max_size=n)))
    epsilon = draw(st.floats(0.0, 1.5))
    scale = draw(st.sampled_from([1e-9, 1.0, 1e6]))
    return scale * g, raw / raw.sum(), epsilon


@settings(max_examples=150, deadline=None)
@given(qp_instances())
def test_weights_stay_on_the_simplex_and_in_the_box(instance):
    g, prior, epsilon = instance
    lam, status = min_norm_weights(g @ g.T, prior, epsilon)
    lower, upper = box_bounds(prior, epsilon)
    assert status in {"optimal", "prior", "single-client", "zero-gram"}
    assert np.all(np.isfinite(lam))
    assert lam.sum() == pytest.approx(1.0, abs=1e-9)
    assert np.all(lam >= lower - 1e-9) and np.all(lam <= upper + 1e-9)


# --------------------------------------------------------------------------- pseudo-gradients


def test_gram_matches_the_reference_vectors_across_blocks(monkeypatch):
    rng = np.random.default_rng(0)
    global_ = [
        rng.standard_normal((7, 5)).astype(np.float32),
        rng.standard_normal(3).astype(np.float32),
    ]
    locals_ = [
        [a + 0.01 * rng.standard_normal(a.shape).astype(np.float32) for a in global_]
        for _ in range(4)
    ]
    u, norms = normalized_pseudo_gradients(global_, locals_)
    expected = (u * norms[:, None]) @ (u * norms[:, None]).T
    global64 = [a.astype(np.float64) for a in global_]
    locals64 = [[a.astype(np.float64) for a in local] for local in locals_]
    # Float32 models: float32 blocks summed in float64 (a few float32 roundings).
    np.testing.assert_allclose(gram_matrix(global_, locals_), expected, rtol=1e-6)
    np.testing.assert_allclose(gram_matrix(global64, locals64), expected, rtol=1e-12)
    # A block of 3 columns: 38 parameters cross array boundaries and end mid-block.
    monkeypatch.setattr(gram_ops, "GRAM_BLOCK_BYTES", 3 * 8 * 4)
    monkeypatch.setattr(gram_ops, "GRAM_MIN_COLUMNS", 1)
    np.testing.assert_allclose(gram_matrix(global_, locals_), expected, rtol=1e-6)
    np.testing.assert_allclose(gram_matrix(global64, locals64), expected, rtol=1e-12)
    k_bar, k_norms = normalize_gram(expected)
    np.testing.assert_allclose(k_bar, u @ u.T, atol=1e-12)
    np.testing.assert_allclose(k_norms, norms, rtol=1e-12)


@pytest.mark.parametrize("clients", [9, 10, 11, 12, 16, 19])
def test_gram_rows_past_a_multiple_of_eight_go_through_gemv(monkeypatch, clients):
    # n mod 8 in 1..3: the last rows are gemv products (GRAM_SPLIT_ROWS), the rest one
    # syrk; n mod 8 in {0, 4}: syrk only. Either way the float64 reference, and a NaN
    # in a split-off row spoils only its row and column.
    rng = np.random.default_rng(clients)
    global_ = [rng.standard_normal(5000).astype(np.float32), np.zeros(7, np.float32)]
    locals_ = [
        [a + rng.standard_normal(a.shape).astype(np.float32) * 0.01 for a in global_]
        for _ in range(clients)
    ]
    monkeypatch.setattr(gram_ops, "GRAM_CHUNK", 1024)  # several chunks per block
    u, norms = normalized_pseudo_gradients(global_, locals_)
    expected = (u * norms[:, None]) @ (u * norms[:, None]).T
    atol = 1e-6 * expected.max()  # float32 products: ~1e-7 of the largest entry
    np.testing.assert_allclose(gram_matrix(global_, locals_), expected, rtol=1e-6, atol=atol)
    locals_[-1][0][3] = np.nan
    gram = gram_matrix(global_, locals_)
    assert np.all(np.isnan(gram[-1])) and np.all(np.isnan(gram[:, -1]))
    assert np.all(np.isfinite(gram[:-1, :-1]))
    np.testing.assert_allclose(gram[:-1, :-1], expected[:-1, :-1], rtol=1e-6, atol=atol)


def test_pseudo_gradient_sign_and_norm_hand_worked():
    # w_t = 0, w_1 = (3, 4, 0, ...): g_1 = w_t − w_1 = (−3, −4, 0, ...), ‖g_1‖ = 5.
    u, norms = normalized_pseudo_gradients(GLOBAL, [model([3, 4, 0, 0, 0, 0])])
    assert norms.tolist() == [5.0]
    np.testing.assert_allclose(u[0], [-0.6, -0.8, 0, 0, 0, 0])


def test_gram_precision_float32_blocks_and_float64_models():
    # 200,000 float32 entries: float32 block products (at most GRAM_CHUNK terms
    # each) summed in float64 stay far inside GRAM_RTOL of the exact Gram (spec §7.2.4);
    # a float64 model is computed in float64, exact to rounding.
    rng = np.random.default_rng(1)
    w = rng.standard_normal(200_000).astype(np.float32)
    locals_ = [[w - rng.standard_normal(w.size).astype(np.float32) * 1e-3] for _ in range(2)]
    g = np.stack([w.astype(np.longdouble) - loc[0].astype(np.longdouble) for loc in locals_])
    exact = np.array([[np.sum(a * b) for b in g] for a in g], dtype=np.float64)
    ours_error = np.abs(gram_matrix([w], locals_) - exact).max() / exact.max()
    assert ours_error < 1e-6 < gram_ops.GRAM_RTOL
    locals64 = [[loc[0].astype(np.float64)] for loc in locals_]
    float64_error = np.abs(gram_matrix([w.astype(np.float64)], locals64) - exact).max()
    assert float64_error / exact.max() < 1e-12


def test_gram_rejects_mismatched_arrays():
    with pytest.raises(ValueError, match="every client must send arrays shaped like"):
        gram_matrix(GLOBAL, [[np.zeros(3)]])
    with pytest.raises(ValueError, match="every client must send arrays shaped like"):
        squared_update_norms(GLOBAL, [[np.zeros(3)]])


def test_squared_update_norms_hand_worked():
    # w_t = 1: w_1 − w_t = (−4, 3, 0, 0, 0, 0) → 25; w_2 − w_t = (1, 1, 1, 1, 1, 1) → 6;
    # w_3 = w_t → 0. Buffers (mask False) add nothing: 25 + 0 with a masked second array.
    w_t = model(np.ones(6))
    locals_ = [model([-3, 4, 1, 1, 1, 1]), model(np.full(6, 2.0)), model(np.ones(6))]
    assert squared_update_norms(w_t, locals_).tolist() == [25.0, 6.0, 0.0]
    masked = squared_update_norms(w_t, locals_, trainable=[True, False])
    assert masked.tolist() == [25.0, 4.0, 0.0]


def test_squared_update_norms_are_the_gram_diagonal_across_blocks(monkeypatch):
    rng = np.random.default_rng(5)
    global_ = [
        rng.standard_normal((7, 5)).astype(np.float32),
        rng.standard_normal(3).astype(np.float32),
    ]
    locals_ = [
        [a + 0.01 * rng.standard_normal(a.shape).astype(np.float32) for a in global_]
        for _ in range(4)
    ]
    _, norms = normalized_pseudo_gradients(global_, locals_)  # float64 reference
    global64 = [a.astype(np.float64) for a in global_]
    locals64 = [[a.astype(np.float64) for a in local] for local in locals_]
    for block_bytes in (gram_ops.GRAM_BLOCK_BYTES, 3 * 8 * 4):  # 3 columns: blocks cross arrays
        monkeypatch.setattr(gram_ops, "GRAM_BLOCK_BYTES", block_bytes)
        monkeypatch.setattr(gram_ops, "GRAM_MIN_COLUMNS", 1)
        ours = squared_update_norms(global_, locals_)
        np.testing.assert_allclose(ours, norms**2, rtol=1e-6)
        np.testing.assert_allclose(ours, np.diag(gram_matrix(global_, locals_)), rtol=1e-6)
        np.testing.assert_allclose(squared_update_norms(global64, locals64), norms**2, rtol=1e-12)


def test_squared_update_norms_overflow_falls_back_and_a_nan_stays_in_its_entry():
    # 2e19² = 4e38 overflows float32 (max 3.4e38): the block is redone in float64.
    global_ = [np.zeros(3, np.float32)]
    big = [[np.full(3, 2e19, np.float32)], [np.ones(3, np.float32)]]
    g1 = np.float64(np.float32(2e19))
    np.testing.assert_allclose(squared_update_norms(global_, big), [3 * g1 * g1, 3.0], rtol=1e-15)
    nan = [[np.array([1, 0, 0], np.float32)], [np.array([0, np.nan, 0], np.float32)]]
    squares = squared_update_norms(global_, nan)
    assert squares[0] == 1.0 and np.isnan(squares[1])


def test_fedmgda_step_hand_worked():
    # w_t = 1, g_1 = w_t − w_1 = (1, 0, ...)·2, g_2 = (0, 1, 0, ...)·4, λ = (½, ½), η = 2:
    # w_{t+1} = w_t − 2·(½·(1, 0) + ½·(0, 1)) = 1 − (1, 1, 0, ...).
    w_t = model(np.ones(6))
    w1 = model([-1, 1, 1, 1, 1, 1])
    w2 = model([1, -3, 1, 1, 1, 1])
    new = fedmgda_step(w_t, [w1, w2], [0.5, 0.5], 2.0, norms=[2.0, 4.0])
    np.testing.assert_allclose(flat(new), [0, 0, 1, 1, 1, 1], atol=1e-7)
    assert all(a.dtype == np.float32 for a in new)
    # Unnormalised, η = 1, λ = λ0: plain FedAvg, Σ λ_i w_i.
    plain = fedmgda_step(w_t, [w1, w2], [0.25, 0.75], 1.0)
    np.testing.assert_allclose(flat(plain), 0.25 * flat(w1) + 0.75 * flat(w2), atol=1e-7)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.lists(st.floats(-1e3, 1e3, allow_nan=False, width=32), min_size=6, max_size=6),
        min_size=1,
        max_size=5,
    ),
    st.sampled_from([np.float32, np.float64]),
)
def test_norms_pass_is_the_gram_diagonal_and_the_measured_step_its_length(rows, dtype):
    # Invariants of the ε = 0 path: the norms pass agrees with the Gram's diagonal, and
    # the measured length is ‖w_{t+1} − w_t‖ of the model it returns.
    global_ = [np.arange(4, dtype=dtype).reshape(2, 2), np.ones(2, dtype=dtype)]
    locals_ = [[np.asarray(r[:4], dtype).reshape(2, 2), np.asarray(r[4:], dtype)] for r in rows]
    squares = squared_update_norms(global_, locals_)
    gram = gram_matrix(global_, locals_)
    np.testing.assert_allclose(squares, np.diag(gram), rtol=1e-6, atol=1e-6)
    lam = np.full(len(rows), 1.0 / len(rows))
    new, length = fedmgda_update(global_, locals_, lam, 0.5, measure=True)
    moved = np.linalg.norm(flat(new) - flat(global_))
    assert length == pytest.approx(moved, rel=1e-5, abs=1e-3)


def test_fedmgda_update_measures_the_step_length_hand_worked():
    # w_t = 0, w_1 = (3, 4, 0, …): g_1 = (−3, −4), ‖g_1‖ = 5; λ = 1, η = 2:
    # w_{t+1} = 0 − 2·(−0.6, −0.8) = (1.2, 1.6), a step of length 2 = η‖ḡ_1‖.
    new, length = fedmgda_update(
        GLOBAL, [model([3, 4, 0, 0, 0, 0])], [1.0], 2.0, norms=[5.0], measure=True
    )
    np.testing.assert_allclose(flat(new), [1.2, 1.6, 0, 0, 0, 0], atol=1e-7)
    assert length == pytest.approx(2.0, rel=1e-7)
    assert fedmgda_update(GLOBAL, [model([3, 4, 0, 0, 0, 0])], [1.0], 2.0)[1] == 0.0


def test_a_client_with_weight_zero_is_not_read():
    # λ_2 = 0: its NaN would spoil cᵀD (0·NaN = NaN) if it were read at all.
    spoiled = model([np.nan, 0, 0, 0, 0, 0])
    new = fedmgda_step(GLOBAL, [model([2, 0, 0, 0, 0, 0]), spoiled], [1.0, 0.0], 1.0)
    np.testing.assert_allclose(flat(new), [2, 0, 0, 0, 0, 0], atol=0)
    # Every weight 0: the model does not move (and is a copy, not w_t itself).
    still = fedmgda_step(GLOBAL, [spoiled], [0.0], 1.0)
    assert all(np.array_equal(a, b) and a is not b for a, b in zip(still, GLOBAL, strict=True))


def test_fedmgda_step_rejects_bad_norms():
    with pytest.raises(ValueError, match="norms must be > 0, one per client"):
        fedmgda_step(GLOBAL, [GLOBAL], [1.0], 1.0, norms=[0.0])


def test_buffers_stay_out_of_the_norm_and_are_averaged_with_the_prior():
    names = ["fc.weight", "bn.running_mean", "bn.num_batches_tracked"]
    w_t = [np.zeros(2, np.float32), np.zeros(2, np.float32), np.array(5, np.int64)]
    w1 = [np.array([1, 0], np.float32), np.array([10, 10], np.float32), np.array(9, np.int64)]
    w2 = [np.array([0, 2], np.float32), np.array([30, 30], np.float32), np.array(9, np.int64)]
    mask = fm.trainable_mask(names, w_t)
    assert mask == [True, False, False]
    gram = gram_matrix(w_t, [w1, w2], trainable=mask)
    np.testing.assert_allclose(np.diag(gram), [1.0, 4.0])  # buffers add nothing
    new = fedmgda_step(
        w_t,
        [w1, w2],
        [0.5, 0.5],
        1.0,
        norms=[1.0, 2.0],
        trainable=mask,
        buffer_weights=[0.5, 0.5],
    )
    np.testing.assert_allclose(new[0], [0.5, 0.5])  # −(½·(−1, 0) + ½·(0, −1))
    np.testing.assert_allclose(new[1], [20, 20])  # λ0-average of the statistics
    assert new[2] == 5 and new[2].dtype == np.int64  # counters keep the global value


def test_prior_weights():
    np.testing.assert_allclose(prior_weights([10, 30], "uniform"), [0.5, 0.5])
    np.testing.assert_allclose(prior_weights([10, 30], "num-examples"), [0.25, 0.75])
    with pytest.raises(ValueError, match="prior must be one of"):
        prior_weights([1], "size")


# --------------------------------------------------------------------------- strategy


def test_strategy_step_records_lambda_status_and_moves_along_minus_d():
    # Clients move to w_1 = (1, 0, …) and w_2 = (0, 1, …) from w_t = 0:
    # g_1 = (−1, 0), g_2 = (0, −1) (orthonormal), λ = (½, ½), d = −(½, ½),
    # so w_{t+1} = w_t − η d = (½, ½)·η with η = 1.
    strategy = FedMGDAPlus()
    new, metrics = aggregate(strategy, [model([1, 0, 0, 0, 0, 0]), model([0, 1, 0, 0, 0, 0])])
    np.testing.assert_allclose(flat(new), [0.5, 0.5, 0, 0, 0, 0], atol=1e-6)
    record = strategy.train_records[1]
    assert record.weights == pytest.approx({1: 0.5, 2: 0.5}, abs=1e-9)
    assert record.diagnostics["qp-status"] == "optimal"
    assert record.diagnostics["direction-norm"] == pytest.approx(np.sqrt(0.5), abs=1e-9)
    assert metrics["qp-failed"] == 0 and metrics["step-size"] == 1.0
    assert "qp-status" not in metrics  # strings go to rounds.jsonl, not the MetricRecord


def test_normalisation_removes_a_clients_scale():
    # Client 2's update is 10× client 1's and orthogonal: normalised, the step is the
    # same as with equal sizes.
    small = [model([1, 0, 0, 0, 0, 0]), model([0, 1, 0, 0, 0, 0])]
    big = [model([1, 0, 0, 0, 0, 0]), model([0, 10, 0, 0, 0, 0])]
    a, _ = aggregate(FedMGDAPlus(), small)
    b, _ = aggregate(FedMGDAPlus(), big)
    np.testing.assert_allclose(flat(a), flat(b), atol=1e-6)


@pytest.mark.parametrize("prior", ["uniform", "num-examples"])
def test_fedavg_n_is_epsilon_zero(prior):
    # ε = 0: λ = λ0, w_{t+1} = w_t − η Σ λ0_i g_i / ‖g_i‖ (paper 001 §6.1, FedAvg-n).
    rng = np.random.default_rng(4)
    locals_ = [model(rng.standard_normal(6)) for _ in range(3)]
    counts = [10, 20, 70]
    new, _ = aggregate(FedAvgN(global_lr=0.5, prior=prior), locals_, counts)
    same, _ = aggregate(FedMGDAPlus(epsilon=0.0, global_lr=0.5, prior=prior), locals_, counts)
    lam0 = prior_weights(counts, prior)
    g = -np.stack([flat(w) for w in locals_])
    expected = -0.5 * lam0 @ unit_rows(g)
    np.testing.assert_allclose(flat(new), expected, atol=1e-6)
    np.testing.assert_allclose(flat(same), flat(new), atol=0)


def test_fedavg_n_computes_only_the_norms_and_measures_d_on_the_step(monkeypatch):
    # ε = 0 needs no QP, so no Gram: ‖g_i‖ only, and ‖d‖ from the step. Orthonormal
    # updates (1, 0, …), (0, 1, …) → ḡ = −e_1, −e_2, λ0 = (½, ½): d = −(½, ½), ‖d‖ = √½;
    # η = 0.5: w_{t+1} = 0.5·(½, ½).
    def no_gram(*args, **kwargs):
        raise AssertionError("FedAvg-n computed the Gram matrix")

    monkeypatch.setattr(fm, "gram_matrix", no_gram)
    strategy = FedAvgN(global_lr=0.5)
    new, metrics = aggregate(strategy, [model([1, 0, 0, 0, 0, 0]), model([0, 1, 0, 0, 0, 0])])
    np.testing.assert_allclose(flat(new), [0.25, 0.25, 0, 0, 0, 0], atol=1e-7)
    assert metrics["direction-norm"] == pytest.approx(np.sqrt(0.5), rel=1e-7)
    assert strategy.train_records[1].diagnostics["qp-status"] == "prior"
    # One reply: λ = 1, the single-client status, ‖d‖ = ‖ḡ_1‖ = 1.
    single = FedAvgN()
    _, metrics = aggregate(single, [model([0, 0, 3, 4, 0, 0])])
    assert metrics["direction-norm"] == pytest.approx(1.0, rel=1e-7)
    assert single.train_records[1].diagnostics["qp-status"] == "single-client"


def test_unnormalised_epsilon_zero_unit_step_is_exact_fedavg():
    rng = np.random.default_rng(6)
    global_ = model(rng.standard_normal(6))
    locals_ = [model(rng.standard_normal(6)) for _ in range(3)]
    counts = [5, 15, 30]
    ours, _ = aggregate(
        FedMGDAPlus(epsilon=0.0, normalize=False, prior="num-examples"),
        locals_,
        counts,
        global_=global_,
    )
    fedavg, _ = aggregate(FedAvg(), locals_, counts, global_=global_)
    np.testing.assert_allclose(flat(ours), flat(fedavg), atol=1e-6)


def test_scaling_attacker_moves_fedavg_but_not_fedmgda_plus():
    # One client multiplies its update w_t − w_i by 100 (paper 001 §6.2.2 scaling attack).
    rng = np.random.default_rng(9)
    global_ = model(rng.standard_normal(6))
    honest = [model(flat(global_) - 0.05 * rng.standard_normal(6)) for _ in range(5)]
    attacked = list(honest)
    attacked[0] = model(flat(global_) - 100 * (flat(global_) - flat(honest[0])))
    moves = {}
    for name, make in [("fedavg", FedAvg), ("fedmgda+", FedMGDAPlus)]:
        clean, _ = aggregate(make(), honest, global_=global_)
        hit, _ = aggregate(make(), attacked, global_=global_)
        moves[name] = np.linalg.norm(flat(hit) - flat(clean))
    assert moves["fedavg"] > 1.0
    assert moves["fedmgda+"] < 1e-5 * moves["fedavg"]


def test_zero_updates_get_no_weight_and_an_all_zero_round_keeps_the_model(caplog):
    strategy = FedMGDAPlus()
    with caplog.at_level(logging.WARNING, logger="fairfl"):
        new, metrics = aggregate(
            strategy, [GLOBAL, model([1, 0, 0, 0, 0, 0]), model([0, 1, 0, 0, 0, 0])]
        )
        aggregate(strategy, [GLOBAL, model([1, 0, 0, 0, 0, 0])], server_round=2)
    assert strategy.train_records[1].weights[1] == 0.0
    assert metrics["zero-updates"] == 1
    np.testing.assert_allclose(flat(new), [0.5, 0.5, 0, 0, 0, 0], atol=1e-6)
    assert sum("norm <= 1e-12 get weight 0" in r.message for r in caplog.records) == 1
    same, _ = aggregate(FedMGDAPlus(), [GLOBAL, GLOBAL])
    np.testing.assert_array_equal(flat(same), flat(GLOBAL))
    assert FedMGDAPlus().rule_name == "FedMGDA+"


def test_no_direction_status_when_every_update_is_zero():
    strategy = FedMGDAPlus()
    aggregate(strategy, [GLOBAL, GLOBAL])
    assert strategy.train_records[1].diagnostics["qp-status"] == "no-direction"
    assert strategy.train_records[1].weights == {1: 0.0, 2: 0.0}


def test_solver_failure_is_logged_once_and_recorded(monkeypatch, caplog):
    monkeypatch.setattr(qpsolvers, "solve_problem", Mock(side_effect=ValueError("boom")))
    strategy = FedMGDAPlus()
    locals_ = [model([1, 0, 0, 0, 0, 0]), model([0, 2, 0, 0, 0, 0])]
    with caplog.at_level(logging.WARNING, logger="fairfl"):
        _, metrics = aggregate(strategy, locals_)
        aggregate(strategy, locals_, server_round=2)
    assert metrics["qp-failed"] == 1
    assert strategy.train_records[1].diagnostics["qp-status"] == "failed-fallback-prior"
    assert sum("QP solver quadprog failed" in r.message for r in caplog.records) == 1


def test_strategy_is_invariant_to_reply_order():
    rng = np.random.default_rng(12)
    locals_ = [model(rng.standard_normal(6)) for _ in range(4)]
    strategy = FedMGDAPlus(epsilon=0.3)
    configured(strategy, nodes=[1, 2, 3, 4])
    replies = [make_reply(i + 1, w, {keys.NUM_EXAMPLES: 10}) for i, w in enumerate(locals_)]
    forward, _ = strategy.aggregate_train(1, replies)
    backward, _ = strategy.aggregate_train(1, replies[::-1])
    for key in forward:
        np.testing.assert_array_equal(forward[key].numpy(), backward[key].numpy())


def test_step_size_schedule_in_the_strategy():
    strategy = FedMGDAPlus(global_lr=2.0, global_lr_decay=0.5, decay_every=1)
    _, m1 = aggregate(strategy, [model([1, 0, 0, 0, 0, 0])], server_round=1)
    _, m3 = aggregate(strategy, [model([1, 0, 0, 0, 0, 0])], server_round=3)
    assert (m1["step-size"], m3["step-size"]) == (2.0, 0.5)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.lists(
            st.floats(-1e4, 1e4, allow_nan=False, allow_infinity=False), min_size=6, max_size=6
        ),
        min_size=1,
        max_size=6,
    ),
    st.floats(0.0, 1.0),
    st.booleans(),
)
def test_strategy_outputs_are_finite_and_weights_on_the_simplex(values, epsilon, normalize):
    strategy = FedMGDAPlus(epsilon=epsilon, normalize=normalize)
    new, _ = aggregate(strategy, [model(v) for v in values])
    assert all(np.all(np.isfinite(a)) for a in new)
    weights = np.array(list(strategy.train_records[1].weights.values()))
    assert np.all(weights >= -1e-9)
    assert weights.sum() == pytest.approx(1.0, abs=1e-9) or weights.sum() == 0.0


# --------------------------------------------------------------------------- variants, config


def test_mgda_prox_sends_proximal_mu_that_the_client_reads():
    messages = configured(MGDAProx())
    config = messages[0].content["config"]
    assert config[PROXIMAL_MU] == 0.2
    assert local_objective(config).proximal_mu == 0.2
    plain = configured(FedMGDAPlus())[0].content["config"]
    assert PROXIMAL_MU not in plain
    assert configured(FedMGDAPlus(proximal_mu=0.05))[0].content["config"][PROXIMAL_MU] == 0.05


def test_presets_fix_their_settings():
    assert FedAvgN().settings()["epsilon"] == 0.0 and FedAvgN().normalize
    plain = FedMGDAPlain().settings()
    assert (plain["normalize"], plain["epsilon"], plain["global_lr"]) == (False, 1.0, 1.0)
    assert plain["global_lr_decay"] == 1.0
    prox = MGDAProx().settings()
    assert (prox["proximal_mu"], prox["normalize"], prox["epsilon"]) == (0.2, True, 1.0)


def test_registry_builds_every_variant_from_run_config():
    config = {
        "fedmgda-epsilon": 0.1,
        "fedmgda-global-lr": 1.5,
        "fedmgda-global-lr-decay": 0.89,
        "fedmgda-decay-every": 100,
        "fedmgda-normalize": True,
        "fedmgda-prior": "num-examples",
        "fedmgda-proximal-mu": 0.0,
        "fedmgda-qp-solver": "quadprog",
        "mgda-prox-mu": 0.3,
    }
    built = build_strategy("fedmgda", config)
    assert isinstance(built, FedMGDAPlus)
    assert (built.epsilon, built.global_lr, built.global_lr_decay) == (0.1, 1.5, 0.89)
    assert built.prior == "num-examples"
    assert build_strategy("fedavg-n", config).epsilon == 0.0  # the preset wins over ε
    assert build_strategy("fedmgda-plain", config).normalize is False
    prox = build_strategy("mgda-prox", config)
    assert (prox.proximal_mu, prox.epsilon) == (0.3, 0.1)
    assert {"fedmgda", "fedavg-n", "fedmgda-plain", "mgda-prox"} <= set(STRATEGIES)


@pytest.mark.parametrize("name", ["fedmgda", "fedavg-n", "fedmgda-plain", "mgda-prox"])
def test_run_config_declares_every_key_with_the_constructor_default(name):
    run_config = pyproject_config()
    for key, default in STRATEGIES[name].defaults().items():
        assert run_config[key] == default, key
    assert run_config["fedmgda-epsilon"] == 1.0 and run_config["mgda-prox-mu"] == 0.2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"epsilon": -0.5}, "epsilon must be >= 0, got -0.5"),
        ({"epsilon": float("nan")}, "epsilon must be a finite number, got nan"),
        ({"global_lr": 0.0}, "global_lr must be > 0, got 0.0"),
        ({"global_lr_decay": 0.0}, "global_lr_decay must be > 0, got 0.0"),
        ({"global_lr_decay": 1.1}, "global_lr_decay must be <= 1, got 1.1"),
        ({"decay_every": 0}, "decay_every must be an int >= 1, got 0"),
        ({"normalize": "yes"}, "normalize must be a bool, got 'yes'"),
        ({"prior": "size"}, r"prior must be one of \('uniform', 'num-examples'\), got 'size'"),
        ({"proximal_mu": -1.0}, "proximal_mu must be >= 0, got -1.0"),
        ({"qp_solver": "daqp-missing"}, "qp_solver must be one of the installed qpsolvers"),
    ],
)
def test_constructor_rejects_bad_hyperparameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FedMGDAPlus(**kwargs)


def test_mgda_prox_needs_a_positive_mu():
    with pytest.raises(ValueError, match=r"proximal_mu must be > 0, got 0\.0"):
        MGDAProx(proximal_mu=0.0)


def test_settings_and_summary_log(caplog):
    strategy = FedMGDAPlus(epsilon=0.5)
    assert strategy.settings()["epsilon"] == 0.5
    with caplog.at_level(logging.INFO, logger="fairfl"):
        strategy.summary()
    assert any("FedMGDA+ settings" in r.message for r in caplog.records)


# --------------------------------------------------------------------------- value checks


@pytest.mark.parametrize("rule", [FedMGDAPlus, FedAvgN])  # Gram pass; norms-only pass
def test_bad_values_are_dropped_by_the_gram_pass_with_the_readers_reason(rule):
    # The reader skips its value pass (checks_array_values); the Gram pass must drop
    # exactly what it would have, naming the same field and reason.
    strategy = rule(max_abs_weight=100.0)
    nan = model([1, 0, 0, 0, 0, 0])
    nan[1] = np.array([np.nan, 0], np.float32)
    inf = model([0, 0, 1, 0, 0, 0])
    inf[0] = np.array([[np.inf, 0], [0, 0]], np.float32)
    huge = model([0, 0, 0, 500, 0, 0])
    locals_ = [model([1, 0, 0, 0, 0, 0]), nan, inf, huge, model([0, 1, 0, 0, 0, 0])]
    new, metrics = aggregate(strategy, locals_)
    dropped = strategy.train_records[1].dropped
    assert dropped == {
        2: "arrays['1'] contains nan",
        3: "arrays['0'] contains inf",
        4: "arrays['0'] has |value| 500 > 100",
    }
    assert metrics["dropped-replies"] == 3
    assert strategy.train_records[1].weights == pytest.approx({1: 0.5, 5: 0.5}, abs=1e-9)
    np.testing.assert_allclose(flat(new), [0.5, 0.5, 0, 0, 0, 0], atol=1e-6)


def test_values_near_the_bound_are_checked_exactly():
    # peak + ‖g‖ exceeds the bound but every value is within it: kept.
    strategy = FedMGDAPlus(max_abs_weight=10.0)
    global_ = model([9, 0, 0, 0, 0, 0])
    new, _ = aggregate(
        strategy, [model([9, 9, 0, 0, 0, 0]), model([9, 0, 9, 0, 0, 0])], global_=global_
    )
    assert strategy.train_records[1].dropped == {}
    assert np.all(np.isfinite(flat(new)))


def test_buffer_values_are_checked_directly():
    names = {"fc.weight": np.zeros(2, np.float32), "bn.running_var": np.ones(2, np.float32)}
    strategy = FedMGDAPlus()
    configure(strategy, [1, 2, 3], arrays=names)
    good = {"fc.weight": np.array([1, 0], np.float32), "bn.running_var": np.ones(2, np.float32)}
    bad = {
        "fc.weight": np.array([0, 1], np.float32),
        "bn.running_var": np.array([np.nan, 1], np.float32),
    }
    replies = [
        make_reply(1, arrays_of(good), {keys.NUM_EXAMPLES: 5}),
        make_reply(2, arrays_of(bad), {keys.NUM_EXAMPLES: 5}),
    ]
    arrays, _ = strategy.aggregate_train(1, replies)
    assert strategy.train_records[1].dropped == {2: "arrays['bn.running_var'] contains nan"}
    # Only client 1 is left: ḡ_1 = (−1, 0), λ = 1, w_{t+1} = 0 − 1·ḡ_1 = (1, 0).
    np.testing.assert_allclose(arrays["fc.weight"].numpy(), [1, 0], atol=1e-6)


def test_finite_values_whose_norm_overflows_are_dropped():
    # float64 weights of 1e200 are finite and allowed with no max_abs_weight, but their
    # squared norm is not (float32 weights cannot overflow a float64 square).
    strategy = FedMGDAPlus(max_abs_weight=None)
    global64 = [np.zeros(2)]
    locals_ = [[np.array([1.0, 0.0])], [np.array([1e200, 1e200])], [np.array([0.0, 1.0])]]
    aggregate(strategy, locals_, global_=global64)
    assert strategy.train_records[1].dropped == {
        2: "arrays: the update's squared norm overflows float64"
    }
