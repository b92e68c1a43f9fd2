"""Client-side objectives that some rules send in the train config.

A rule that changes the *client's* loss (PropFair's log transform, FedProx's proximal
term) sends its settings in the train ConfigRecord; :func:`local_objective` turns them
into the arguments of :func:`fairfl.client.training.train_local`.
"""

from __future__ import annotations

from dataclasses import dataclass

from flwr.app import ConfigRecord

from fairfl.client.training import BatchObjective
from fairfl.settings import get_config_value

PROXIMAL_MU = "proximal-mu"


@dataclass(frozen=True)
class LocalObjective:
    """How the client's local loss differs from plain cross-entropy this round."""

    batch_objective: BatchObjective | None = None
    proximal_mu: float = 0.0


def local_objective(config: ConfigRecord) -> LocalObjective:
    """Read the objective keys of a train config (absent keys: plain cross-entropy).

    Raises
    ------
    ValueError
        If a key has the wrong type or value (the message names the key).
    """
    mu = get_config_value(config, PROXIMAL_MU, float) if PROXIMAL_MU in config else 0.0
    if mu < 0:
        raise ValueError(f"config key {PROXIMAL_MU!r} must be >= 0, got {mu}")
    return LocalObjective(batch_objective=None, proximal_mu=mu)
