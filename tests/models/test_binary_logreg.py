"""`BinaryLogisticRegression`: FLamby's Linear(13, 1) + sigmoid + BCE, as two logits [0, z]."""

import math

import pytest
import torch
from torch import nn

from fairfl.models import build_model
from fairfl.models.linear import BinaryLogisticRegression


def test_parameters_are_flambys_linear_13_to_1():
    model = build_model("binary-logreg", (13,), 2, seed=0)
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    assert shapes == {"fc.weight": (1, 13), "fc.bias": (1,)}


def test_logits_are_zero_and_the_score():
    model = BinaryLogisticRegression((3,), 2)
    with torch.no_grad():
        model.fc.weight.copy_(torch.tensor([[1.0, -2.0, 0.5]]))
        model.fc.bias.fill_(0.25)
    logits = model(torch.tensor([[1.0, 1.0, 2.0]]))
    # z = 1 - 2 + 1 + 0.25 = 0.25, worked by hand
    torch.testing.assert_close(logits, torch.tensor([[0.0, 0.25]]), rtol=0, atol=0)


def test_cross_entropy_of_zero_and_score_is_the_binary_cross_entropy_of_the_sigmoid():
    generator = torch.Generator().manual_seed(0)
    z = torch.randn(256, generator=generator, dtype=torch.float64) * 6
    y = torch.randint(0, 2, (256,), generator=generator)
    logits = torch.stack([torch.zeros_like(z), z], dim=1)
    softmax_ce = nn.functional.cross_entropy(logits, y, reduction="none")
    bce = nn.functional.binary_cross_entropy(torch.sigmoid(z), y.double(), reduction="none")
    # Relative 1e-10: BCE takes log(1 - sigmoid(z)) of a rounded sigmoid, which loses
    # digits where sigmoid(z) is near 1 (|z| up to ~20 here), and the softmax form of a loss
    # near 0 loses them to logsumexp(0, z) - z: the identity itself is exact.
    torch.testing.assert_close(softmax_ce, bce, rtol=1e-10, atol=1e-15)
    # One value by hand: z = log 3, y = 1: sigmoid = 3/4, loss = -log(3/4).
    one = nn.functional.cross_entropy(
        torch.tensor([[0.0, math.log(3.0)]], dtype=torch.float64), torch.tensor([1])
    )
    assert one.item() == pytest.approx(-math.log(0.75), abs=1e-15)


def test_argmax_is_the_sigmoid_above_one_half():
    z = torch.tensor([-3.0, -1e-6, 0.0, 1e-6, 2.0])
    logits = torch.stack([torch.zeros_like(z), z], dim=1)
    assert logits.argmax(dim=1).tolist() == (torch.sigmoid(z) > 0.5).long().tolist()
    assert logits.argmax(dim=1).tolist() == [0, 0, 0, 1, 1]  # z = 0 is class 0 in both


def test_more_than_two_classes_is_refused():
    with pytest.raises(ValueError, match="two-class model, got num_classes=3"):
        build_model("binary-logreg", (13,), 3)
