"""Validation split carved from a client's training data (run config validation-fraction)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairfl.data import load_client_data
from fairfl.data.client_data import partition_sizes
from fairfl.data.partition import num_validation_samples, validation_split
from fairfl.settings import RunSettings

DIGITS = {"dataset": "digits", "partitioner": "dirichlet", "num_partitions": 5, "seed": 3}


@pytest.mark.parametrize(
    ("num_train", "fraction", "expected"),
    [
        (10, 0.2, 2),  # 2.0 -> 2
        (5, 0.3, 2),  # 1.5 rounds half up -> 2
        (7, 0.0, 0),  # no validation split
        (5, 0.01, 1),  # 0.05 -> at least 1 sample
        (2, 0.9, 1),  # 1.8 -> 2, clipped to n - 1 = 1 so training keeps a sample
    ],
)
def test_validation_size_by_hand(num_train, fraction, expected):
    assert num_validation_samples(num_train, fraction) == expected


@settings(max_examples=50, deadline=None)
@given(
    labels=st.lists(st.integers(0, 4), min_size=2, max_size=60),
    fraction=st.floats(0.01, 0.95),
    seed=st.integers(0, 1000),
)
def test_validation_split_partitions_the_training_positions(labels, fraction, seed):
    labels = np.array(labels)
    kept, held = validation_split(labels, fraction, seed, partition_id=1)
    assert len(held) == num_validation_samples(len(labels), fraction)
    assert len(kept) >= 1
    assert np.array_equal(np.sort(np.concatenate([kept, held])), np.arange(len(labels)))


def _rows(x: np.ndarray, y: np.ndarray) -> list[tuple]:
    return sorted((*row.ravel().tolist(), int(label)) for row, label in zip(x, y, strict=True))


def test_validation_comes_from_training_data_and_leaves_test_unchanged():
    plain = load_client_data(partition_id=2, **DIGITS)
    split = load_client_data(partition_id=2, validation_fraction=0.25, **DIGITS)
    assert np.array_equal(split.x_test, plain.x_test)
    assert np.array_equal(split.y_test, plain.y_test)
    assert len(split.y_val) == num_validation_samples(len(plain.y_train), 0.25) > 0
    # train + validation is exactly the old training split (as a multiset of samples).
    assert _rows(
        np.concatenate([split.x_train, split.x_val]), np.concatenate([split.y_train, split.y_val])
    ) == _rows(plain.x_train, plain.y_train)
    assert plain.y_val.size == 0 and plain.x_val.size == 0
    sizes = partition_sizes(validation_fraction=0.25, **DIGITS)
    assert sizes[2] == len(split.y_train)


def test_bad_validation_settings_name_the_key():
    with pytest.raises(ValueError, match="validation_fraction"):
        load_client_data(partition_id=0, validation_fraction=1.0, **DIGITS)
    with pytest.raises(ValueError, match="validation-fraction"):
        RunSettings(validation_fraction=-0.1)
    with pytest.raises(ValueError, match="evaluate-split is 'validation' but validation-fraction"):
        RunSettings(evaluate_split="validation")
    with pytest.raises(ValueError, match="evaluate-split must be one of"):
        RunSettings(evaluate_split="train")
    assert RunSettings(evaluate_split="validation", validation_fraction=0.2).data_kwargs()[
        "validation_fraction"
    ] == pytest.approx(0.2)
