"""Logistic regression (multinomial, and binary as FLamby trains it) and a one-hidden-layer MLP."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from fairfl.models.base import FairModel, check_int


class LogisticRegression(FairModel):
    """Multinomial logistic regression: flatten, then one linear layer.

    A linear model has no hidden layer, so its "penultimate layer" is its input:
    `features` returns the flattened input and ``feature_dim`` is the number of
    input values. Equitable FL's activation vectors are then the clients' mean
    inputs.

    Parameters
    ----------
    input_shape : tuple[int, ...]
        Shape of one example without the batch dimension, e.g. ``(60,)`` or
        ``(1, 28, 28)``.
    num_classes : int
        Number of classes, at least 2.

    Raises
    ------
    ValueError
        See `FairModel`.

    """

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__(input_shape, num_classes)
        self.feature_dim = math.prod(self.input_shape)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(self.feature_dim, self.num_classes)

    def features(self, x: Tensor) -> Tensor:
        """Return the flattened input, shape ``(batch, prod(input_shape))``.

        See `FairModel.features`.
        """
        self.check_input(x)
        out: Tensor = self.flatten(x)
        return out

    def classifier(self, h: Tensor) -> Tensor:
        """Return the logits ``h @ W.T + b``. See `FairModel.classifier`."""
        out: Tensor = self.fc(h)
        return out


class MLP(FairModel):
    """Flatten, then Linear(d, hidden) → ReLU → Linear(hidden, num_classes).

    `features` returns the hidden layer after its ReLU.

    Parameters
    ----------
    input_shape : tuple[int, ...]
        Shape of one example without the batch dimension.
    num_classes : int
        Number of classes, at least 2.
    hidden : int (default: 64)
        Width of the hidden layer, which is ``feature_dim``.

    Raises
    ------
    ValueError
        If ``hidden`` < 1; otherwise see `FairModel`.

    """

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, *, hidden: int = 64) -> None:
        super().__init__(input_shape, num_classes)
        self.feature_dim = check_int("hidden", hidden, minimum=1)
        self.body = nn.Sequential(
            nn.Flatten(),
            nn.Linear(math.prod(self.input_shape), self.feature_dim),
            nn.ReLU(),
        )
        self.fc = nn.Linear(self.feature_dim, self.num_classes)

    def features(self, x: Tensor) -> Tensor:
        """Return the hidden ReLU activations. See `FairModel.features`."""
        self.check_input(x)
        out: Tensor = self.body(x)
        return out

    def classifier(self, h: Tensor) -> Tensor:
        """Return the output layer's logits. See `FairModel.classifier`."""
        out: Tensor = self.fc(h)
        return out


class BinaryLogisticRegression(FairModel):
    """Binary logistic regression ``sigmoid(w·x + b)`` with one weight row, as two logits.

    FLamby's Fed-Heart-Disease model (Ogier du Terrail et al., NeurIPS 2022 Datasets and
    Benchmarks): ``Linear(d, 1)``, a sigmoid and the binary cross-entropy. fairfl's
    clients train on the softmax cross-entropy of integer labels, so the score
    ``z = w·x + b`` is returned as the logits ``[0, z]``: then
    ``softmax([0, z])_1 = 1 / (1 + e^{-z}) = sigmoid(z)``, the cross-entropy of label y is
    ``BCE(sigmoid(z), y)``, and the argmax is class 1 exactly when ``sigmoid(z) > 0.5``
    (a tie, z = 0, is class 0 in both). The parameters are FLamby's: ``fc.weight`` of shape
    ``(1, d)`` and ``fc.bias`` of shape ``(1,)``.

    Parameters
    ----------
    input_shape : tuple[int, ...]
        Shape of one example without the batch dimension, e.g. ``(13,)``.
    num_classes : int
        Must be 2.

    Raises
    ------
    ValueError
        If ``num_classes`` is not 2; otherwise see `FairModel`.

    """

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__(input_shape, num_classes)
        if self.num_classes != 2:
            raise ValueError(
                f"BinaryLogisticRegression is a two-class model, got num_classes={num_classes}"
            )
        self.feature_dim = math.prod(self.input_shape)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(self.feature_dim, 1)

    def features(self, x: Tensor) -> Tensor:
        """Return the flattened input, as `LogisticRegression` does."""
        self.check_input(x)
        out: Tensor = self.flatten(x)
        return out

    def classifier(self, h: Tensor) -> Tensor:
        """Return the logits ``[0, z]`` of the score ``z = h @ w + b``, shape ``(batch, 2)``."""
        score = self.fc(h)
        return torch.cat([torch.zeros_like(score), score], dim=1)
