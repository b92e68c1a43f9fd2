"""q-FFL's full-batch objective of experiments/qffl_synthetic_optimum.py, worked by hand.

The tiny federation of most tests: 2 features, 2 classes, 2 devices,

    device 0: x = (1, 0) label 0,  x = (0, 1) label 1      (n_0 = 2)
    device 1: x = (1, 1) label 1                          (n_1 = 1)

so p = (2/3, 1/3). θ = (W00, W01, W10, W11, b0, b1), W's rows are features.
"""

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]


def _load_experiment():
    # Registered in sys.modules before it runs: its dataclass looks its module up there.
    name = "qffl_synthetic_optimum"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        name, ROOT / "experiments" / "qffl_synthetic_optimum.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


optimum = _load_experiment()

X = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
Y = np.array([0, 1, 1])
DEVICE = np.array([0, 0, 1])
P = np.array([2.0, 1.0]) / 3.0


def test_objective_and_gradient_at_zero_by_hand():
    # θ = 0: every softmax is (1/2, 1/2), so every ℓ_i = ln 2 and F_0 = F_1 = ln 2.
    # Residuals softmax − onehot: (−1/2, 1/2) for label 0, (1/2, −1/2) for label 1.
    # ∇F_0 = ((1,0)ᵀ(−1/2, 1/2) + (0,1)ᵀ(1/2, −1/2)) / 2: W = [[−1/4, 1/4], [1/4, −1/4]],
    # b = 0. ∇F_1 = (1,1)ᵀ(1/2, −1/2): W = [[1/2, −1/2], [1/2, −1/2]], b = (1/2, −1/2).
    # ∇f_0 = 2/3 ∇F_0 + 1/3 ∇F_1: W = [[0, 0], [1/3, −1/3]], b = (1/6, −1/6).
    # f_0 = ln 2; f_1 = Σ p_k (ln 2)² / 2 = (ln 2)² / 2 and ∇f_1 = ln 2 · ∇f_0.
    theta = np.zeros(6)
    gradient_0 = np.array([0.0, 0.0, 1 / 3, -1 / 3, 1 / 6, -1 / 6])
    value, gradient = optimum.qffl_objective(theta, X, Y, DEVICE, P, 0.0)
    assert value == pytest.approx(math.log(2), abs=1e-15)
    np.testing.assert_allclose(gradient, gradient_0, atol=1e-15)
    value, gradient = optimum.qffl_objective(theta, X, Y, DEVICE, P, 1.0)
    assert value == pytest.approx(math.log(2) ** 2 / 2, abs=1e-15)
    np.testing.assert_allclose(gradient, math.log(2) * gradient_0, atol=1e-15)


def test_objective_and_gradient_where_the_devices_losses_differ_by_hand():
    # W = [[0, 0], [0, ln 3]], b = 0. Logits: (1,0) -> (0, 0): softmax (1/2, 1/2),
    # ℓ = ln 2, residual (−1/2, 1/2); (0,1) and (1,1) -> (0, ln 3): softmax (1/4, 3/4),
    # ℓ = ln(4/3), residual (1/4, −1/4).
    # F_0 = (ln 2 + ln(4/3)) / 2 = ln(8/3) / 2 =: a; F_1 = ln(4/3) =: c.
    # ∇F_0 = ((1,0)ᵀ(−1/2, 1/2) + (0,1)ᵀ(1/4, −1/4)) / 2: W = [[−1/4, 1/4], [1/8, −1/8]],
    #        b = (−1/8, 1/8);  ∇F_1: W = [[1/4, −1/4], [1/4, −1/4]], b = (1/4, −1/4).
    # q = 0: f = 2a/3 + c/3 = ln(32/9) / 3;
    #        ∇f = 2/3 ∇F_0 + 1/3 ∇F_1: W = [[−1/12, 1/12], [1/6, −1/6]], b = (0, 0).
    # q = 1: f = (2/3 a² + 1/3 c²) / 2 = (2a² + c²) / 6;
    #        ∇f = 2/3 a ∇F_0 + 1/3 c ∇F_1: W00 = (c − 2a)/12, W10 = (a + c)/12,
    #        b0 = (c − a)/12, and the class-1 entries are their negatives.
    theta = np.array([0.0, 0.0, 0.0, math.log(3), 0.0, 0.0])
    a, c = math.log(8 / 3) / 2, math.log(4 / 3)
    value, gradient = optimum.qffl_objective(theta, X, Y, DEVICE, P, 0.0)
    assert value == pytest.approx(math.log(32 / 9) / 3, abs=1e-15)
    np.testing.assert_allclose(gradient, [-1 / 12, 1 / 12, 1 / 6, -1 / 6, 0, 0], atol=1e-15)
    value, gradient = optimum.qffl_objective(theta, X, Y, DEVICE, P, 1.0)
    assert value == pytest.approx((2 * a**2 + c**2) / 6, abs=1e-15)
    w00, w10, b0 = (c - 2 * a) / 12, (a + c) / 12, (c - a) / 12
    np.testing.assert_allclose(gradient, [w00, -w00, w10, -w10, b0, -b0], atol=1e-15)


def random_federation(seed: int) -> tuple[np.ndarray, ...]:
    """A small random federation (2-4 devices, 2-3 features, 2-3 classes) and a θ."""
    rng = np.random.default_rng(seed)
    devices, features, classes = rng.integers(2, 5), rng.integers(2, 4), rng.integers(2, 4)
    counts = rng.integers(1, 5, size=devices)
    device = np.repeat(np.arange(devices), counts)
    x = rng.normal(size=(device.size, features))
    y = rng.integers(0, classes, size=device.size)
    theta = rng.normal(size=(features + 1) * classes)
    return x, y, device, counts / counts.sum(), theta


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), q=st.floats(0.0, 3.0))
def test_gradient_matches_central_differences(seed, q):
    # (f(θ + h e_j) − f(θ − h e_j)) / 2h has error O(h²) ≈ 1e-12 here plus the rounding
    # of f, a few ε |f| / h: 1e-10 where f ≈ 1, 1.6e-7 at q = 3 where f reaches 742
    # (seed 513061545, which failed a fixed atol of 1e-8 by 2e-7).
    x, y, device, p, theta = random_federation(seed)
    value, gradient = optimum.qffl_objective(theta, x, y, device, p, q)
    h = 1e-6
    numeric = np.empty_like(theta)
    for j in range(theta.size):
        step = np.zeros_like(theta)
        step[j] = h
        upper, _ = optimum.qffl_objective(theta + step, x, y, device, p, q)
        lower, _ = optimum.qffl_objective(theta - step, x, y, device, p, q)
        numeric[j] = (upper - lower) / (2 * h)
    rounding = 10 * np.finfo(np.float64).eps * abs(value) / h
    np.testing.assert_allclose(gradient, numeric, rtol=1e-6, atol=1e-8 + rounding)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_q0_with_size_weights_is_the_pooled_mean_cross_entropy(seed):
    # Σ_k (n_k / n) F_k = (1 / n) Σ_i ℓ_i: the loss over all samples together, worked
    # here with logsumexp from the logits, not by the module's function.
    from scipy.special import logsumexp

    x, y, device, p, theta = random_federation(seed)
    classes = theta.size // (x.shape[1] + 1)
    weights = theta[: x.shape[1] * classes].reshape(x.shape[1], classes)
    logits = x @ weights + theta[x.shape[1] * classes :]
    pooled = np.mean(logsumexp(logits, axis=1) - logits[np.arange(y.size), y])
    value, _ = optimum.qffl_objective(theta, x, y, device, p, 0.0)
    assert value == pytest.approx(pooled, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), q=st.floats(0.0, 3.0))
def test_relabelling_the_devices_changes_nothing_and_inputs_stay_unchanged(seed, q):
    x, y, device, p, theta = random_federation(seed)
    copies = [a.copy() for a in (x, y, device, p, theta)]
    value, gradient = optimum.qffl_objective(theta, x, y, device, p, q)
    for before, after in zip(copies, (x, y, device, p, theta), strict=True):
        np.testing.assert_array_equal(before, after)
    order = np.random.default_rng(seed).permutation(p.size)  # new label of each device
    relabelled = np.empty_like(p)
    relabelled[order] = p
    value_2, gradient_2 = optimum.qffl_objective(theta, x, y, order[device], relabelled, q)
    assert value_2 == pytest.approx(value, rel=1e-12)
    np.testing.assert_allclose(gradient_2, gradient, rtol=1e-10, atol=1e-14)


def bias_only_federation(labels: list[list[int]]) -> object:
    """Devices whose one feature is always 0 (only b matters), test = train."""
    device = np.repeat(np.arange(len(labels)), [len(ys) for ys in labels])
    y = np.concatenate([np.asarray(ys) for ys in labels])
    x = np.zeros((y.size, 1))
    return optimum.Federation(x, y, device, x, y, device, len(labels), num_classes=2)


def test_minimiser_q0_is_the_pooled_label_frequency():
    # x = 0, so f_0 depends on δ = b0 − b1 only: the pooled CE of labels 0, 0, 0, 1 | 1
    # is minimised where softmax gives class 0 its pooled frequency 3/5: δ = ln(3/2).
    # From zeros the gradient's two bias entries always sum to 0 (Σ_c residual = 0) and
    # W's entries are 0 (x = 0), so b = (ln(3/2)/2, −ln(3/2)/2) and W = 0.
    federation = bias_only_federation([[0, 0, 0, 1], [1]])
    result = optimum.minimise_qffl(federation, 0.0, maxiter=200)
    half = math.log(3 / 2) / 2
    np.testing.assert_allclose(result.x, [0.0, 0.0, half, -half], atol=1e-7)
    correct, losses = optimum.device_test_results(result.x, federation)
    # Class 0 is predicted everywhere: device 0 gets 3 of 4 right, device 1 none.
    np.testing.assert_array_equal(correct, [3, 0])
    # F_0 = −(3/4) ln(3/5) − (1/4) ln(2/5), F_1 = −ln(2/5).
    expected = [-0.75 * math.log(0.6) - 0.25 * math.log(0.4), -math.log(0.4)]
    np.testing.assert_allclose(losses, expected, rtol=1e-7)


def test_minimiser_q1_moves_towards_the_worse_device_and_is_stationary():
    # Same federation, q = 1. With s = softmax(b)_0, ∂F_k/∂b0 is device k's mean
    # residual of class 0: (3(s − 1) + s)/4 = s − 3/4 on device 0, s on device 1. So f_1
    # is stationary where (4/5) F_0 (s − 3/4) + (1/5) F_1 s = 0, with
    # F_0 = −(3/4) ln s − (1/4) ln(1 − s) and F_1 = −ln(1 − s). The left side is
    # −0.069 at s = 1/2 and +0.037 at s = 3/5 (q = 0's optimum): q = 1 gives device 1
    # (only label 1, the higher loss) more weight, so 1/2 < s < 3/5.
    federation = bias_only_federation([[0, 0, 0, 1], [1]])
    result = optimum.minimise_qffl(federation, 1.0, maxiter=200)
    b0, b1 = result.x[2:]
    s = 1 / (1 + math.exp(b1 - b0))
    f_0 = -0.75 * math.log(s) - 0.25 * math.log(1 - s)
    f_1 = -math.log(1 - s)
    assert 0.8 * f_0 * (s - 0.75) + 0.2 * f_1 * s == pytest.approx(0.0, abs=1e-9)
    assert 0.5 < s < 0.6
    assert b0 + b1 == pytest.approx(0.0, abs=1e-12)


def test_negative_q_and_devices_without_samples_are_rejected():
    with pytest.raises(ValueError, match=r"q must be >= 0, got -0\.5"):
        optimum.qffl_objective(np.zeros(6), X, Y, DEVICE, P, -0.5)
    with pytest.raises(ValueError, match=r"devices without samples: \[1\]"):
        optimum.qffl_objective(np.zeros(6), X, Y, np.array([0, 0, 2]), np.ones(3) / 3, 0.0)
    with pytest.raises(ValueError, match="largest device index 2"):
        optimum.qffl_objective(np.zeros(6), X, Y, np.array([0, 1, 2]), P, 0.0)
    with pytest.raises(ValueError, match="num_features=2, got 7"):
        optimum.unpack(np.zeros(7), 2)


def test_load_federation_stacks_the_recipes_splits():
    # Device k's rows are load_client_data(..., partition_id=k) of the qffl-synthetic
    # recipe (natural partition, test fraction 0.2), in device order, as float64.
    from fairfl.data import load_client_data

    federation = optimum.load_federation("synthetic-1-1-sigma0.75", seed=3, num_devices=4)
    for k in range(4):
        part = load_client_data(
            dataset="synthetic-1-1-sigma0.75",
            partitioner="natural",
            num_partitions=4,
            partition_id=k,
            seed=3,
            test_fraction=0.2,
        )
        train, test = federation.device_train == k, federation.device_test == k
        np.testing.assert_array_equal(federation.x_train[train], part.x_train)
        np.testing.assert_array_equal(federation.y_test[test], part.y_test)
        assert federation.train_counts[k] == part.y_train.size
    assert federation.x_train.dtype == np.float64
    assert federation.num_classes == 10
