"""Tests of `build_model`: names, seeding, and that the global RNG is left alone."""

import numpy as np
import pytest
import torch

from fairfl.models import MODELS, build_model, model_to_arrays

SHAPES = {
    "logreg": (60,),
    "binary-logreg": (13,),
    "mlp": (60,),
    "cnn": (1, 8, 8),
    "resnet18gn": (3, 32, 32),
}
CLASSES = {"binary-logreg": 2}  # the others: 10


def test_models_lists_the_five_architectures():
    assert MODELS == ("logreg", "binary-logreg", "mlp", "cnn", "resnet18gn")


@pytest.mark.parametrize("name", MODELS)
def test_same_seed_gives_bit_identical_weights(name):
    # Prepare: disturb the global RNG between the two builds
    first = model_to_arrays(build_model(name, SHAPES[name], CLASSES.get(name, 10), seed=3))
    torch.manual_seed(12345)
    torch.rand(7)
    # Execute
    second = model_to_arrays(build_model(name, SHAPES[name], CLASSES.get(name, 10), seed=3))
    # Assert
    assert first.keys() == second.keys()
    for key in first:
        assert first[key].tobytes() == second[key].tobytes(), key


@pytest.mark.parametrize("name", MODELS)
def test_different_seeds_give_different_weights(name):
    a = model_to_arrays(build_model(name, SHAPES[name], CLASSES.get(name, 10), seed=0))
    b = model_to_arrays(build_model(name, SHAPES[name], CLASSES.get(name, 10), seed=1))
    assert not all(np.array_equal(a[k], b[k]) for k in a)


def test_default_seed_is_zero():
    a = model_to_arrays(build_model("mlp", (60,), 10))
    b = model_to_arrays(build_model("mlp", (60,), 10, seed=0))
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_global_rng_state_is_untouched():
    torch.manual_seed(99)
    state = torch.get_rng_state()
    build_model("cnn", (1, 8, 8), 10, seed=5)
    assert torch.equal(torch.get_rng_state(), state)


def test_model_is_on_cpu_in_training_mode():
    model = build_model("cnn", (3, 32, 32), 10)
    assert model.training
    assert all(p.device.type == "cpu" for p in model.parameters())


def test_unknown_name_lists_valid_choices():
    with pytest.raises(
        ValueError,
        match=r"unknown model 'resnet50'; valid choices: logreg, binary-logreg, mlp, cnn, "
        r"resnet18gn",
    ):
        build_model("resnet50", (3, 32, 32), 10)


@pytest.mark.parametrize(
    ("seed", "message"),
    [
        (-1, r"seed must be an int >= 0, got -1"),  # negative (BAD)
        (1.5, r"seed must be an int >= 0, got 1.5"),  # would be truncated by torch (BAD)
    ],
)
def test_invalid_seed_is_rejected(seed, message):
    with pytest.raises(ValueError, match=message):
        build_model("mlp", (60,), 10, seed=seed)


def test_numpy_integers_are_accepted():
    model = build_model("mlp", (np.int64(60),), np.int64(10), seed=np.int64(2))
    assert model.input_shape == (60,) and type(model.input_shape[0]) is int
    assert model.num_classes == 10 and type(model.num_classes) is int
