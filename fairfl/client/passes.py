"""Passes over a client's batches: F_k(w), accuracy, the full gradient, group counts.

What :func:`fairfl.client.fair_train` and the built-in client steps
(:mod:`fairfl.client.builtin_steps`) measure on an app's DataLoader.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord
from torch import Tensor, nn

from fairfl.client.batches import BatchKeys, split_batch
from fairfl.client.training import LossFn
from fairfl.contract import keys
from fairfl.contract.config import get_config_value
from fairfl.contract.qffl import qffl_h
from fairfl.contract.sensitive import group_counts
from fairfl.logs import attach_flower_console

logger = logging.getLogger(__name__)

#: ``attribute_fn(batch) -> each sample's sensitive attribute`` (ints in [0, G)).
AttributeFn = Callable[[Any], Any]


def loader_mean_loss(
    model: nn.Module,
    batches: Iterable[Any],
    loss_fn: LossFn,
    device: torch.device,
    batch_keys: BatchKeys | None = None,
) -> tuple[float, int]:
    """Mean of ``loss_fn`` over all samples of ``batches`` and their number.

    Eval mode, no gradients; a batch of n_b samples counts with weight n_b (``loss_fn``
    returns batch means).

    Raises
    ------
    ValueError
        If ``batches`` yields no sample.
    """
    loss, _, count = _loader_pass(model, batches, loss_fn, device, batch_keys, accuracy=False)
    return loss, count


def loader_gradient(
    model: nn.Module,
    batches: Iterable[Any],
    loss_fn: LossFn,
    device: torch.device,
    batch_keys: BatchKeys | None = None,
) -> tuple[dict[str, Tensor], float, int]:
    """Full-batch gradient ∇F_k(w) and F_k(w) of ``model`` in one pass over ``batches``.

    q-FedSGD's client step (Li et al. 2020, Algorithm 1, line 5). ``F_k`` is the mean of
    ``loss_fn`` over all samples: each batch's mean loss is weighted by its size n_b, so
    the gradient is that of the mean loss over the whole split however the batches are
    cut. Eval mode (the loss F_k that the reply reports, without dropout), gradients
    accumulated over the batches; the model's weights are not changed and its ``.grad``
    fields are left empty.

    Parameters
    ----------
    model : nn.Module
        The received model w^t, on ``device``.
    batches : Iterable
        ``(inputs, targets)`` pairs or dict batches (tensors or arrays), iterated once.
    loss_fn : Callable[[Tensor, Tensor], Tensor]
        The **mean** loss of a batch.
    device : torch.device
        Where the batches are moved.
    batch_keys : tuple[str, str] | None
        A dict batch's ``(inputs, targets)`` keys (:func:`fairfl.client.batches.split_batch`).

    Returns
    -------
    tuple[dict[str, Tensor], float, int]
        The gradient per ``state_dict`` key (CPU, each entry's dtype; zeros for buffers
        and parameters without a gradient), F_k(w) and the number of samples.

    Raises
    ------
    ValueError
        If ``batches`` yields no sample.
    TypeError
        If a batch is neither an ``(inputs, targets)`` pair nor a dict.
    """
    model.eval()
    parameters = dict(model.named_parameters())
    model.zero_grad(set_to_none=True)
    total_loss, count = 0.0, 0
    with torch.enable_grad():
        for batch in batches:
            inputs, targets = split_batch(batch, batch_keys)
            inputs = torch.as_tensor(inputs).to(device)
            targets = torch.as_tensor(targets).to(device)
            size = len(targets)
            loss = loss_fn(model(inputs), targets)
            (loss * size).backward()
            total_loss += float(loss.detach()) * size
            count += size
    if count == 0:
        raise ValueError("the loader yielded no sample")
    gradient: dict[str, Tensor] = {}
    for key, value in model.state_dict().items():
        parameter = parameters.get(key)
        if parameter is None or parameter.grad is None:
            gradient[key] = torch.zeros_like(value, device="cpu")
        else:
            gradient[key] = (parameter.grad.detach() / count).to(value.dtype).cpu()
    model.zero_grad(set_to_none=True)
    return gradient, total_loss / count, count


def loader_evaluate(
    model: nn.Module,
    batches: Iterable[Any],
    loss_fn: LossFn,
    device: torch.device,
    batch_keys: BatchKeys | None = None,
) -> tuple[float, float, int]:
    """Mean loss, accuracy (fraction, argmax over dim 1) and sample count of ``batches``.

    Raises
    ------
    ValueError
        If ``batches`` yields no sample.
    """
    return _loader_pass(model, batches, loss_fn, device, batch_keys, accuracy=True)


@torch.no_grad()
def loader_group_counts(
    model: nn.Module,
    batches: Iterable[Any],
    attribute_fn: AttributeFn,
    num_groups: int,
    device: torch.device,
    batch_keys: BatchKeys | None = None,
) -> list[int]:
    """``group-counts`` of ``model``'s argmax predictions over ``batches``.

    Entry ``4 a + 2 y + ŷ`` counts the samples with attribute ``a`` (``attribute_fn`` of
    their batch), label ``y`` and prediction ``ŷ``
    (:func:`fairfl.contract.sensitive.group_counts`).

    Raises
    ------
    ValueError
        If ``batches`` yields no sample, an attribute is outside [0, ``num_groups``), a
        label or prediction is not 0 or 1, or ``attribute_fn`` gives another number of
        values than the batch has samples.
    """
    model.eval()
    attributes: list[Any] = []
    labels: list[Any] = []
    predictions: list[Any] = []
    for batch in batches:
        inputs, targets = split_batch(batch, batch_keys)
        values = torch.as_tensor(attribute_fn(batch)).reshape(-1).cpu()
        if len(values) != len(targets):
            raise ValueError(
                f"attribute_fn gave {len(values)} attribute values for a batch of "
                f"{len(targets)} samples"
            )
        outputs = model(torch.as_tensor(inputs).to(device))
        attributes.append(values.numpy())
        labels.append(torch.as_tensor(targets).reshape(-1).cpu().numpy())
        predictions.append(outputs.argmax(dim=1).cpu().numpy())
    if not labels:
        raise ValueError("the loader yielded no sample")
    return group_counts(
        np.concatenate(attributes), np.concatenate(labels), np.concatenate(predictions), num_groups
    )


@torch.no_grad()
def _loader_pass(
    model: nn.Module,
    batches: Iterable[Any],
    loss_fn: LossFn,
    device: torch.device,
    batch_keys: BatchKeys | None,
    *,
    accuracy: bool,
) -> tuple[float, float, int]:
    model.eval()
    total_loss, correct, count = 0.0, 0, 0
    for batch in batches:
        inputs, targets = split_batch(batch, batch_keys)
        inputs = torch.as_tensor(inputs).to(device)
        targets = torch.as_tensor(targets).to(device)
        outputs = model(inputs)
        total_loss += float(loss_fn(outputs, targets)) * len(targets)
        count += len(targets)
        if accuracy:
            correct += int((outputs.argmax(dim=1) == targets).sum())
    if count == 0:
        raise ValueError("the loader yielded no sample")
    return total_loss / count, correct / count, count


def qffl_h_for_config(
    config: ConfigRecord, loss_before: float, sent: ArrayRecord, state: Mapping[str, Tensor]
) -> float | None:
    """h_k for the reply's ``qffl-h`` when the round is a q-FFL one, else ``None``.

    The paper's client protocol (002, Algorithm 2): q-FFL sends ``qffl-q`` every round.
    ``sent`` is the received global model, ``state`` the trained one (CPU tensors).
    """
    if keys.QFFL_Q not in config:
        return None
    return qffl_h(
        loss_before,
        sent.to_numpy_ndarrays(),
        [state[key].numpy() for key in sent],
        get_config_value(config, keys.QFFL_Q, float),
        get_config_value(config, keys.LR, float),
    )


def console_warning(message: str, *args: object) -> None:
    """Log a WARNING where Flower's console shows it (a ClientApp has no handler)."""
    attach_flower_console(level=None)
    logger.warning(message, *args)
