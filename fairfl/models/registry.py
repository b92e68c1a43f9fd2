"""Build a zoo model by name, deterministically from a seed."""

from __future__ import annotations

from collections.abc import Callable

import torch

from fairfl.models.base import FairModel, check_int
from fairfl.models.cnn import CNN
from fairfl.models.linear import MLP, BinaryLogisticRegression, LogisticRegression
from fairfl.models.names import MODELS
from fairfl.models.resnet import ResNet18GN

_BUILDERS: dict[str, Callable[[tuple[int, ...], int], FairModel]] = {
    "logreg": LogisticRegression,
    "binary-logreg": BinaryLogisticRegression,
    "mlp": MLP,
    "cnn": CNN,
    "resnet18gn": ResNet18GN,
}

if tuple(_BUILDERS) != MODELS:  # the names are declared torch-free in names.py
    raise ImportError(
        f"fairfl.models.names.MODELS {MODELS} differs from the zoo {tuple(_BUILDERS)}"
    )


def build_model(
    name: str, input_shape: tuple[int, ...], num_classes: int, seed: int = 0
) -> FairModel:
    """Build a model of the zoo with default hyperparameters and seeded weights.

    The weights depend only on ``name``, ``input_shape``, ``num_classes`` and
    ``seed``: the same arguments give bit-identical weights, whatever the global
    RNG state. The global CPU RNG is restored afterwards, so building a model does
    not change what later random calls return. The model is on the CPU.

    Parameters
    ----------
    name : str
        One of `MODELS`: ``"logreg"`` (`LogisticRegression`), ``"binary-logreg"``
        (`BinaryLogisticRegression`, two classes only), ``"mlp"`` (`MLP`),
        ``"cnn"`` (`CNN`) or ``"resnet18gn"`` (`ResNet18GN`).
    input_shape : tuple[int, ...]
        Shape of one example without the batch dimension; ``(channels, height,
        width)`` for ``"cnn"`` and ``"resnet18gn"``.
    num_classes : int
        Number of classes, at least 2.
    seed : int (default: 0)
        Seed of the weight initialisation, >= 0.

    Returns
    -------
    FairModel
        The new model, in training mode.

    Raises
    ------
    ValueError
        If ``name`` is not in `MODELS`, ``seed`` is not an int >= 0, or the model
        rejects ``input_shape`` or ``num_classes`` (see `FairModel`).

    """
    if name not in _BUILDERS:
        raise ValueError(f"unknown model {name!r}; valid choices: {', '.join(MODELS)}")
    seed = check_int("seed", seed, minimum=0)
    # Model constructors draw from the global RNG; fork it so that the caller's
    # state is restored on exit. devices=[]: models are built on the CPU.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _BUILDERS[name](input_shape, num_classes)
