"""Multinomial logistic regression and a one-hidden-layer MLP on flattened inputs."""

from __future__ import annotations

import math

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
        return self.flatten(x)

    def classifier(self, h: Tensor) -> Tensor:
        """Return the logits ``h @ W.T + b``. See `FairModel.classifier`."""
        return self.fc(h)


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
        return self.body(x)

    def classifier(self, h: Tensor) -> Tensor:
        """Return the output layer's logits. See `FairModel.classifier`."""
        return self.fc(h)
