"""Local computation a fair rule needs from a client, as plain functions on a model.

Other ClientApps can call these directly (see README, "Plug into your Flower app"):
:func:`mean_loss` gives F_k(w^t) for ``train_loss``, :func:`activation_vector` the mean
raw penultimate features (Equitable FL's report is
:func:`fairfl.client.activation.client_activation`), :func:`train_local` the local SGD
epochs.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterable

import numpy as np
import torch
from torch import Tensor, nn

from fairfl.client.placement import VISIBLE_ENV, place

BatchObjective = Callable[[Tensor], Tensor]
#: ``loss_fn(outputs, targets)``: the mean loss of a batch, a scalar tensor.
LossFn = Callable[[Tensor, Tensor], Tensor]

_EVAL_BATCH = 1024


def pick_device(requested: str = "auto") -> torch.device:
    """Resolve a node's ``device`` for this process (:func:`fairfl.client.placement.place`).

    ``auto`` is the GPU assigned to this process (``CUDA_VISIBLE_DEVICES``, which Ray
    sets for a ClientApp actor) when one is visible, else the CPU; the reason for a CPU
    fallback is logged once per process.

    Raises
    ------
    ValueError
        If ``requested`` is not ``auto``, ``cpu`` or ``cuda[:N]``, or names a GPU this
        process does not see.
    """
    placed = place(
        requested,
        visible=os.environ.get(VISIBLE_ENV),
        cuda_available=torch.cuda.is_available(),
        device_count=torch.cuda.device_count(),
    )
    if requested == "auto" and not placed.on_gpu:
        _log_fallback(placed.reason)
    return torch.device(placed.device)


@functools.cache
def _log_fallback(reason: str) -> None:
    logging.getLogger(__name__).info("device auto: this client trains on the CPU: %s", reason)


def _batches(x: np.ndarray, batch_size: int) -> range:
    return range(0, len(x), batch_size)


@torch.no_grad()
def mean_loss(model: nn.Module, x: np.ndarray, y: np.ndarray, device: torch.device) -> float:
    """Mean cross-entropy of ``model`` over all of ``(x, y)``: F_k(w) of the papers.

    Measured in eval mode, without gradients, over the whole split (docs/specs/spec-vred-qffl.md
    §1.2: the q-FFL and PropFair reference codes both take a full pass).
    """
    return evaluate(model, x, y, device)[0]


@torch.no_grad()
def evaluate(
    model: nn.Module, x: np.ndarray, y: np.ndarray, device: torch.device
) -> tuple[float, float]:
    """Mean cross-entropy and accuracy (fraction) of ``model`` on ``(x, y)``."""
    if len(x) == 0:
        raise ValueError("cannot evaluate on an empty split")
    model.eval()
    total_loss = 0.0
    correct = 0
    for start in _batches(x, _EVAL_BATCH):
        inputs = torch.from_numpy(x[start : start + _EVAL_BATCH]).to(device)
        labels = torch.from_numpy(y[start : start + _EVAL_BATCH]).to(device)
        logits = model(inputs)
        total_loss += float(nn.functional.cross_entropy(logits, labels, reduction="sum"))
        correct += int((logits.argmax(dim=1) == labels).sum())
    return total_loss / len(x), correct / len(x)


@torch.no_grad()
def activation_vector(model: nn.Module, x: np.ndarray, device: torch.device) -> np.ndarray:
    """Mean raw penultimate-layer activation ``(1/n) Σ_x model.features(x)``, eval mode.

    Not Equitable FL's vector: Definition 1 and Figure 1 of [Equitable FL] pass each sample's
    penultimate activation through a log-softmax before the mean,
    ``(1/n) Σ_x log_softmax(h(x))``, which is what
    :func:`fairfl.client.activation.client_activation` (default options) and Equitable
    FL's default ``activation_source="penultimate_logsoftmax"`` report. This function
    is that computation with ``source="penultimate_raw"``, over every sample.
    """
    if len(x) == 0:
        raise ValueError("cannot compute an activation vector of an empty split")
    model.eval()
    total: Tensor | None = None
    for start in _batches(x, _EVAL_BATCH):
        inputs = torch.from_numpy(x[start : start + _EVAL_BATCH]).to(device)
        batch_sum = model.features(inputs).sum(dim=0)  # type: ignore[operator]
        total = batch_sum if total is None else total + batch_sum
    assert total is not None
    return (total / len(x)).double().cpu().numpy()


def train_local(
    model: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    device: torch.device,
    seed: int,
    batch_objective: BatchObjective | None = None,
    proximal_mu: float = 0.0,
    anchor: list[Tensor] | None = None,
    steps: int = 0,
) -> float:
    """Run ``epochs`` of minibatch SGD on ``(x, y)``, or ``steps``; return the mean batch loss.

    Parameters
    ----------
    model : nn.Module
        Trained in place.
    epochs, batch_size, lr : int, int, float
        Local epochs E, batch size B and step size η.
    device : torch.device
        Where to train.
    seed : int
        Seeds the shuffling, so a client's update is reproducible from (seed, round).
    batch_objective : Callable[[Tensor], Tensor] | None
        Maps the batch's mean cross-entropy to the loss to minimise (PropFair's
        transform); identity when ``None``.
    proximal_mu : float
        FedProx term ``μ/2 ||w - w^t||²`` around the received weights (0: off).
    anchor : list[Tensor] | None
        The w^t of the proximal term, one tensor per parameter in
        ``model.parameters()`` order; ``None``: the model's weights before training.
        Ditto's personal step (Algorithm 1, line 6) anchors v_k at the received global
        model while training v_k.
    steps : int (default: 0)
        When > 0, exactly this many minibatch steps instead of ``epochs`` passes: the
        batches run through reshuffled passes over the data, a pass's last batch short as
        in the epochs, and the count stops mid-pass (FLamby's ``num_updates``: a budget in
        steps, the same for a client of 30 samples and one of 199).
    """
    if epochs < 1 or batch_size < 1 or not lr > 0 or steps < 0:
        raise ValueError(
            f"need epochs >= 1, batch_size >= 1, lr > 0, steps >= 0; got {epochs}, "
            f"{batch_size}, {lr}, {steps}"
        )
    if steps > 0 and len(x) == 0:
        raise ValueError(f"cannot take {steps} local steps on an empty training split")
    model.train()
    parameters = list(model.parameters())
    generator = torch.Generator().manual_seed(seed)
    inputs_all = torch.from_numpy(x).to(device)
    labels_all = torch.from_numpy(y).to(device)
    losses: list[float] = []

    def cross_entropy(outputs: Tensor, targets: Tensor) -> Tensor:
        loss = nn.functional.cross_entropy(outputs, targets)
        losses.append(float(loss.detach()))  # the batch's F_k, before the objective
        return loss

    objective = proximal_objective(
        cross_entropy, model, proximal_mu, anchor=anchor, transform=batch_objective
    )
    remaining = steps if steps > 0 else epochs * len(_batches(x, batch_size))
    while remaining > 0:
        order = torch.randperm(len(x), generator=generator).to(device)
        for start in _batches(x, batch_size)[:remaining]:
            index = order[start : start + batch_size]
            zero_grad(parameters)
            objective(model(inputs_all[index]), labels_all[index]).backward()
            sgd_step(parameters, lr)
        remaining -= len(_batches(x, batch_size)[:remaining])
    return float(np.mean(losses))


def zero_grad(parameters: Iterable[Tensor]) -> None:
    """Drop the gradients, as ``torch.optim.Optimizer.zero_grad()`` does (set to None)."""
    for parameter in parameters:
        parameter.grad = None


@torch.no_grad()
def sgd_step(parameters: Iterable[Tensor], lr: float) -> None:
    """One plain SGD step, w ← w − η ∇F(w), on every parameter that has a gradient.

    Bit-identical to ``torch.optim.SGD(parameters, lr=η).step()`` with its defaults (no
    momentum, dampening, weight decay or Nesterov): the same ``add_(grad, alpha=-η)``
    per tensor on CPU, and the same ``torch._foreach_add_`` when every parameter is on a
    CUDA device (torch's default there). Creating a ``torch.optim`` optimizer imports
    ``torch._dynamo`` (~0.9 s), which a fresh ClientApp process pays on every message.

    Parameters
    ----------
    parameters : Iterable[Tensor]
        Updated in place; parameters without a gradient are left alone.
    lr : float
        Step size η.
    """
    params = [p for p in parameters if p.grad is not None]
    grads = [p.grad for p in params]
    if params and all(p.device.type == "cuda" for p in params):
        torch._foreach_add_(params, grads, alpha=-lr)  # type: ignore[arg-type]
        return
    for param, grad in zip(params, grads, strict=True):
        param.add_(grad, alpha=-lr)  # type: ignore[arg-type]


def proximal_objective(
    loss_fn: LossFn,
    model: nn.Module,
    mu: float,
    *,
    anchor: list[Tensor] | None = None,
    transform: BatchObjective | None = None,
) -> LossFn:
    """``T(loss_fn(outputs, targets)) + μ/2 ||w - w^t||²``: the proximal objective.

    FedProx's local objective (``proximal-mu``, with PropFair's T where the rule sends
    it), and Ditto's personal one: Algorithm 1, line 6 of Ditto (Li et al., ICML 2021)
    is an SGD step on ``F_k(v_k) + λ/2 ||v_k - w^t||²``, this with μ = λ and w^t the
    *received* global model while ``model`` holds v_k. One function for both, so that
    :func:`train_local`, :func:`fairfl.client.objectives.objective_loss` and
    :func:`fairfl.client.ditto.personal_batches_step` minimise the same expression.

    Parameters
    ----------
    loss_fn : Callable[[Tensor, Tensor], Tensor]
        ``loss_fn(outputs, targets)``: the mean loss of a batch.
    model : nn.Module
        The model being trained; w is its parameters when the loss is called.
    mu : float
        μ >= 0 (0: no proximal term).
    anchor : list[Tensor] | None
        w^t, one tensor per parameter in ``model.parameters()`` order; ``None``: a copy
        of ``model``'s parameters taken now.
    transform : Callable[[Tensor], Tensor] | None
        T, applied to the batch loss before the term is added; ``None``: the identity.

    Returns
    -------
    Callable[[Tensor, Tensor], Tensor]
        ``loss_fn`` itself when ``transform`` is ``None`` and μ is 0.
    """
    if transform is None and mu == 0:
        return loss_fn
    if anchor is None:
        anchor = [p.detach().clone() for p in model.parameters()] if mu > 0 else []

    def objective(outputs: Tensor, targets: Tensor) -> Tensor:
        value = loss_fn(outputs, targets)
        if transform is not None:
            value = transform(value)
        if mu > 0:
            value = value + proximal_term(model, anchor, mu)
        return value

    return objective


def proximal_term(model: nn.Module, anchor: list[Tensor], mu: float) -> Tensor:
    """FedProx's ``μ/2 ||w - w^t||²`` with ``anchor`` = w^t, one tensor per parameter."""
    drift = sum(torch.sum((p - a) ** 2) for p, a in zip(model.parameters(), anchor, strict=True))
    return 0.5 * mu * drift  # type: ignore[return-value]
