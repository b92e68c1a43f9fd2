"""Tests of Synthetic(α, β): shapes, sizes, determinism, and what α, β and Σ control."""

import numpy as np
import pytest

from fairfl.data import load_client_data, partition_sizes
from fairfl.data.synthetic import device_data, device_size, parse_name

NATURAL = {"partitioner": "natural", "num_partitions": 100}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("synthetic", (1.0, 1.0, 2.0)),
        ("synthetic-0-0", (0.0, 0.0, 2.0)),
        ("synthetic-0.5-0.5", (0.5, 0.5, 2.0)),
        ("synthetic-1-0.25", (1.0, 0.25, 2.0)),
        ("synthetic-1-1-sigma0.75", (1.0, 1.0, 0.75)),
        ("synthetic-1-1-sigma0", (1.0, 1.0, 0.0)),
        ("synthetic-1-1-sigma", None),
        ("synthetic-1-1-sigma-1", None),
        ("synthetic-1", None),
        ("synthetic--1-1", None),
        ("synthetic-a-b", None),
        ("digits", None),
    ],
)
def test_parse_name(name, expected):
    assert parse_name(name) == expected


def test_device_shapes_and_types():
    x, y = device_data(1.0, 1.0, 0, 0)
    assert x.shape == (len(y), 60)
    assert x.dtype == np.float32
    assert y.dtype == np.int64
    assert set(np.unique(y)) <= set(range(10))
    assert not x.flags.writeable  # cached: shared, so read-only


def test_device_size_matches_the_data_without_generating_it():
    for device in range(20):
        assert device_size(3, device) == len(device_data(0.5, 0.5, 3, device)[1])


def test_sizes_are_lognormal_4_2_plus_50():
    sizes = np.array([device_size(0, k) for k in range(3000)])
    assert sizes.min() >= 50
    extra = sizes - 50  # floor(LogNormal(4, 2)): median exp(4) = 54.6
    assert 45 <= np.median(extra) <= 65
    # Power-law-like spread: P(LogNormal(4, 2) > exp(6)) = P(Z > 1) = 0.159.
    assert 0.13 <= np.mean(extra > np.exp(6)) <= 0.19
    assert sizes.max() / sizes.min() > 100


def test_size_sigma_changes_only_the_number_of_samples():
    # n_k = floor(exp(4 + σ Z_k)) + 50 with the same Z_k: σ = 0 gives floor(e^4) + 50 = 104
    # for every device; σ = 0.75 and σ = 2 order the devices alike.
    assert {device_size(3, k, 0.0) for k in range(50)} == {104}
    light = np.array([device_size(3, k, 0.75) for k in range(3000)])
    heavy = np.array([device_size(3, k) for k in range(3000)])
    a, b = np.triu_indices(300, k=1)  # pairs of devices
    assert np.all(np.sign(light[a] - light[b]) * np.sign(heavy[a] - heavy[b]) >= 0)
    # E[LogNormal(4, 0.75)] = exp(4 + 0.75² / 2) = 72.2 -> mean ~122 samples per device
    assert 115 <= light.mean() <= 130
    assert light.max() / light.sum() < 0.01 < heavy.max() / heavy.sum()
    for device in range(5):
        x_light, y_light = device_data(1.0, 1.0, 3, device, 0.75)
        x_heavy, y_heavy = device_data(1.0, 1.0, 3, device, 2.0)
        rows = min(len(y_light), len(y_heavy))
        assert np.array_equal(x_light[:rows], x_heavy[:rows])
        assert np.array_equal(y_light[:rows], y_heavy[:rows])
    sizes = partition_sizes(dataset="synthetic-1-1-sigma0.75", seed=3, **NATURAL)
    data = load_client_data(dataset="synthetic-1-1-sigma0.75", seed=3, partition_id=7, **NATURAL)
    assert sizes[7] == len(data.y_train)
    assert len(data.y_train) + len(data.y_test) == device_size(3, 7, 0.75)


def test_a_device_is_the_same_whatever_the_number_of_devices():
    few = load_client_data(
        dataset="synthetic", partitioner="natural", partition_id=3, num_partitions=5
    )
    many = load_client_data(dataset="synthetic", partition_id=3, **NATURAL)
    assert np.array_equal(few.x_train, many.x_train)
    assert np.array_equal(few.y_test, many.y_test)


def test_same_arguments_same_data_other_seed_other_data():
    a = load_client_data(dataset="synthetic", partition_id=7, seed=1, **NATURAL)
    b = load_client_data(dataset="synthetic", partition_id=7, seed=1, **NATURAL)
    c = load_client_data(dataset="synthetic", partition_id=7, seed=2, **NATURAL)
    assert np.array_equal(a.x_train, b.x_train)
    assert np.array_equal(a.y_train, b.y_train)
    assert a.x_train.shape != c.x_train.shape or not np.array_equal(a.x_train, c.x_train)


def test_plain_synthetic_is_synthetic_1_1_and_differs_from_0_0():
    plain = load_client_data(dataset="synthetic", partition_id=0, **NATURAL)
    one = load_client_data(dataset="synthetic-1-1", partition_id=0, **NATURAL)
    zero = load_client_data(dataset="synthetic-0-0", partition_id=0, **NATURAL)
    assert np.array_equal(plain.x_train, one.x_train)
    assert not np.array_equal(plain.x_train, zero.x_train)


def test_partition_sizes_of_100_devices():
    sizes = partition_sizes(dataset="synthetic", **NATURAL)
    assert len(sizes) == 100
    assert min(sizes) >= 35  # 50 samples, 30% held out
    assert max(sizes) > 10 * min(sizes)


def test_beta_spreads_the_device_feature_means():
    # B_k ~ N(0, β) shifts all 60 features of device k: the mean feature of a
    # device has std about β across devices (plus about 1/sqrt(60) from v_k).
    def spread(beta):
        return np.std([device_data(0.0, beta, 0, k)[0].mean() for k in range(60)])

    assert spread(0.0) < 0.3
    assert spread(1.0) > 0.6


def test_features_have_covariance_j_to_the_minus_1_2():
    x = np.concatenate(
        [
            device_data(1.0, 1.0, 0, k)[0] - device_data(1.0, 1.0, 0, k)[0].mean(0)
            for k in range(100)
        ]
    )
    variance = x.var(axis=0)
    expected = np.arange(1, 61) ** -1.2
    assert np.allclose(variance, expected, rtol=0.1)
