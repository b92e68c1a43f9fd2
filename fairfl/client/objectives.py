"""Client-side objectives that some rules send in the train config.

A rule that changes the *client's* loss (PropFair's log transform, FedProx's proximal
term) sends its settings in the train ConfigRecord. Each key switches on a client step
of phase ``objective`` (:mod:`fairfl.client.builtin_steps`) that sets its part of the round's
:class:`LocalObjective`; the round's training minimises it (the arguments of
:func:`fairfl.client.training.train_local`, or the app's loss wrapped by
:func:`fairfl.client.training.proximal_objective`). :func:`local_objective` reads both
keys at once, and :func:`objective_loss` wraps any ``loss_fn(outputs, targets)`` with them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import torch
from flwr.app import ConfigRecord
from torch import Tensor, nn

from fairfl.client.training import BatchObjective, LossFn, proximal_objective
from fairfl.contract import keys
from fairfl.contract.config import get_config_value, get_config_value_or


@dataclass(frozen=True)
class LocalObjective:
    """How the client's local loss differs from plain cross-entropy this round."""

    batch_objective: BatchObjective | None = None
    proximal_mu: float = 0.0
    #: The train-config keys that set it (``proximal-mu``, ``propfair-m``).
    config_keys: tuple[str, ...] = ()


def local_objective(config: ConfigRecord) -> LocalObjective:
    """Read the objective keys of a train config (absent keys: plain cross-entropy).

    Raises
    ------
    ValueError
        If a key has the wrong type or value (the message names the key).
    """
    sent = tuple(key for key in (keys.PROXIMAL_MU, keys.PROPFAIR_M) if key in config)
    mu = proximal_mu(config)
    return LocalObjective(propfair_objective(config), mu, sent)


def proximal_mu(config: ConfigRecord) -> float:
    """μ of FedProx's term: the config's ``proximal-mu`` (absent: 0, no term)."""
    mu = get_config_value_or(config, keys.PROXIMAL_MU, float, 0.0)
    if mu < 0:
        raise ValueError(f"config key {keys.PROXIMAL_MU!r} must be >= 0, got {mu}")
    return mu


def objective_loss(loss_fn: LossFn, config: ConfigRecord, model: nn.Module) -> LossFn:
    """Wrap ``loss_fn`` with the round's objective: PropFair's transform, then FedProx.

    The wrapped loss is ``T(loss_fn(outputs, targets)) + μ/2 ||w - w^t||²``, with T
    PropFair's :func:`propfair_loss` when the config has ``propfair-m`` (else the
    identity), μ the config's ``proximal-mu`` (absent: 0, no term), w the parameters of
    ``model`` when the loss is called and w^t a copy of them taken now
    (:func:`fairfl.client.training.proximal_objective`). It is the objective
    :func:`fairfl.client.training.train_local` minimises, for any loss.

    Parameters
    ----------
    loss_fn : Callable[[Tensor, Tensor], Tensor]
        ``loss_fn(outputs, targets)``: the mean loss of a batch (a scalar tensor).
    config : ConfigRecord
        The round's train config.
    model : nn.Module
        Loaded with the received global model w^t; train this very object (in place)
        for the proximal term to see its parameters.

    Returns
    -------
    Callable[[Tensor, Tensor], Tensor]
        ``loss_fn`` itself when the config asks for neither.

    Raises
    ------
    ValueError
        If an objective key has the wrong type or value (see :func:`local_objective`).
    """
    objective = local_objective(config)
    return proximal_objective(
        loss_fn, model, objective.proximal_mu, transform=objective.batch_objective
    )


def propfair_objective(config: ConfigRecord) -> BatchObjective | None:
    """PropFair's transform when ``propfair-m`` is in the config (ε 0.2, huber off if absent)."""
    if keys.PROPFAIR_M not in config:
        return None
    m = get_config_value(config, keys.PROPFAIR_M, float)
    epsilon = get_config_value_or(config, keys.PROPFAIR_EPSILON, float, 0.2)
    huber = get_config_value_or(config, keys.PROPFAIR_HUBER, bool, False)
    if not (math.isfinite(m) and m > 0):
        raise ValueError(f"config key {keys.PROPFAIR_M!r} must be > 0, got {m}")
    if not (math.isfinite(epsilon) and 0 < epsilon < m):
        raise ValueError(
            f"config key {keys.PROPFAIR_EPSILON!r} must be in (0, {m:g}), got {epsilon}"
        )
    return partial(propfair_loss, M=m, epsilon=epsilon, huber=huber)


def propfair_loss(loss: Tensor, *, M: float, epsilon: float, huber: bool = False) -> Tensor:
    """PropFair's transform of a minibatch loss ℓ (docs/specs/spec-vred-qffl.md §8, reference code).

    ``-log(1 - ℓ/M)`` where ``M - ℓ >= ε`` (the valid region; ``-log(M - ℓ)`` up to a
    constant, gradient ``1/(M - ℓ)``), else the fallback ``ℓ/M`` (``huber=False``, the
    reference code's default, gradient ``1/M``) or ``ℓ/ε`` (``huber=True``, gradient
    ``1/ε``, continuous with the valid branch at ``M - ℓ = ε``).

    Parameters
    ----------
    loss : Tensor
        ℓ, the mean cross-entropy of a minibatch (any shape: applied elementwise).
    M : float
        The utility baseline M > 0 (``base`` in the reference code).
    epsilon : float
        The margin ε in (0, M).
    huber : bool
        Which fallback branch to use.

    Returns
    -------
    Tensor
        The transformed loss, differentiable in ``loss``. The log branch is evaluated on
        a clamped copy, so the unused branch never puts NaN into the gradient.

    Raises
    ------
    ValueError
        If ``M`` is not > 0 or ``epsilon`` is not in (0, M).
    """
    if not (math.isfinite(M) and M > 0):
        raise ValueError(f"M must be > 0, got {M}")
    if not (math.isfinite(epsilon) and 0 < epsilon < M):
        raise ValueError(f"epsilon must be in (0, M={M:g}), got {epsilon}")
    valid = (M - loss) >= epsilon
    safe = torch.where(valid, loss, torch.zeros_like(loss))
    log_branch = -torch.log1p(-safe / M)
    fallback = loss / (epsilon if huber else M)
    return torch.where(valid, log_branch, fallback)
