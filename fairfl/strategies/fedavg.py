"""FedAvg, the baseline of every fair rule (McMahan et al., AISTATS 2017).

Paper 000, Table 1 and Algorithm 1 with β = 0: ``w^{t+1} = Σ_i p_i w_i`` with
``p_i = n_i / Σ_j n_j`` over the round's participants.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from fairfl.contract import TrainReply
from fairfl.strategies.aggregation import sample_weights
from fairfl.strategies.base import ReweightedStrategy


class FedAvg(ReweightedStrategy):
    """Sample-weighted averaging of the local models, with fairfl's reply validation.

    Unlike :class:`flwr.serverapp.strategy.FedAvg`, a bad reply is dropped instead of
    failing the round, and every client's evaluation is kept for fairness metrics.
    Parameters are those of :class:`fairfl.strategies.base.FairStrategy`.
    """

    rule_name = "FedAvg"
    registry_name = "fedavg"

    def lambdas(self, server_round: int, replies: list[TrainReply]) -> NDArray[np.float64]:
        """``p_i = n_i / Σ n_j`` (paper 000, Algorithm 1, line 5)."""
        return sample_weights([r.num_examples for r in replies])
