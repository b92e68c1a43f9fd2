"""The errors of a round and their help texts: what a missing metric means, how to report it."""

from __future__ import annotations

from dataclasses import dataclass

from flwr.serverapp.exception import AggregationError

from fairfl.contract import ReplyError, keys

#: The client helper that reports every train metric a fairfl rule needs.
FAIR_TRAIN = "fairfl.client.fair_train(message, model, trainloader, loss_fn, train_fn)"


@dataclass(frozen=True)
class RejectedReplies:
    """Replies a rule's aggregation pass found bad: their array values (q-FFL: or ``qffl-h``).

    A rule that checks the reply values in its own pass over them instead of the reader
    (``checks_array_values``) returns it from ``aggregate`` instead of a model;
    ``aggregate_train`` drops these replies with the reader's reasons and aggregates the
    rest again (:func:`fairfl.strategies.core.intake.aggregate_without_rejected`). Nothing is
    rolled back: a rule changes its state only once a round is accepted
    (``FairStrategy.state_updates``). The state and the new model are then those of the
    round without the bad replies, bit for bit: the pass runs again over the other
    replies as that round's would (``tests/strategies/core/test_rejected_reply_rounding.py``).

    Parameters
    ----------
    errors : list[ReplyError]
        One error per rejected reply, as the reader would have raised it (not empty).
    """

    errors: list[ReplyError]


class MissingMetricError(AggregationError):
    """Every reply of a round lacks a metric key the rule needs: the run cannot go on.

    Raised by ``FairStrategy.aggregate_train`` and ``aggregate_evaluate`` unless the
    rule was built with ``allow_missing_metrics=True``. Like Flower's own
    ``AggregationError`` it ends the ServerApp; the message names the key, what it
    means and how a ClientApp reports it.
    """


def missing_metric_message(
    hook: str, server_round: int, missing: dict[int, str], rule_name: str, helps: str
) -> str:
    """The message of a :class:`MissingMetricError` (``helps``: each key's help text)."""
    names = sorted(set(missing.values()))
    return (
        f"{hook}: round {server_round}: every reply ({len(missing)}) lacks "
        f"{', '.join(f'metrics[{key!r}]' for key in names)}, which {rule_name} "
        f"needs. {helps} To drop such replies and go on instead, build the strategy "
        "with allow_missing_metrics=True."
    )


def missing_metric_help(
    key: str, hook: str, *, rule_name: str, weighted_by_key: str, train_loss_key: str
) -> str:
    """What ``key`` means and how a ClientApp reports it (for :class:`MissingMetricError`)."""
    if key == weighted_by_key:
        examples = "training" if hook == "aggregate_train" else "test"
        return (
            f"'{key}' is the client's number of local {examples} examples, the "
            "aggregation weight (Flower's weighted_by_key); Flower's ClientApp "
            "templates report it as 'num-examples', and weighted_by_key='<key>' "
            "names another key."
        )
    if key == train_loss_key:
        text = (
            f"'{key}' is F_k(w^t), the mean loss of the received global model on the "
            "client's local training split, measured before local training (a stock "
            f"ClientApp's train_loss is measured during training). {FAIR_TRAIN} "
            f"reports it as '{keys.LOSS_BEFORE_TRAINING}'"
        )
        if key == keys.TRAIN_LOSS:
            return f"{text}; train_loss_key='{keys.LOSS_BEFORE_TRAINING}' reads that."
        return (
            f"{text}; or pass train_loss_key='train_loss' if your ClientApp's "
            "train_loss is measured before local training."
        )
    known = {
        keys.ACTIVATION: (
            f"'{key}' is the mean penultimate-layer activation of the received global "
            "model over the client's local data, by which Equitable FL clusters "
            f"clients. {FAIR_TRAIN} reports it when the round's config asks for it "
            f"('{keys.WANT_ACTIVATION}'); fairfl.client.activation_for_config "
            "computes it in a ClientApp of your own."
        ),
        keys.RCFL_ETA: (
            f"'{key}' is the client's dual variable eta after RC-FL's joint local "
            f"steps on (w, eta). {FAIR_TRAIN} runs those steps when the round's config "
            f"carries '{keys.RCFL_ALPHA}' and reports it."
        ),
        keys.EVAL_LOSS: (
            f"'{key}' is the loss of the received global model on the client's local "
            "test split (fairfl.client.evaluate computes it), reported by the "
            "ClientApp's evaluate function."
        ),
        keys.EVAL_ACC: (
            f"'{key}' is the accuracy, a fraction in [0, 1], of the received global "
            "model on the client's local test split, from which the fairness metrics "
            "are computed (fairfl.client.evaluate computes it), reported by the "
            "ClientApp's evaluate function."
        ),
    }
    return known.get(key, f"'{key}' is a metric {rule_name} reads from every reply.")
