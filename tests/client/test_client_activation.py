"""The client's Equitable-FL activation vector: source, subsample, floor, projection, DP."""

import math

import numpy as np
import pytest
import torch
from flwr.app import ConfigRecord
from torch import nn

from fairfl.client.activation import (
    activation_for_config,
    client_activation,
    clip_rows,
    gaussian_noise_scale,
    projection_matrix,
)
from fairfl.client.training import activation_vector
from fairfl.contract.activation import ACTIVATION_SOURCES, ActivationOptions
from fairfl.models import build_model

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def model():
    return build_model("mlp", (1, 8, 8), 10, seed=0)


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(0).random((40, 1, 8, 8), dtype=np.float32)


def by_hand(model, x, source):
    with torch.no_grad():
        h = model.features(torch.from_numpy(x))
        if source == "penultimate_logsoftmax":
            v = torch.log_softmax(h, dim=1)  # over the 64 features, not the classes
        elif source == "penultimate_raw":
            v = h
        else:
            v = torch.log_softmax(model.classifier(h), dim=1)
    return v.double().numpy()


@pytest.mark.parametrize("source", ACTIVATION_SOURCES)
def test_vector_is_the_mean_per_sample_activation(model, x, source):
    got = client_activation(model, x, CPU, ActivationOptions(source=source))
    np.testing.assert_allclose(got, by_hand(model, x, source).mean(axis=0), rtol=1e-6)
    assert got.shape == ((10,) if source == "output_logprob" else (model.feature_dim,))


def test_default_is_the_papers_log_softmax_of_the_penultimate_layer(model, x):
    # Def. 1 / Fig. 1: log-softmax over the features; it is h - LSE(h)·1 per sample.
    got = client_activation(model, x, CPU)
    with torch.no_grad():
        h = model.features(torch.from_numpy(x)).double()
    lse = torch.logsumexp(h, dim=1, keepdim=True)
    np.testing.assert_allclose(got, (h - lse).mean(dim=0).numpy(), rtol=1e-6)


def test_raw_source_agrees_with_training_activation_vector(model, x):
    got = client_activation(model, x, CPU, ActivationOptions(source="penultimate_raw"))
    np.testing.assert_allclose(got, activation_vector(model, x, CPU), rtol=1e-6)


def test_training_activation_vector_is_not_the_papers_vector(model, x):
    # Its docstring says so: paper 003's vector is the mean of h - LSE(h)·1, the raw
    # mean minus the mean log-sum-exp on every coordinate.
    raw = activation_vector(model, x, CPU)
    with torch.no_grad():
        h = model.features(torch.from_numpy(x)).double()
    shift = float(torch.logsumexp(h, dim=1).mean())
    np.testing.assert_allclose(client_activation(model, x, CPU), raw - shift, rtol=1e-6)
    assert not np.allclose(client_activation(model, x, CPU), raw)


def test_model_is_used_in_eval_mode():
    dropout = build_model("mlp", (1, 8, 8), 10, seed=0)
    dropout.body.append(nn.Dropout(p=0.9))
    dropout.train()
    data = np.ones((5, 1, 8, 8), np.float32)
    first = client_activation(dropout, data, CPU, ActivationOptions(source="penultimate_raw"))
    second = client_activation(dropout, data, CPU, ActivationOptions(source="penultimate_raw"))
    np.testing.assert_array_equal(first, second)


def test_max_samples_takes_a_seeded_subset(model, x):
    options = ActivationOptions(max_samples=10, source="penultimate_raw")
    first = client_activation(model, x, CPU, options, sample_seed=1)
    again = client_activation(model, x, CPU, options, sample_seed=1)
    other = client_activation(model, x, CPU, options, sample_seed=2)
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first, other)
    # It is the mean over exactly 10 of the rows.
    rows = np.sort(np.random.default_rng((1, 40)).choice(40, size=10, replace=False))
    np.testing.assert_allclose(first, by_hand(model, x[rows], "penultimate_raw").mean(0), rtol=1e-6)


def test_min_samples_floor_reports_nothing(model, x):
    assert client_activation(model, x, CPU, ActivationOptions(min_samples=41)) is None
    assert client_activation(model, x, CPU, ActivationOptions(min_samples=40)) is not None


def test_projection_is_linear_and_the_same_everywhere(model, x):
    options = ActivationOptions(projection_dim=5, projection_seed=3)
    got = client_activation(model, x, CPU, options)
    matrix = projection_matrix(model.feature_dim, 5, 3)
    full = client_activation(model, x, CPU)
    np.testing.assert_allclose(got, matrix @ full, rtol=1e-9)
    np.testing.assert_array_equal(matrix, projection_matrix(model.feature_dim, 5, 3))
    assert not np.array_equal(matrix, projection_matrix(model.feature_dim, 5, 4))


def test_projection_keeps_norms_on_average():
    # E ||P v||² = ||v||² for entries N(0, 1/k): check over many seeds.
    v = np.ones(50)
    ratios = [np.sum((projection_matrix(50, 20, s) @ v) ** 2) / 50 for s in range(200)]
    assert np.mean(ratios) == pytest.approx(1.0, abs=0.05)


def test_clipping_bounds_the_vector_norm(model, x):
    options = ActivationOptions(source="penultimate_raw", dp_clip=0.01)
    got = client_activation(model, x, CPU, options)
    assert np.linalg.norm(got) <= 0.01 + 1e-12
    np.testing.assert_allclose(
        clip_rows(np.array([[3.0, 4.0], [0.3, 0.4]]), 1.0), [[0.6, 0.8], [0.3, 0.4]]
    )


def test_gaussian_noise_has_the_documented_scale(model, x):
    # σ = 2 z R / n = 2 · 1.5 · 0.5 / 40 = 0.0375.
    assert gaussian_noise_scale(0.5, 1.5, 40) == pytest.approx(0.0375)
    options = ActivationOptions(source="penultimate_raw", dp_clip=0.5, dp_noise=1.5)
    clean = client_activation(
        model, x, CPU, ActivationOptions(source="penultimate_raw", dp_clip=0.5)
    )
    noisy = client_activation(model, x, CPU, options, noise_rng=np.random.default_rng(0))
    expected = clean + np.random.default_rng(0).normal(0.0, 0.0375, size=clean.shape)
    np.testing.assert_allclose(noisy, expected)
    # Without a generator the noise comes from OS entropy: two calls differ.
    assert not np.array_equal(
        client_activation(model, x, CPU, options), client_activation(model, x, CPU, options)
    )


def test_config_round_trip_and_client_helper(model, x):
    options = ActivationOptions(
        source="penultimate_raw", max_samples=7, projection_dim=3, projection_seed=2
    )
    config = ConfigRecord(options.to_config())
    assert ActivationOptions.from_config(config) == options
    assert ActivationOptions.from_config(ConfigRecord({})) == ActivationOptions()
    sent = activation_for_config(model, x, CPU, config, sample_seed=0)
    assert isinstance(sent, list) and len(sent) == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"source": "logits"}, "source must be one of"),
        ({"max_samples": 0}, "max_samples must be an int >= 1, got 0"),
        ({"min_samples": -1}, "min_samples must be an int >= 0, got -1"),
        ({"projection_dim": 1.5}, "projection_dim must be an int >= 0, got 1.5"),
        ({"projection_seed": -2}, "projection_seed must be an int >= 0, got -2"),
        ({"dp_clip": -1.0}, "dp_clip must be a finite number >= 0, got -1.0"),
        ({"dp_noise": math.inf, "dp_clip": 1.0}, "dp_noise must be a finite number >= 0"),
        ({"dp_noise": 1.0}, "dp_noise > 0 needs dp_clip > 0, got dp_clip=0.0"),
    ],
)
def test_options_are_validated(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ActivationOptions(**kwargs)


def test_config_with_a_wrong_type_is_rejected():
    with pytest.raises(ValueError, match="config key 'activation-max-samples' must be int"):
        ActivationOptions.from_config(ConfigRecord({"activation-max-samples": 2.5}))


def test_empty_split_and_bad_projection_arguments_are_rejected(model):
    with pytest.raises(ValueError, match="cannot compute an activation vector of an empty split"):
        client_activation(model, np.zeros((0, 1, 8, 8), np.float32), CPU)
    with pytest.raises(ValueError, match="output_dim must be an int >= 1, got 0"):
        projection_matrix(4, 0, 0)
