"""FedMGDA+'s float32 Gram and step against the float64 computation (issue 17).

A float32 model is aggregated in float32 blocks (float32 differences, BLAS products of
at most ``GRAM_CHUNK`` terms added in float64, a float32 matrix-vector step); the same
replies cast to float64 take the float64 path, the reference. On random, nearly
collinear and duplicated updates the new model, λ and ‖d‖ must agree within 1e-6.
Where λ is not determined by the updates (duplicates share their weight in any
proportion, almost parallel updates nearly so) the identifiable quantities are
compared instead: each duplicate group's total weight, d and the new model. FedAvg-n
(ε = 0) computes only the norms and measures ‖d‖ on its float32 step: it is held to the
same bounds. Every test runs twice: with the compiled Gram kernel
(``fairfl.strategies._ops.gram_kernel``) and with numpy's blocks.
"""

import platform
from unittest.mock import Mock

import numpy as np
import pytest
from flwr.app import ConfigRecord
from flwr.serverapp import Grid

from fairfl._compat import server_task_identity
from fairfl.contract import keys
from fairfl.strategies import FedAvgN, FedMGDAPlus
from fairfl.strategies._ops.gram import gram_matrix
from tests.conftest import arrays_of, make_reply
from tests.strategies.reference import fedmgda_step, normalized_pseudo_gradients

NUM_CLIENTS = 12
SHAPES = [(300, 400), (400,), (200, 300)]  # 180,400 parameters, several blocks
TOLERANCE = 1e-6


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def gram_path(request, monkeypatch):
    """The Gram's path under test (``FAIRFL_GRAM_KERNEL``)."""
    if request.param == "compiled" and platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the compiled Gram kernel is built on x86-64 only")
    monkeypatch.setenv("FAIRFL_GRAM_KERNEL", request.param)
    return request.param


def updates(kind: str, rng: np.random.Generator) -> list[np.ndarray]:
    """Flat updates of NUM_CLIENTS clients (scale 1e-2, like local SGD steps)."""
    size = sum(int(np.prod(s)) for s in SHAPES)
    if kind == "random":
        flat = rng.standard_normal((NUM_CLIENTS, size))
    elif kind == "nearly-collinear":  # pairwise cosines ~0.92
        flat = rng.standard_normal(size) + 0.3 * rng.standard_normal((NUM_CLIENTS, size))
    elif kind == "almost-parallel":  # pairwise cosines ~1 - 5e-7
        flat = rng.standard_normal(size) + 1e-3 * rng.standard_normal((NUM_CLIENTS, size))
    else:  # "duplicated": clients 2k and 2k + 1 send the same model
        flat = np.repeat(rng.standard_normal((NUM_CLIENTS // 2, size)), 2, axis=0)
    return list(flat * 1e-2)


def split(flat: np.ndarray, dtype) -> list[np.ndarray]:
    arrays, start = [], 0
    for shape in SHAPES:
        stop = start + int(np.prod(shape))
        arrays.append(flat[start:stop].reshape(shape).astype(dtype))
        start = stop
    return arrays


def aggregate(global_arrays, local_models, rule=FedMGDAPlus, status="optimal"):
    """``rule`` (FedMGDA+: ε = 1, η = 1) on replies carrying ``local_models``: model, λ, ‖d‖."""
    strategy = rule()
    grid = Mock(spec=Grid)
    grid.get_node_ids.return_value = list(range(1, NUM_CLIENTS + 1))
    with server_task_identity(1):
        strategy.configure_train(1, arrays_of(global_arrays), ConfigRecord({}), grid)
    replies = [
        make_reply(node, local, {keys.NUM_EXAMPLES: 10, keys.PARTITION_ID: node})
        for node, local in enumerate(local_models, start=1)
    ]
    arrays, metrics = strategy.aggregate_train(1, replies)
    record = strategy.train_records[1]
    assert arrays is not None and record.diagnostics["qp-status"] == status
    weights = record.weights
    lam = np.array([weights[node] for node in range(1, NUM_CLIENTS + 1)])
    return [a.numpy() for a in arrays.values()], lam, metrics["direction-norm"]


def float32_inputs(kind: str, seed: int):
    """w_t and the clients' models, float32."""
    rng = np.random.default_rng(seed)
    global_flat = rng.standard_normal(sum(int(np.prod(s)) for s in SHAPES)) * 0.1
    global32 = split(global_flat, np.float32)
    return global32, [split(global_flat + u, np.float32) for u in updates(kind, rng)]


def float32_and_float64(kind: str, seed: int, rule=FedMGDAPlus, status="optimal"):
    global32, locals32 = float32_inputs(kind, seed)
    # The reference: the same float32 values, cast to float64 (exact), on the float64 path.
    ours = aggregate(global32, locals32, rule, status)
    reference = aggregate(
        [a.astype(np.float64) for a in global32],
        [[a.astype(np.float64) for a in local] for local in locals32],
        rule,
        status,
    )
    return ours, reference


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("kind", ["random", "nearly-collinear"])
def test_model_lambda_and_direction_norm_match_float64(kind, seed):
    (model, lam, norm), (ref_model, ref_lam, ref_norm) = float32_and_float64(kind, seed)
    assert all(a.dtype == np.float32 for a in model)
    assert all(a.dtype == np.float64 for a in ref_model)
    for ours, reference in zip(model, ref_model, strict=True):
        assert np.abs(ours - reference).max() <= TOLERANCE
    assert np.abs(lam - ref_lam).max() <= TOLERANCE
    assert abs(norm - ref_norm) <= TOLERANCE


@pytest.mark.parametrize("kind", ["random", "nearly-collinear", "almost-parallel"])
def test_fedavg_n_norms_pass_matches_float64(kind):
    (model, lam, norm), (ref_model, ref_lam, ref_norm) = float32_and_float64(
        kind, 4, FedAvgN, "prior"
    )
    for ours, reference in zip(model, ref_model, strict=True):
        assert np.abs(ours - reference).max() <= TOLERANCE
    assert np.abs(lam - ref_lam).max() == 0.0  # λ = λ0 on both paths
    assert abs(norm - ref_norm) <= TOLERANCE
    # ‖d‖ measured on the step is ‖Σ λ0_i ḡ_i‖ of the float64 vectors (λ0 = 1/n).
    global32, locals32 = float32_inputs(kind, 4)
    unit, _ = normalized_pseudo_gradients(global32, locals32)
    assert abs(norm - np.linalg.norm(unit.mean(axis=0))) <= TOLERANCE


def test_duplicated_updates_match_float64_per_duplicate_group():
    (model, lam, norm), (ref_model, ref_lam, ref_norm) = float32_and_float64("duplicated", 2)
    for ours, reference in zip(model, ref_model, strict=True):
        assert np.abs(ours - reference).max() <= TOLERANCE
    # Only each pair's total weight is determined by the updates.
    pairs, ref_pairs = lam.reshape(-1, 2).sum(axis=1), ref_lam.reshape(-1, 2).sum(axis=1)
    assert np.abs(pairs - ref_pairs).max() <= TOLERANCE
    assert abs(norm - ref_norm) <= TOLERANCE


def test_almost_parallel_updates_match_float64_in_direction_and_model():
    (model, _, norm), (ref_model, _, ref_norm) = float32_and_float64("almost-parallel", 3)
    for ours, reference in zip(model, ref_model, strict=True):
        assert np.abs(ours - reference).max() <= TOLERANCE
    assert abs(norm - ref_norm) <= TOLERANCE


def test_float32_overflow_falls_back_to_float64():
    # g_1 = 2e19 everywhere: its squares (4e38) overflow float32 (max 3.4e38). The block
    # is redone in float64: K_11 = 4e38 · 3 exactly as float64 computes it.
    global_ = [np.zeros(3, np.float32)]
    big = [[np.full(3, 2e19, np.float32)], [np.ones(3, np.float32)]]
    gram = gram_matrix(global_, big)
    g1 = np.float64(np.float32(2e19))
    np.testing.assert_allclose(gram, [[3 * g1 * g1, 3 * g1], [3 * g1, 3.0]], rtol=1e-15)
    # The step: w_t + c (w_1 − w_t) with w_1 − w_t = 3e38 − (−3e38) = inf in float32;
    # in float64 it is 6e38, and 1e-3 of it (6e35) is a float32 again.
    w_t = [np.full(2, -3e38, np.float32)]
    w_1 = [np.full(2, 3e38, np.float32)]
    new = fedmgda_step(w_t, [w_1], [1.0], 1e-3)
    expected = np.float64(np.float32(-3e38)) + 1e-3 * (
        np.float64(np.float32(3e38)) - np.float64(np.float32(-3e38))
    )
    np.testing.assert_allclose(new[0], np.full(2, expected, np.float32), rtol=1e-6)
    assert np.all(np.isfinite(new[0]))


def test_a_nan_only_spoils_its_row_and_column():
    global_ = [np.zeros(4, np.float32)]
    locals_ = [[np.array([1, 0, 0, 0], np.float32)], [np.array([0, np.nan, 0, 0], np.float32)]]
    gram = gram_matrix(global_, locals_)
    assert gram[0, 0] == 1.0
    assert np.isnan(gram[1, 1]) and np.isnan(gram[0, 1]) and np.isnan(gram[1, 0])
