"""PropFair: proportional fairness through a client-side log transform of the loss.

Zhang, Malekmohammadi, Chen and Yu, *Proportional Fairness in Federated Learning*,
TMLR 2023, https://arxiv.org/abs/2202.01666. Objective (Malekmohammadi & Yu, Table 1):
``-Σ_i p_i log(M - f_i(θ))``. Rule of the reference code (``PropFair`` in
``huawei-noah/Federated-Learning/FairFL/algs/algorithms.py``; docs/specs/spec-vred-qffl.md §8): each
client minimises, per minibatch with mean cross-entropy ℓ_B,

    -log(1 - ℓ_B / M)                     if M - ℓ_B >= ε
    ℓ_B / M   (huber=False) or ℓ_B / ε   (huber=True)   otherwise

and the server averages the local models like FedAvg (``p_i``-weighted). The transform
is :func:`fairfl.client.objectives.propfair_loss`.
"""

from __future__ import annotations

from dataclasses import dataclass

from fairfl.contract import keys
from fairfl.strategies.core.base import ConfigValue
from fairfl.strategies.core.params import ParameterError, RuleParameters, flag, real
from fairfl.strategies.fedavg import FedAvg


@dataclass(frozen=True)
class PropFairParameters(RuleParameters):
    """PropFair's hyperparameters: M, ε and the fallback branch (see :class:`PropFair`)."""

    M: float = real(3.0, key="propfair-m", lower=0.0, lower_open=True, grid=(2.0, 3.0, 4.0, 5.0))
    epsilon: float = real(0.2, key="propfair-epsilon", lower=0.0, lower_open=True)
    huber: bool = flag(False, key="propfair-huber")

    def check(self) -> None:
        """``epsilon < M``: the fallback branch starts below M."""
        if self.epsilon >= self.M:
            raise ParameterError(
                "epsilon", f"epsilon must be < M ({self.M:g}), got {self.epsilon!r}"
            )


class PropFair(FedAvg):
    """FedAvg on the server; the clients train on PropFair's log-transformed loss.

    The rule's settings travel to the clients in every train config, under
    ``propfair-m`` (float), ``propfair-epsilon`` (float) and ``propfair-huber`` (bool);
    fairfl's ClientApp applies them through
    :func:`fairfl.client.objectives.local_objective`. A ClientApp that ignores these
    keys trains plain FedAvg. Clients need not send a loss.

    Parameters
    ----------
    M : float (default: 3.0)
        The utility baseline M (``base`` in the reference code), > ``epsilon``. Paper
        000's grid is {2, 3, 4, 5}; the default is its most frequent best value (Table 5:
        3 / 3 / 5 / 4). M should exceed the typical loss: the fallback branch is used
        while ``M - ℓ_B < ε`` (e.g. CE ≈ ln 100 ≈ 4.6 > 3 at the start on CIFAR-100).
    epsilon : float (default: 0.2)
        ε > 0, the margin below M where the fallback branch starts (hard-coded 0.2 in
        the reference code; not mentioned in Malekmohammadi & Yu).
    huber : bool (default: False)
        Fallback ``ℓ_B / ε`` (gradient continuous at the switch) instead of the
        reference code's default ``ℓ_B / M``.
    **kwargs
        Sampling settings of :class:`fairfl.strategies.core.base.FairStrategy`.

    Raises
    ------
    ValueError
        If ``M`` or ``epsilon`` is not a finite number > 0, ``epsilon >= M``, or
        ``huber`` is not a bool.

    Notes
    -----
    The transform is applied per minibatch to ℓ_B, not to the client's f_i: an
    approximation of the objective, but what the reference code does (spec §8). The
    effective local step is scaled by about ``1/(M - ℓ)``; Malekmohammadi & Yu's best learning
    rates for PropFair are correspondingly larger (Table 4).
    """

    rule_name = "PropFair"
    registry_name = "propfair"
    Parameters = PropFairParameters
    params: PropFairParameters

    def train_config(self, server_round: int) -> dict[str, ConfigValue]:
        """Send the client's loss-transform settings, every round."""
        return {
            keys.PROPFAIR_M: self.params.M,
            keys.PROPFAIR_EPSILON: self.params.epsilon,
            keys.PROPFAIR_HUBER: self.params.huber,
        }
