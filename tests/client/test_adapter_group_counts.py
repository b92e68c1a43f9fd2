"""fair_train / fair_evaluate send ``group-counts`` for a user's own model (FairFed, issue 37).

The counts are worked by hand: a one-input model whose prediction is 1 exactly when
x > 0, on seven samples with a known attribute and label, in dict batches of 3 (the
counts span batches).
"""

from unittest.mock import Mock

import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from torch import nn
from torch.utils.data import DataLoader, Dataset

from fairfl.client import fair_evaluate, fair_train
from fairfl.contract import keys
from fairfl.strategies.fairfed import signed_metric

# (x, label, attribute); the threshold model predicts ŷ = [x > 0].
SAMPLES = [
    (1.0, 1, 0),  # ŷ 1: cell 4·0 + 2·1 + 1 = 3
    (-1.0, 1, 0),  # ŷ 0: cell 2
    (2.0, 0, 0),  # ŷ 1: cell 1
    (-2.0, 0, 1),  # ŷ 0: cell 4
    (1.0, 1, 1),  # ŷ 1: cell 7
    (3.0, 1, 1),  # ŷ 1: cell 7
    (-1.0, 0, 1),  # ŷ 0: cell 4
]
COUNTS = [0, 1, 1, 1, 2, 0, 0, 2]
CONFIG = {keys.SERVER_ROUND: 1, keys.LR: 0.1, keys.LOCAL_EPOCHS: 1, keys.BATCH_SIZE: 3}


class Rows(Dataset):
    def __len__(self):
        return len(SAMPLES)

    def __getitem__(self, i):
        x, label, attribute = SAMPLES[i]
        return {"x": torch.tensor([x]), "label": label, "sex": attribute}


def loader():
    return DataLoader(Rows(), batch_size=3, shuffle=False)


def threshold_model():
    model = nn.Linear(1, 2)
    with torch.no_grad():  # logits (0, x): argmax is 1 exactly when x > 0
        model.weight.copy_(torch.tensor([[0.0], [1.0]]))
        model.bias.zero_()
    return model


def message(**config):
    msg = Mock(spec=Message)
    msg.content = RecordDict(
        {
            "arrays": ArrayRecord(threshold_model().state_dict()),
            "config": ConfigRecord({**CONFIG, **config}),
        }
    )
    return msg


def far_away(model, trainloader, loss_fn, config):
    """Move the model so far that every prediction changes: counts must predate it."""
    with torch.no_grad():
        model.weight.mul_(-100.0)
        model.bias.copy_(torch.tensor([0.0, -50.0]))


def by_sex(batch):
    return batch["sex"]


def test_fairfed_round_counts_the_received_models_predictions():
    content = fair_train(
        message(**{keys.WANT_GROUP_COUNTS: True}),
        nn.Linear(1, 2),
        loader(),
        nn.CrossEntropyLoss(),
        far_away,
        partition_id=0,
        attribute_fn=by_sex,
    )
    assert list(content["metrics"][keys.GROUP_COUNTS]) == COUNTS
    # FairFed's statistical parity of these counts, by hand: A=0 selects 2 of 3,
    # A=1 selects 2 of 4: 2/3 - 1/2 = 1/6.
    assert signed_metric(COUNTS, "spd") == pytest.approx(1 / 6, abs=1e-15)


def test_no_counts_unless_the_rule_asks_and_the_app_gives_the_attribute():
    plain = fair_train(
        message(),
        threshold_model(),
        loader(),
        nn.CrossEntropyLoss(),
        far_away,
        attribute_fn=by_sex,
    )
    assert keys.GROUP_COUNTS not in plain["metrics"]
    without = fair_train(
        message(**{keys.WANT_GROUP_COUNTS: True}),
        threshold_model(),
        loader(),
        nn.CrossEntropyLoss(),
        far_away,
    )
    assert keys.GROUP_COUNTS not in without["metrics"]


def test_evaluate_reports_the_received_models_counts():
    content = fair_evaluate(
        message(), nn.Linear(1, 2), loader(), nn.CrossEntropyLoss(), attribute_fn=by_sex
    )
    metrics = content["metrics"]
    assert list(metrics[keys.GROUP_COUNTS]) == COUNTS
    assert metrics[keys.NUM_EXAMPLES] == 7
    # Right where y = ŷ: cells 0, 3, 4, 7 hold 0 + 1 + 2 + 2 of the 7 samples.
    assert metrics[keys.EVAL_ACC] == pytest.approx(5 / 7)
    # Three groups declared: 12 counts, the third group's all zero.
    wider = fair_evaluate(
        message(),
        nn.Linear(1, 2),
        loader(),
        nn.CrossEntropyLoss(),
        attribute_fn=by_sex,
        num_groups=3,
    )
    assert list(wider["metrics"][keys.GROUP_COUNTS]) == [*COUNTS, 0, 0, 0, 0]


@pytest.mark.parametrize(
    ("attribute_fn", "message_text"),
    [
        (lambda batch: batch["sex"] + 2, r"attribute must be ints in \[0, 2\)"),
        (lambda batch: batch["sex"][:1], "attribute_fn gave 1 attribute values for a batch of 3"),
    ],
)
def test_bad_attributes_are_refused(attribute_fn, message_text):
    with pytest.raises(ValueError, match=message_text):
        fair_evaluate(
            message(), nn.Linear(1, 2), loader(), nn.CrossEntropyLoss(), attribute_fn=attribute_fn
        )
