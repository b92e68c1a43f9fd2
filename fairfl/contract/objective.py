"""Whether a train reply's update applied the rule's client objective.

A rule that changes the client's loss (the proximal term of Equitable FL and
MGDA-Prox, PropFair's transform) sends it in the train config; a client using
:func:`fairfl.client.fair_train` reports ``objective-ignored`` = 1 when the app's
``train_fn`` never called the loss it was handed, so its update is plain local
training. The server should log that once per client, at WARNING: the round still
aggregates, but not the rule the user chose.
"""

from __future__ import annotations

from collections.abc import Mapping

from fairfl.contract import keys


def objective_dropped(metrics: Mapping[str, object]) -> bool:
    """Whether a train reply's metrics say the client ignored the rule's objective.

    Parameters
    ----------
    metrics : Mapping[str, object]
        A train reply's MetricRecord (or the validated ``TrainReply.metrics``).

    Returns
    -------
    bool
        ``True`` when ``objective-ignored`` is 1; ``False`` when it is 0 or absent (a
        client that does not report it, or a rule without a client objective).
    """
    return metrics.get(keys.OBJECTIVE_IGNORED, 0) == 1


def objective_dropped_message(client: str, rule_keys: str) -> str:
    """The WARNING line for a client whose update ignored the rule's objective.

    Parameters
    ----------
    client : str
        How the client is named in the log (``"node 7"``, ``"partition 3"``).
    rule_keys : str
        The objective's config keys the rule sends (``"proximal-mu"``).
    """
    return (
        f"{client} trained without the rule's client objective ({rule_keys}): its "
        "train_fn never called the loss_fn fair_train handed it, so its update is plain "
        "local training; train with that loss_fn"
    )
