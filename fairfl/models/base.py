"""Base class of the fairfl model zoo and the argument checks its models share."""

from __future__ import annotations

import operator
from abc import ABC, abstractmethod

from torch import Tensor, nn


class FairModel(nn.Module, ABC):
    """A classifier split into a feature extractor and a classification head.

    Fair aggregation rules need more than logits: Equitable FL clusters clients by
    the mean *penultimate-layer activation* of the global model on their data. Every
    fairfl model therefore exposes that layer as `features`, and its head as
    `classifier`, with ``forward(x) == classifier(features(x))``.

    A subclass calls ``super().__init__(input_shape, num_classes, image=...)``, sets
    `feature_dim`, and implements `features` (calling `check_input` first) and
    `classifier`.

    Parameters
    ----------
    input_shape : tuple[int, ...]
        Shape of one example, without the batch dimension, e.g. ``(1, 28, 28)``.
    num_classes : int
        Number of classes, at least 2: a softmax over one logit is constant, so
        its cross-entropy is always 0 and nothing can be learned.
    image : bool (default: False)
        Whether the model needs ``input_shape == (channels, height, width)``.

    Attributes
    ----------
    input_shape : tuple[int, ...]
        The validated ``input_shape``.
    num_classes : int
        Number of logits the model outputs.
    feature_dim : int
        Width of the penultimate layer: `features` returns ``(batch, feature_dim)``.

    Raises
    ------
    ValueError
        If ``input_shape`` has a dimension < 1 (or is not 3-d when ``image``), or
        ``num_classes`` < 2.

    """

    feature_dim: int

    def __init__(
        self, input_shape: tuple[int, ...], num_classes: int, *, image: bool = False
    ) -> None:
        super().__init__()
        self.input_shape = check_input_shape(input_shape)
        if image and len(self.input_shape) != 3:
            raise ValueError(
                f"{type(self).__name__} needs input_shape (channels, height, width), "
                f"got {self.input_shape}"
            )
        self.num_classes = check_int("num_classes", num_classes, minimum=2)

    @abstractmethod
    def features(self, x: Tensor) -> Tensor:
        """Compute the penultimate-layer activations.

        Parameters
        ----------
        x : Tensor
            A batch of shape ``(batch, *input_shape)``.

        Returns
        -------
        Tensor
            Activations of shape ``(batch, feature_dim)``.

        Raises
        ------
        ValueError
            If ``x`` does not have shape ``(batch, *input_shape)``.

        """

    @abstractmethod
    def classifier(self, h: Tensor) -> Tensor:
        """Map penultimate-layer activations to logits.

        Parameters
        ----------
        h : Tensor
            Activations of shape ``(batch, feature_dim)``, as returned by `features`.

        Returns
        -------
        Tensor
            Logits of shape ``(batch, num_classes)``.

        """

    def forward(self, x: Tensor) -> Tensor:
        """Compute logits, ``classifier(features(x))``.

        Parameters
        ----------
        x : Tensor
            A batch of shape ``(batch, *input_shape)``.

        Returns
        -------
        Tensor
            Logits of shape ``(batch, num_classes)``.

        Raises
        ------
        ValueError
            If ``x`` does not have shape ``(batch, *input_shape)``.

        """
        return self.classifier(self.features(x))

    def check_input(self, x: Tensor) -> None:
        """Raise if ``x`` is not a batch of examples of shape `input_shape`.

        Parameters
        ----------
        x : Tensor
            The batch to check.

        Raises
        ------
        ValueError
            If ``x.shape`` is not ``(batch, *input_shape)``.

        """
        if tuple(x.shape[1:]) != self.input_shape:
            raise ValueError(
                f"{type(self).__name__} expects input of shape (batch, "
                f"{', '.join(map(str, self.input_shape))}), got {tuple(x.shape)}"
            )


def check_int(name: str, value: int, *, minimum: int) -> int:
    """Return ``value`` as an ``int`` if it is an integer >= ``minimum``.

    Parameters
    ----------
    name : str
        Argument name used in the error message.
    value : int
        Value to check; any integer type (e.g. ``numpy.int64``) is accepted.
    minimum : int
        Smallest allowed value.

    Returns
    -------
    int
        ``value`` as a built-in ``int``.

    Raises
    ------
    ValueError
        If ``value`` is not an integer or is below ``minimum``.

    """
    try:
        number = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}") from None
    if number < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {number}")
    return number


def check_input_shape(input_shape: tuple[int, ...]) -> tuple[int, ...]:
    """Return ``input_shape`` as a tuple of ints if every dimension is >= 1.

    Parameters
    ----------
    input_shape : tuple[int, ...]
        Shape of one example, without the batch dimension.

    Returns
    -------
    tuple[int, ...]
        The validated shape.

    Raises
    ------
    ValueError
        If the shape is empty or has a dimension that is not an int >= 1.

    """
    try:
        dims = tuple(operator.index(d) for d in input_shape)
    except TypeError:
        raise ValueError(f"input_shape must be a tuple of ints, got {input_shape!r}") from None
    if not dims or any(d < 1 for d in dims):
        raise ValueError(f"input_shape must be non-empty with every dimension >= 1, got {dims}")
    return dims
