"""FedAvg, the baseline of every fair rule (McMahan et al., AISTATS 2017).

Malekmohammadi & Yu, Table 1 and Algorithm 1 with β = 0: ``w^{t+1} = Σ_i p_i w_i`` with
``p_i = n_i / Σ_j n_j`` over the round's participants.
"""

from __future__ import annotations

from fairfl.secagg.forms import SecureForm
from fairfl.strategies.core.reweighted import LossRule, TrainRound, Weights


class FedAvg(LossRule):
    """Sample-weighted averaging of the local models, with fairfl's reply validation.

    Unlike :class:`flwr.serverapp.strategy.FedAvg`, a bad reply is dropped instead of
    failing the round, and every client's evaluation is kept for fairness metrics.
    Parameters are those of :class:`fairfl.strategies.core.base.FairStrategy`.
    """

    needs_loss = False
    rule_name = "FedAvg"
    registry_name = "fedavg"
    #: Under SecAgg+ (issue #48) each client masks n_k and Δ_k.
    secure_form = SecureForm.one_round("num-examples", "the server sees n_k in the clear")

    def weights(self, round: TrainRound) -> Weights:
        """``p_i = n_i / Σ n_j`` (Malekmohammadi & Yu, Algorithm 1, line 5); no diagnostics."""
        return round.shares, {}
