"""Tests of the zoo's architectures: shapes, feature/head split, state tensors, errors."""

import copy
import pickle

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from fairfl.models import CNN, MLP, MODELS, FairModel, LogisticRegression, build_model

DIGITS = (1, 8, 8)
SYNTHETIC = (60,)
MNIST = (1, 28, 28)
CIFAR = (3, 32, 32)
#: Classes of the models with a fixed number (the others take any number >= 2).
FIXED_CLASSES = {"binary-logreg": 2}

# Every (model, input shape) pair the zoo supports; the convolutional models need
# (channels, height, width), so they skip the flat Synthetic shape.
CASES = [
    ("logreg", DIGITS),
    ("logreg", SYNTHETIC),
    ("logreg", MNIST),
    ("logreg", CIFAR),
    ("mlp", DIGITS),
    ("mlp", SYNTHETIC),
    ("mlp", MNIST),
    ("mlp", CIFAR),
    ("cnn", DIGITS),
    ("cnn", MNIST),
    ("cnn", CIFAR),
    ("resnet18gn", DIGITS),
    ("resnet18gn", MNIST),
    ("resnet18gn", CIFAR),
]

# feature_dim of each model with default hyperparameters, for an input of d values.
EXPECTED_FEATURE_DIM = {
    "logreg": lambda d: d,  # the penultimate layer of a linear model is its input
    "mlp": lambda d: 64,
    "cnn": lambda d: 128,
    "resnet18gn": lambda d: 512,
}


@pytest.mark.parametrize(("name", "shape"), CASES)
def test_forward_and_features_shapes(name, shape):
    # Prepare
    model = build_model(name, shape, num_classes=7)
    x = torch.randn(5, *shape)
    # Execute
    logits = model(x)
    h = model.features(x)
    # Assert
    d = torch.Size(shape).numel()
    assert model.feature_dim == EXPECTED_FEATURE_DIM[name](d)
    assert h.shape == (5, model.feature_dim)
    assert logits.shape == (5, 7)
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize(("name", "shape"), CASES)
def test_classifier_of_features_equals_forward(name, shape):
    model = build_model(name, shape, num_classes=3).eval()
    x = torch.randn(4, *shape)
    with torch.no_grad():
        torch.testing.assert_close(model.classifier(model.features(x)), model(x), rtol=0, atol=0)


@pytest.mark.parametrize(("name", "shape"), CASES)
def test_backward_reaches_every_parameter(name, shape):
    model = build_model(name, shape, num_classes=3)
    x = torch.randn(4, *shape)
    loss = nn.functional.cross_entropy(model(x), torch.tensor([0, 1, 2, 0]))
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_logreg_features_are_the_flattened_input():
    model = build_model("logreg", MNIST, num_classes=10)
    x = torch.randn(2, *MNIST)
    torch.testing.assert_close(model.features(x), x.reshape(2, -1), rtol=0, atol=0)


@pytest.mark.parametrize("shape", [DIGITS, CIFAR])
@pytest.mark.parametrize("name", MODELS)
def test_state_is_float_parameters_only(name, shape):
    # Weighted averaging of every state tensor is only valid without buffers such as
    # BatchNorm's running statistics and integer batch counters.
    model = build_model(name, shape, num_classes=FIXED_CLASSES.get(name, 10))
    state = model.state_dict()
    assert list(model.buffers()) == []
    assert state.keys() == dict(model.named_parameters()).keys()
    assert all(t.dtype == torch.float32 for t in state.values())
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def test_resnet18gn_matches_torchvision_resnet18():
    model = build_model("resnet18gn", CIFAR, num_classes=10)
    # torchvision's resnet18 has 11,181,642 parameters for 10 classes; GroupNorm
    # has the same affine parameters as the BatchNorm it replaces.
    assert sum(p.numel() for p in model.parameters()) == 11_181_642
    norms = [m for m in model.modules() if isinstance(m, nn.GroupNorm)]
    assert len(norms) == 20  # stem + 2 per block x 8 blocks + 3 downsample
    assert all(m.num_groups == 2 for m in norms)
    assert model.conv1.kernel_size == (7, 7) and model.conv1.stride == (2, 2)
    assert isinstance(model.maxpool, nn.MaxPool2d)
    assert {"conv1.weight", "bn1.weight", "layer4.1.bn2.bias", "fc.weight"} <= set(
        model.state_dict()
    )


def test_resnet18gn_stem_follows_input_channels():
    model = build_model("resnet18gn", MNIST, num_classes=10)
    assert model.conv1.weight.shape == (64, 1, 7, 7)
    assert sum(p.numel() for p in model.parameters()) == 11_181_642 - 2 * 64 * 7 * 7


@pytest.mark.parametrize("name", MODELS)
def test_model_survives_pickle_and_deepcopy(name):
    model = build_model(name, DIGITS, num_classes=FIXED_CLASSES.get(name, 4))
    x = torch.randn(2, *DIGITS)
    for clone in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        torch.testing.assert_close(clone(x), model(x), rtol=0, atol=0)


def test_hidden_width_is_a_keyword():
    assert MLP(SYNTHETIC, 3, hidden=17).features(torch.randn(2, 60)).shape == (2, 17)
    assert CNN(DIGITS, 3, hidden=9).features(torch.randn(2, *DIGITS)).shape == (2, 9)


@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple),
    num_classes=st.integers(2, 6),
    batch=st.integers(1, 3),
)
@settings(max_examples=30, deadline=None)
def test_flat_models_accept_any_positive_shape(shape, num_classes, batch):
    for model in (LogisticRegression(shape, num_classes), MLP(shape, num_classes, hidden=4)):
        assert model(torch.randn(batch, *shape)).shape == (batch, num_classes)


@pytest.mark.parametrize("name", MODELS)
def test_wrong_input_shape_is_rejected(name):
    model = build_model(name, DIGITS, num_classes=FIXED_CLASSES.get(name, 10))
    with pytest.raises(
        ValueError, match=r"expects input of shape \(batch, 1, 8, 8\), got \(4, 1, 28, 28\)"
    ):
        model(torch.randn(4, *MNIST))
    # An unbatched example is rejected too, not silently read as a batch.
    with pytest.raises(
        ValueError, match=r"expects input of shape \(batch, 1, 8, 8\), got \(1, 8, 8\)"
    ):
        model.features(torch.randn(*DIGITS))


@pytest.mark.parametrize("name", ["cnn", "resnet18gn"])
def test_image_models_need_three_dimensional_shapes(name):
    with pytest.raises(
        ValueError, match=r"needs input_shape \(channels, height, width\), got \(60,\)"
    ):
        build_model(name, SYNTHETIC, num_classes=10)


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ((), r"must be non-empty with every dimension >= 1, got \(\)"),  # no dimensions (BAD)
        ((1, 0, 8), r"must be non-empty with every dimension >= 1, got \(1, 0, 8\)"),  # zero (BAD)
        ((60.0,), r"must be a tuple of ints, got \(60.0,\)"),  # float dimension (BAD)
        (60, r"must be a tuple of ints, got 60"),  # not a tuple (BAD)
    ],
)
def test_invalid_input_shape_is_rejected(shape, message):
    with pytest.raises(ValueError, match=r"input_shape " + message):
        build_model("logreg", shape, num_classes=10)


@pytest.mark.parametrize(
    ("num_classes", "message"),
    [
        (1, r"num_classes must be an int >= 2, got 1"),
        (2.0, r"num_classes must be an int >= 2, got 2.0"),
    ],
)
def test_invalid_num_classes_is_rejected(num_classes, message):
    with pytest.raises(ValueError, match=message):
        build_model("mlp", SYNTHETIC, num_classes=num_classes)


@pytest.mark.parametrize("cls", [MLP, CNN])
def test_invalid_hidden_is_rejected(cls):
    with pytest.raises(ValueError, match=r"hidden must be an int >= 1, got 0"):
        cls(DIGITS, 10, hidden=0)


def test_fair_model_is_abstract():
    with pytest.raises(TypeError, match=r"abstract"):
        FairModel(DIGITS, 10)
