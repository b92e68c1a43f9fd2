"""The client report WorstClass reads: its train-config key, metric key and range.

Torch-free, so that both halves import it: the server rule (:mod:`.worstclass`) and the
client step (:mod:`.client`).
"""

from __future__ import annotations

from fairfl.contract.replies import FieldSpec, declare_train_metrics

#: The train-config key that asks a client for its report.
WANT_WORST_CLASS_LOSS = "want-worst-class-loss"
#: The metric key of the report: max over labels y of the mean loss of the samples of y.
WORST_CLASS_LOSS = "worst-class-loss"
#: Its range on the wire: a finite loss >= 0.
SPECS = {WORST_CLASS_LOSS: FieldSpec("float", lower=0.0)}

declare_train_metrics(SPECS)
