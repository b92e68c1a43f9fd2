"""MyRule: weights ∝ p_i f_i^s, a loss-power reweighting (q-FFL's weights without the step).

    λ_i = p_i f_i(w^t)^s / Σ_j p_j f_j(w^t)^s,    w^{t+1} = Σ_i λ_i w_i          (1)

with p_i = n_i / Σ_j n_j and f_i(w^t) the loss of the received model before local
training (``loss-before-training``). s = 0 is FedAvg; larger s moves weight to the
clients the model serves worst.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fairfl.contract import TrainReply
from fairfl.strategies import ReweightedStrategy, RuleParameters, real


@dataclass(frozen=True)
class MyRuleParameters(RuleParameters):
    """MyRule's one hyperparameter: the loss power s (run-config key ``myrule-power``)."""

    power: float = real(1.0, key="myrule-power", lower=0.0, grid=(0.0, 0.5, 1.0, 2.0))


class MyRule(ReweightedStrategy):
    """Loss-power reweighting: λ_i ∝ p_i f_i^s (equation (1) of the module).

    Parameters
    ----------
    power : float (default: 1.0)
        s >= 0; 0 is FedAvg.
    **kwargs
        Sampling settings of :class:`fairfl.strategies.FairStrategy`.
    """

    needs_loss = True
    rule_name = "MyRule"
    Parameters = MyRuleParameters
    params: MyRuleParameters

    def lambdas(self, server_round: int, replies: list[TrainReply]) -> NDArray[np.float64]:
        """Equation (1) over the round's replies."""
        counts = [r.num_examples for r in replies]
        return power_weights(counts, self.losses_of(replies), self.params.power)


def power_weights(counts: ArrayLike, losses: ArrayLike, power: float) -> NDArray[np.float64]:
    """``p_i f_i^s / Σ_j p_j f_j^s`` (equation (1)); the data shares p where every f_i^s is 0.

    Parameters
    ----------
    counts : ArrayLike
        n_i > 0.
    losses : ArrayLike
        f_i(w^t) >= 0 (the contract reader has checked them).
    power : float
        s >= 0.

    Returns
    -------
    NDArray[np.float64]
        Weights summing to 1.
    """
    p = np.asarray(counts, dtype=np.float64)
    p = p / p.sum()
    scaled = p * np.power(np.asarray(losses, dtype=np.float64), power)
    total = scaled.sum()
    weights: NDArray[np.float64] = p if total == 0 else scaled / total
    return weights
