"""WorstClass's client half: the step that reports ``worst-class-loss``.

Declared in the entry-point group ``fairfl.client_steps``; fairfl's ClientApp and
:func:`fairfl.client.fair_train` run it when the train config has
``want-worst-class-loss``. Imported on the client only (it needs torch).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from fairfl.client.steps import ClientRound, ClientStep, MetricValue
from fairfl_rule_plugin.report import SPECS, WANT_WORST_CLASS_LOSS, WORST_CLASS_LOSS


@torch.no_grad()
def worst_class_loss(round_: ClientRound) -> Mapping[str, MetricValue]:
    """Max over labels y of the received model's mean loss on the samples labelled y."""
    round_.model.eval()
    totals: dict[int, float] = {}
    counts: dict[int, int] = {}
    for inputs, targets in round_.pairs():
        outputs = round_.model(inputs)
        for label in targets.unique().tolist():
            mask = targets == label
            size = int(mask.sum())
            loss = float(round_.loss_fn(outputs[mask], targets[mask])) * size
            totals[label] = totals.get(label, 0.0) + loss
            counts[label] = counts.get(label, 0) + size
    return {WORST_CLASS_LOSS: max(totals[y] / counts[y] for y in totals)}


#: The step, as the entry point names it.
WORST_CLASS_LOSS_STEP = ClientStep(WANT_WORST_CLASS_LOSS, worst_class_loss, SPECS)
