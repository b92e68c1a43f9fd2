"""The compiled weighted sum of the unified form (``fairfl.strategies._ops.sum_kernel``).

``reweighted_sum`` must give the same new model bit for bit whether its float32 arrays go
through the compiled kernel or numpy's blocked pass (``FAIRFL_GRAM_KERNEL=numpy``):
weights of any sign, a weight of 0 (that client's NaN stays out of the sum), w^t with
and without weight, client counts that fill the kernel's groups of 4 rows or not, and
lengths that end inside its 8-value vectors and its 2,048-value chunks. Its squared
norms are checked on values whose squares sum exactly. FedMGDA+'s step
(``difference_step``) is checked against the same float64 operations in numpy.
"""

import platform

import numpy as np
import pytest

from fairfl.strategies._ops.gram_kernel import gram_kernel
from fairfl.strategies._ops.passes import reweighted_sum
from fairfl.strategies._ops.sum_kernel import difference_step

pytestmark = [
    pytest.mark.flower_free,
    pytest.mark.skipif(
        platform.machine() not in ("x86_64", "AMD64"), reason="the kernel is built on x86-64 only"
    ),
]


def _both_paths(monkeypatch, global_arrays, clients, weights):
    monkeypatch.setenv("FAIRFL_GRAM_KERNEL", "compiled")
    assert gram_kernel() is not None
    norms = np.zeros((len(clients), len(global_arrays)))
    compiled = reweighted_sum(global_arrays, clients, weights, norms)
    monkeypatch.setenv("FAIRFL_GRAM_KERNEL", "numpy")
    numpy_norms = np.zeros_like(norms)
    plain = reweighted_sum(global_arrays, clients, weights, numpy_norms)
    return compiled, plain, norms, numpy_norms


@pytest.mark.parametrize(
    "weights",
    [
        [0.25, 0.25, 0.5],  # Σλ = 1: w^t carries no weight
        [0.7, -0.2, 0.3],  # VRed's negative weight, Σλ = 0.8: w^t weighs 0.2
        [0.0, 0.6, 0.3],  # a weight of 0
        [0.1, 0.2, 0.0, 0.1, 0.25, 0.15],  # rows in one group of the kernel's 8, not full
        [0.05, 0.1, 0.0, 0.1, 0.05, 0.15, 0.1, 0.05, 0.2, 0.0, 0.2],  # two groups of 8
    ],
)
def test_same_model_bit_for_bit_as_numpy(monkeypatch, weights):
    rng = np.random.default_rng(7)
    shapes = [(3, 2053), (5,), (40_000,)]  # ends inside a vector and inside a chunk
    global_arrays = [rng.normal(size=s).astype(np.float32) for s in shapes]
    global_arrays.append(np.arange(4))  # an integer array keeps w^t's values
    clients = [
        [(g + rng.normal(size=g.shape) * 0.3).astype(g.dtype) for g in global_arrays]
        for _ in weights
    ]
    compiled, plain, norms, numpy_norms = _both_paths(
        monkeypatch, global_arrays, clients, np.array(weights)
    )
    for a, b in zip(compiled, plain, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a, b)
    np.testing.assert_allclose(norms, numpy_norms, rtol=1e-5)


def test_a_zero_weight_keeps_a_nan_out_and_its_norm_flags_it(monkeypatch):
    global_arrays = [np.ones(100, dtype=np.float32)]
    bad = np.full(100, 2.0, dtype=np.float32)
    bad[57] = np.nan
    clients = [[np.full(100, 3.0, dtype=np.float32)], [bad]]
    with np.errstate(invalid="ignore"):
        compiled, plain, norms, _ = _both_paths(
            monkeypatch, global_arrays, clients, np.array([1.0, 0.0])
        )
    assert np.array_equal(compiled[0], np.full(100, 3.0, dtype=np.float32))
    assert np.array_equal(compiled[0], plain[0])
    # 100 values of 3: ‖w‖² = 900 exactly; the NaN client's norm is NaN.
    assert norms[0, 0] == 900.0
    assert np.isnan(norms[1, 0])


@pytest.mark.parametrize("clients", [1, 3, 4, 6, 8, 11])  # groups of 8 rows, full or not
def test_fedmgda_step_is_the_float64_difference_form_rounded_once(monkeypatch, clients):
    # FedMGDA+'s step w^t + Σ_i c_i (w_i − w^t): each difference exact in float64, added
    # with its c_i in client order, w^t added, then one rounding to float32; the
    # same operations in numpy give the same bits. Lengths end inside a vector and a
    # chunk; c_i of both signs and of FedMGDA+'s size (λ_i / ‖g_i‖ ≫ 1).
    monkeypatch.setenv("FAIRFL_GRAM_KERNEL", "compiled")
    kernel = gram_kernel()
    assert kernel is not None
    rng = np.random.default_rng(3)
    for size in (5, 2053, 40_000):
        centre = rng.normal(size=size).astype(np.float32)
        rows = [(centre + rng.normal(size=size) * 1e-3).astype(np.float32) for _ in range(clients)]
        weights = rng.uniform(-50.0, 300.0, size=clients)
        length = np.zeros(1)
        got = difference_step(kernel.library, centre, rows, weights, length)
        total = np.zeros(size)
        for row, weight in zip(rows, weights, strict=True):
            total = total + (row.astype(np.float64) - centre.astype(np.float64)) * weight
        expected = (centre.astype(np.float64) + total).astype(np.float32)
        assert got.dtype == np.float32 and np.array_equal(got, expected)
        assert length[0] == pytest.approx(float(total @ total), rel=1e-12)
        # Without a length to measure, the same step.
        assert np.array_equal(difference_step(kernel.library, centre, rows, weights, None), got)


def test_fedmgda_step_hand_worked():
    # w^t = (1, 2), w_1 = (3, 2), w_2 = (1, 0); c = (0.5, 2): w^t + 0.5 (2, 0) + 2 (0, −2)
    # = (2, −2), and the step (1, −4) has squared length 17.
    kernel = gram_kernel()
    assert kernel is not None
    centre = np.array([1.0, 2.0], dtype=np.float32)
    rows = [np.array([3.0, 2.0], dtype=np.float32), np.array([1.0, 0.0], dtype=np.float32)]
    length = np.zeros(1)
    got = difference_step(kernel.library, centre, rows, np.array([0.5, 2.0]), length)
    assert got.tolist() == [2.0, -2.0] and length[0] == 17.0
