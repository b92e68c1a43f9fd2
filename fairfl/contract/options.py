"""The settings a run config and every rule both take, each declared once.

``fraction-train`` is read from the run config (:class:`fairfl.settings.RunSettings`)
and passed to the rule (:class:`fairfl.strategies.core.options.StrategyOptions`); both
declare the field with the :class:`~fairfl.fields.Spec` here, so the two layers hold
one range and refuse a bad value with one message (``fraction_train must be in [0, 1],
got 1.5``; from a run config: ``run config fraction-train must be in [0, 1], got 1.5``).
"""

from __future__ import annotations

from fairfl.contract.bounds import MAX_LOSS
from fairfl.fields import Spec

#: Flower's ``fraction_train``: the share of the connected nodes a round trains (0: the
#: ``min_train_nodes`` nodes only, as in Flower's FedAvg).
FRACTION_TRAIN = Spec("real", "fraction-train", 0.0, 1.0, span=True)
#: Flower's ``fraction_evaluate`` (0: no federated evaluation).
FRACTION_EVALUATE = Spec("real", "fraction-evaluate", 0.0, 1.0, span=True)
#: Federated evaluation every this many rounds (and always in the last).
EVALUATE_EVERY = Spec("integer", "evaluate-every", 1)
#: Nodes a round waits for before sampling (0 in a run config: num-partitions).
MIN_AVAILABLE_NODES = Spec("integer", "min-available-nodes", 0)
#: Largest weight a train reply may hold (a rule's may be None: NaN/Inf only).
MAX_ABS_WEIGHT = Spec(
    "real", "max-abs-weight", 0.0, lower_open=True, optional=True, note=" or None"
)
#: Largest loss a train reply may report (:data:`fairfl.contract.bounds.MAX_LOSS`).
MAX_LOSS_SPEC = Spec("real", "max-loss", 0.0, lower_open=True)
#: The loss-clipping defence's k (0: off).
LOSS_CLIP_MAD = Spec("real", "loss-clip-mad", 0.0)
#: The weight-share cap of the reweighting rules (1: off).
MAX_CLIENT_SHARE = Spec("real", "max-client-share", 0.0, 1.0, lower_open=True)
#: How a round's training nodes are picked (the rule's ``client_sampling``).
SAMPLING = Spec("choice", "sampling", options=("uniform", "size-proportional"))

__all__ = [
    "EVALUATE_EVERY",
    "FRACTION_EVALUATE",
    "FRACTION_TRAIN",
    "LOSS_CLIP_MAD",
    "MAX_ABS_WEIGHT",
    "MAX_CLIENT_SHARE",
    "MAX_LOSS",
    "MAX_LOSS_SPEC",
    "MIN_AVAILABLE_NODES",
    "SAMPLING",
]
