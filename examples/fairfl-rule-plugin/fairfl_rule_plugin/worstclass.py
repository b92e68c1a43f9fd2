"""WorstClass: weights ∝ p_i c_i^s, c_i the client's worst per-label loss.

    λ_i = p_i c_i(w^t)^s / Σ_j p_j c_j(w^t)^s,    w^{t+1} = Σ_i λ_i w_i          (2)

with p_i = n_i / Σ_j n_j and c_i(w^t) = max_y (mean loss of the received model over the
client's samples labelled y), a report no fairfl client sends: the client step of
:mod:`fairfl_rule_plugin.client` adds it when the train config has
``want-worst-class-loss``.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from fairfl.contract import TrainReply
from fairfl.strategies import ConfigValue, ReweightedStrategy
from fairfl_rule_plugin.report import WANT_WORST_CLASS_LOSS, WORST_CLASS_LOSS
from fairfl_rule_plugin.rules import MyRuleParameters, power_weights


class WorstClass(ReweightedStrategy):
    """Worst-label reweighting: λ_i ∝ p_i c_i^s (equation (2) of the module).

    Parameters
    ----------
    power : float (default: 1.0)
        s >= 0 (run-config key ``myrule-power``, shared with MyRule); 0 is FedAvg.
    **kwargs
        Sampling settings of :class:`fairfl.strategies.FairStrategy`.
    """

    needs_loss = False
    required_train_metrics: ClassVar[tuple[str, ...]] = (WORST_CLASS_LOSS,)
    rule_name = "WorstClass"
    Parameters = MyRuleParameters
    params: MyRuleParameters

    def train_config(self, server_round: int) -> dict[str, ConfigValue]:
        """Ask every client for its worst-class loss."""
        return {WANT_WORST_CLASS_LOSS: True}

    def lambdas(self, server_round: int, replies: list[TrainReply]) -> NDArray[np.float64]:
        """Equation (2) over the round's replies."""
        counts = [r.num_examples for r in replies]
        worst = [float(r.metrics[WORST_CLASS_LOSS]) for r in replies]  # type: ignore[arg-type]
        return power_weights(counts, worst, self.params.power)
