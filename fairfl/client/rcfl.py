"""RC-FL client: local steps on the smoothed per-client objective, jointly in (ω, η).

Implements the client side of rFedFair (Algorithm 1) of "Fairness-aware Federated
Learning: A Robust Approach" (anonymous ICML submission, the RC-FL paper, docs/specs/spec-rcfl.md).
Each client minimises its smoothed share of the dual RC-FL objective, eq. (5),

    f^{μ,i}(ω, η) = (1/α_i) φ_μ(f̂ⁱ(ω) − η) + η,     φ_μ(x) = μ log(1 + e^{x/μ}),

with κ simultaneous gradient steps in the model ω and the scalar dual variable η (a
loss threshold shared by all clients), and sends back the new ω and η. Its gradients are

    ∇_ω f^{μ,i} = q_i ∇f̂ⁱ(ω),   ∂_η f^{μ,i} = 1 − q_i,   q_i = σ((f̂ⁱ(ω) − η)/μ) / α_i,

so a client whose loss is well above η is up-weighted by up to 1/α_i and one well below
η is switched off. The server (:class:`fairfl.strategies.RCFL`) averages ω and η.

The train config of an RC-FL round carries the keys below; :func:`rcfl_settings` reads
them (``None`` when the config is not an RC-FL one).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator
from dataclasses import MISSING, dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from flwr.app import ConfigRecord
from torch import Tensor, nn

from fairfl.client.batches import BatchKeys, split_batch
from fairfl.client.training import LossFn, sgd_step, zero_grad
from fairfl.contract import keys
from fairfl.contract.config import get_config_value
from fairfl.fields import Fields, Spec, integer, real


@dataclass(frozen=True)
class RCFLSettings(Fields):
    """One client's RC-FL settings for one round, as read from the train config.

    Each bound is declared once, on its field (:mod:`fairfl.fields`); a value out of
    range raises a :class:`~fairfl.fields.ParameterError` naming its config key.

    Attributes
    ----------
    eta : float
        η^t, the global dual variable the client starts from.
    alpha : float
        α_i ∈ (0, 1], this client's conservativeness (cap 1/α_i on its up-weighting).
    mu : float
        μ > 0, the softplus temperature (in loss units).
    local_steps : int
        κ >= 1 local gradient steps.
    lr_eta : float | None
        β_η > 0, the η step size; ``None`` means the model step size.
    batch_size : int
        Examples per step; 0 means the whole local training split.
    """

    # The train config's types are checked when it is read (get_config_value).
    states_type: ClassVar[bool] = False

    eta: float = real(MISSING, key=keys.RCFL_ETA)
    alpha: float = real(
        MISSING, key=keys.RCFL_ALPHA, lower=0.0, upper=1.0, lower_open=True, span=True
    )
    mu: float = real(MISSING, key=keys.RCFL_MU, lower=0.0, lower_open=True)
    local_steps: int = integer(MISSING, key=keys.RCFL_LOCAL_STEPS, lower=1)
    lr_eta: float | None = real(
        None, key=keys.RCFL_LR_ETA, lower=0.0, lower_open=True, optional=True
    )
    batch_size: int = integer(0, key=keys.RCFL_BATCH_SIZE, lower=0)

    @classmethod
    def subject(cls, name: str, spec: Spec) -> str:
        """A message is about the train-config key (``config key 'rcfl-alpha' ...``)."""
        return f"config key {spec.key!r}"


@dataclass(frozen=True)
class RCFLLocalResult:
    """What :func:`train_rcfl` did.

    Attributes
    ----------
    eta : float
        The client's η after its κ steps (sent as ``rcfl-eta``).
    q_first, q_last, q_mean : float
        The effective weight q_i = σ((L − η)/μ)/α_i at the first step, the last step,
        and averaged over the steps (L: the step's batch loss, η before the step).
    loss_last : float
        The batch loss of the last step (before that step's update).
    """

    eta: float
    q_first: float
    q_last: float
    q_mean: float
    loss_last: float


def rcfl_settings(config: ConfigRecord) -> RCFLSettings | None:
    """Read the RC-FL keys of a train config; ``None`` when it has no ``rcfl-alpha``.

    Raises
    ------
    ValueError
        If an RC-FL key is missing, mistyped or out of range (the message names it).
    """
    if keys.RCFL_ALPHA not in config:
        return None
    return RCFLSettings(
        eta=get_config_value(config, keys.RCFL_ETA, float),
        alpha=get_config_value(config, keys.RCFL_ALPHA, float),
        mu=get_config_value(config, keys.RCFL_MU, float),
        local_steps=get_config_value(config, keys.RCFL_LOCAL_STEPS, int),
        lr_eta=get_config_value(config, keys.RCFL_LR_ETA, float)
        if keys.RCFL_LR_ETA in config
        else None,
        batch_size=(
            get_config_value(config, keys.RCFL_BATCH_SIZE, int)
            if keys.RCFL_BATCH_SIZE in config
            else 0
        ),
    )


def smoothed_objective(loss: Tensor, eta: Tensor, *, alpha: float, mu: float) -> Tensor:
    """Return the client's smoothed RC-FL objective ``(1/α) φ_μ(L − η) + η``.

    Eq. (5) of [RC-FL], with the softplus ``φ_μ(x) = μ log(1 + e^{x/μ})`` (the paper
    calls it "softmax"): ``F.softplus(x, beta=1/μ)``, which is numerically stable and
    exactly linear for ``x/μ > 20``.

    Parameters
    ----------
    loss : Tensor
        f̂ⁱ(ω), the client's **mean** loss (a scalar; a sum would change the scale of
        η and μ, docs/specs/spec-rcfl.md §9.3).
    eta : Tensor
        η, the scalar dual variable.
    alpha : float
        α_i ∈ (0, 1].
    mu : float
        μ > 0.

    Returns
    -------
    Tensor
        f^{μ,i}(ω, η), differentiable in both ``loss`` and ``eta``.
    """
    return nn.functional.softplus(loss - eta, beta=1.0 / mu) / alpha + eta


def effective_weight(loss: float, eta: float, *, alpha: float, mu: float) -> float:
    """``q_i = σ((L − η)/μ) / α_i``: the factor on the client's model gradient.

    docs/specs/spec-rcfl.md §3 [D]: ``∇_ω f^{μ,i} = q_i ∇f̂ⁱ`` and ``∂_η f^{μ,i} = 1 − q_i``;
    ``q_i ∈ (0, 1/α_i)``.
    """
    z = (loss - eta) / mu
    # Stable logistic sigmoid for either sign of z.
    gate = 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))
    return gate / alpha


def train_rcfl(
    model: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    *,
    settings: RCFLSettings,
    lr: float,
    device: torch.device,
    seed: int,
) -> RCFLLocalResult:
    """Run κ simultaneous gradient steps on ``f^{μ,i}(ω, η)``; ω is trained in place.

    Algorithm 1 of [RC-FL], one client between two synchronisations: at each step both
    gradients are taken at the same point (one backward pass, one plain-SGD step, no
    momentum), ``ω ← ω − β q_i ∇f̂ⁱ(ω)`` and ``η ← η − β_η (1 − q_i)``.

    Parameters
    ----------
    model : nn.Module
        ω, loaded with the received global model; trained in place.
    x, y : np.ndarray
        The client's local training split.
    settings : RCFLSettings
        η^t, α_i, μ, κ, β_η and the batch size.
    lr : float
        β > 0, the model step size.
    device : torch.device
        Where to train.
    seed : int
        Seeds the minibatch order (unused with full-batch steps).

    Returns
    -------
    RCFLLocalResult
        The client's new η and gate diagnostics.

    Raises
    ------
    ValueError
        If ``lr`` is not > 0 or the split is empty.

    Notes
    -----
    The mean cross-entropy enters φ_μ (docs/specs/spec-rcfl.md §9.3). With ``batch_size = 0`` each
    step uses the whole local split, as the theory assumes; with minibatches the gate
    σ((L_batch − η)/μ) is a biased estimate of the full-data gate (docs/specs/spec-rcfl.md §9.4).
    Minibatches walk through one random permutation, reshuffled when it runs out.
    """
    if len(x) == 0:
        raise ValueError("cannot train on an empty split")
    inputs_all = torch.from_numpy(x).to(device)
    labels_all = torch.from_numpy(y).to(device)

    def steps() -> Iterator[Iterable[tuple[Tensor, Tensor]]]:
        if settings.batch_size == 0 or settings.batch_size >= len(x):
            while True:
                yield [(inputs_all, labels_all)]
        generator = torch.Generator().manual_seed(seed)
        order = torch.empty(0, dtype=torch.long)
        cursor = 0
        while True:
            if cursor + settings.batch_size > len(order):
                order = torch.randperm(len(x), generator=generator)
                cursor = 0
            index = order[cursor : cursor + settings.batch_size].to(device)
            cursor += settings.batch_size
            yield [(inputs_all[index], labels_all[index])]

    return rcfl_steps(
        model,
        steps(),
        nn.functional.cross_entropy,
        settings=settings,
        lr=lr,
        device=device,
    )


def train_rcfl_loader(
    model: nn.Module,
    trainloader: Iterable[Any],
    loss_fn: LossFn,
    *,
    settings: RCFLSettings,
    lr: float,
    device: torch.device,
    batch_keys: BatchKeys | None = None,
) -> RCFLLocalResult:
    """:func:`train_rcfl` with the user's loss over the batches of a DataLoader.

    Parameters
    ----------
    model : nn.Module
        ω, loaded with the received global model; trained in place.
    trainloader : Iterable
        ``(inputs, targets)`` or dict batches, iterated again whenever a pass ends (a
        ``torch.utils.data.DataLoader``, a list; not a one-shot generator).
    loss_fn : Callable[[Tensor, Tensor], Tensor]
        ``loss_fn(outputs, targets)``: the **mean** loss of a batch.
    settings : RCFLSettings
        η^t, α_i, μ, κ and β_η. ``batch_size = 0`` (the default): each of the κ steps
        takes a full pass over the loader, so the gate uses the whole-split loss f̂ⁱ(ω)
        as the theory assumes; ``batch_size > 0``: each step takes the loader's next
        batch (the loader's own batch size), cycling through it.
    lr : float
        β > 0, the model step size.
    device : torch.device
        Where the model is; batches are moved there.
    batch_keys : tuple[str, str] | None
        A dict batch's ``(inputs, targets)`` keys (:func:`fairfl.client.batches.split_batch`).

    Returns
    -------
    RCFLLocalResult
        The client's new η and gate diagnostics.

    Raises
    ------
    ValueError
        If ``lr`` is not > 0 or the loader yields no batch.
    """

    def batches() -> Iterator[tuple[Tensor, Tensor]]:
        for batch in trainloader:
            inputs, targets = split_batch(batch, batch_keys)
            yield torch.as_tensor(inputs).to(device), torch.as_tensor(targets).to(device)

    def steps() -> Iterator[Iterable[tuple[Tensor, Tensor]]]:
        while True:
            if settings.batch_size == 0:
                yield batches()  # one lazy pass: never every batch on the device at once
                continue
            for batch in batches():
                yield [batch]

    return rcfl_steps(model, steps(), loss_fn, settings=settings, lr=lr, device=device)


def rcfl_steps(
    model: nn.Module,
    steps: Iterator[Iterable[tuple[Tensor, Tensor]]],
    loss_fn: LossFn,
    *,
    settings: RCFLSettings,
    lr: float,
    device: torch.device,
) -> RCFLLocalResult:
    """Take κ joint SGD steps in (ω, η); step t uses the batches ``next(steps)``.

    A step of one batch backpropagates :func:`smoothed_objective` of its loss. A step of
    several batches (a full pass over a loader) accumulates ∇f̂ⁱ batch by batch, with
    f̂ⁱ the sample-weighted mean of the batch losses, then applies the closed-form
    gradients ``∇_ω = q_i ∇f̂ⁱ`` and ``∂_η = 1 − q_i``: the same step, without holding
    every batch's graph in memory.

    Raises
    ------
    ValueError
        If ``lr`` is not > 0 or a step has no batch.
    """
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    lr_eta = lr if settings.lr_eta is None else settings.lr_eta
    model.train()
    dtype = next(model.parameters()).dtype
    eta = torch.tensor(settings.eta, dtype=dtype, device=device, requires_grad=True)
    # Paper: one step size β for ω and η; here β_η may differ (opt-in; docs/specs/spec-rcfl.md
    # §4.6).
    parameters = list(model.parameters())
    weights: list[float] = []
    loss_value = float("nan")
    for _ in range(settings.local_steps):
        step = iter(next(steps))
        first, second = next(step, None), next(step, None)
        if first is None:
            raise ValueError("cannot train on an empty loader")
        zero_grad([*parameters, eta])
        if second is None:
            inputs, labels = first
            loss = loss_fn(model(inputs), labels)
            loss_value = float(loss.detach())
            weights.append(
                effective_weight(
                    loss_value, float(eta.detach()), alpha=settings.alpha, mu=settings.mu
                )
            )
            smoothed_objective(loss, eta, alpha=settings.alpha, mu=settings.mu).backward()
        else:
            # Σ_b n_b ∇ℓ_b, then scaled by q_i / n once n and f̂ⁱ = Σ_b n_b ℓ_b / n are known.
            total, loss_sum = 0, 0.0
            for inputs, labels in itertools.chain([first, second], step):
                loss = loss_fn(model(inputs), labels) * len(labels)
                loss.backward()
                total += len(labels)
                loss_sum += float(loss.detach())
            loss_value = loss_sum / total
            q = effective_weight(
                loss_value, float(eta.detach()), alpha=settings.alpha, mu=settings.mu
            )
            weights.append(q)
            for parameter in parameters:
                if parameter.grad is not None:
                    parameter.grad.mul_(q / total)
            eta.grad = torch.full_like(eta, 1.0 - q)
        sgd_step(parameters, lr)  # torch.optim.SGD's step, one group per step size
        sgd_step([eta], lr_eta)
    return RCFLLocalResult(
        eta=float(eta.detach()),
        q_first=weights[0],
        q_last=weights[-1],
        q_mean=float(np.mean(weights)),
        loss_last=loss_value,
    )
