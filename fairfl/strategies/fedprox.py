"""FedProx: FedAvg on the server, a proximal term on every client's local loss.

Li, Sahu, Zaheer, Sanjabi, Talwalkar and Smith, *Federated Optimization in Heterogeneous
Networks*, MLSys 2020, https://arxiv.org/abs/1812.06127, Algorithm 2. Client k
approximately minimises

    h_k(w; w^t) = F_k(w) + (μ/2) ‖w − w^t‖²

from the received w^t; the server averages, ``w^{t+1} = Σ_k p_k w_k`` with
``p_k = n_k / Σ_j n_j``, as Flower's :class:`flwr.serverapp.strategy.FedProx` (whose
server half is FedAvg's) and FLamby do. The paper's Algorithm 2 samples clients ∝ p_k
and averages them uniformly: ``sampling = "size-proportional"`` is that.
"""

from __future__ import annotations

from dataclasses import dataclass

from fairfl.contract import keys
from fairfl.strategies.core.base import ConfigValue
from fairfl.strategies.core.params import RuleParameters, real
from fairfl.strategies.fedavg import FedAvg


@dataclass(frozen=True)
class FedProxParameters(RuleParameters):
    """FedProx's hyperparameter: the proximal weight μ (see :class:`FedProx`)."""

    # `fairfl compare --tune` keeps μ at its default (tune=()), as FedProx is a baseline of
    # the tuned comparisons; `--tune-grid fedprox:fedprox-mu=0.001,0.01,0.1,1` searches
    # the paper's grid.
    mu: float = real(0.01, key="fedprox-mu", lower=0.0, grid=(0.001, 0.01, 0.1, 1.0), tune=())


class FedProx(FedAvg):
    """FedAvg's server step; every train config carries ``proximal-mu`` = μ.

    The key is Flower's FedProx's; fairfl's ClientApp and
    :func:`fairfl.client.fair_train` add (μ/2) ‖w − w^t‖² to the local loss for it
    (:func:`fairfl.client.training.proximal_objective`, the term Equitable FL's clients
    add too).

    Parameters
    ----------
    mu : float (default: 0.01)
        μ >= 0, the proximal weight; 0 is FedAvg. The paper picks μ per data set from
        {0.001, 0.01, 0.1, 1}; 0.01 is FLamby's Fed-Heart-Disease setting (Ogier du
        Terrail et al., NeurIPS 2022 Datasets and Benchmarks). Flower's FedProx has
        ``proximal_mu = 0.0``, FedAvg, as its default.
    **kwargs
        Sampling settings of :class:`fairfl.strategies.core.base.FairStrategy`.

    Raises
    ------
    ValueError
        If ``mu`` is not a finite number >= 0.

    Notes
    -----
    The paper's clients may also stop early (γ-inexact solutions, its systems
    heterogeneity); fairfl's clients run the configured epochs.
    """

    rule_name = "FedProx"
    registry_name = "fedprox"
    Parameters = FedProxParameters
    params: FedProxParameters

    def train_config(self, server_round: int) -> dict[str, ConfigValue]:
        """``proximal-mu`` = μ, every round (as Flower's FedProx sends it)."""
        return {keys.PROXIMAL_MU: self.params.mu}
