"""Tests of the partitioners and the per-client split: disjoint, covering, skewed, stratified."""

import re
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.datasets import load_digits

from fairfl.data import load_client_data, partition_sizes
from fairfl.data.partition import (
    MIN_PARTITION_SIZE,
    num_test_samples,
    partition_indices,
    shard_partition,
    train_test_split,
)


def _digits_rows() -> Counter:
    """Each digits sample as bytes (pixels / 16 as float32, then the label), counted."""
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32).reshape(len(digits.target), -1)
    return Counter(_row_bytes(x, digits.target))


def _row_bytes(x: np.ndarray, y: np.ndarray) -> list[bytes]:
    flat = x.reshape(len(y), -1).astype(np.float32)
    return [
        pixels.tobytes() + int(label).to_bytes(1, "little")
        for pixels, label in zip(flat, y, strict=True)
    ]


def _all_client_rows(num_partitions: int, **kwargs) -> Counter:
    rows: Counter = Counter()
    for pid in range(num_partitions):
        data = load_client_data(
            dataset="digits", partition_id=pid, num_partitions=num_partitions, **kwargs
        )
        rows.update(_row_bytes(data.x_train, data.y_train))
        rows.update(_row_bytes(data.x_test, data.y_test))
    return rows


DIGITS_ROWS = _digits_rows()


@pytest.mark.parametrize("partitioner", ["iid", "dirichlet", "shards"])
def test_clients_hold_every_digits_sample_exactly_once(partitioner):
    # Multiset equality with sklearn's copy: each sample is in one client's
    # train or test split, once (identical duplicate images count as many
    # times as the data set has them).
    assert _all_client_rows(20, partitioner=partitioner, seed=5) == DIGITS_ROWS


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    partitioner=st.sampled_from(["iid", "dirichlet", "shards"]),
    num_partitions=st.integers(1, 40),
    seed=st.integers(0, 2**16),
    test_fraction=st.floats(0.05, 0.9),
)
def test_property_partitions_are_disjoint_and_covering(
    partitioner, num_partitions, seed, test_fraction
):
    rows = _all_client_rows(
        num_partitions, partitioner=partitioner, seed=seed, test_fraction=test_fraction
    )
    assert rows == DIGITS_ROWS


@settings(max_examples=25, deadline=None)
@given(
    partitioner=st.sampled_from(["iid", "dirichlet", "shards"]),
    num_partitions=st.integers(1, 60),
    seed=st.integers(0, 2**16),
)
def test_property_index_lists_partition_the_pool(partitioner, num_partitions, seed):
    labels = load_digits().target
    parts = partition_indices(
        labels,
        partitioner=partitioner,
        num_partitions=num_partitions,
        seed=seed,
        dirichlet_alpha=0.5,
        shards_per_partition=2,
    )
    assert len(parts) == num_partitions
    assert all(len(part) >= MIN_PARTITION_SIZE for part in parts)
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(len(labels)))


def _labels_per_client(partitioner: str, **kwargs) -> list[int]:
    counts = []
    for pid in range(10):
        data = load_client_data(
            dataset="digits", partitioner=partitioner, partition_id=pid, num_partitions=10, **kwargs
        )
        counts.append(len(np.unique(np.concatenate([data.y_train, data.y_test]))))
    return counts


def test_small_dirichlet_alpha_gives_fewer_labels_per_client():
    iid = _labels_per_client("iid")
    skewed = _labels_per_client("dirichlet", dirichlet_alpha=0.05)
    mild = _labels_per_client("dirichlet", dirichlet_alpha=100.0)
    assert iid == [10] * 10
    assert np.mean(skewed) < 6
    assert np.mean(mild) > np.mean(skewed)


@pytest.mark.parametrize("shards_per_partition", [2, 3, 5])
def test_shards_give_each_client_few_labels(shards_per_partition):
    counts = _labels_per_client("shards", shards_per_partition=shards_per_partition)
    # A shard has 1797 / (10 * s) <= 90 samples, fewer than any class has (174 to
    # 183), so it spans at most 2 labels.
    assert max(counts) <= 2 * shards_per_partition
    assert np.mean(counts) < 10


def test_shards_use_every_sample_in_near_equal_partitions():
    labels = np.repeat(np.arange(10), 101)  # 1,010 samples, 20 shards of 50 or 51
    parts = shard_partition(labels, num_partitions=10, shards_per_partition=2, seed=0)
    assert {len(part) for part in parts} <= {100, 101, 102}
    assert sum(len(part) for part in parts) == len(labels)


def test_iid_sizes_differ_by_at_most_one():
    sizes = partition_sizes(
        dataset="digits", partitioner="iid", num_partitions=7, test_fraction=0.5
    )
    full = [
        len(
            load_client_data(
                dataset="digits",
                partitioner="iid",
                partition_id=p,
                num_partitions=7,
                test_fraction=0.5,
            ).y_test
        )
        + s
        for p, s in enumerate(sizes)
    ]
    assert max(full) - min(full) <= 1
    assert sum(full) == 1797


def test_impossible_dirichlet_partition_is_reported():
    message = (
        "partitioner 'dirichlet' could not split 1797 samples into 100 partitions of at "
        "least 3 samples (2 train, 1 test) with dirichlet_alpha=0.001"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        load_client_data(
            dataset="digits",
            partitioner="dirichlet",
            partition_id=0,
            num_partitions=100,
            dirichlet_alpha=0.001,
        )


@pytest.mark.parametrize(
    ("partitioner", "num_partitions", "message"),
    [
        (
            "iid",
            700,
            "partitioner 'iid' splits 1797 samples into 700 partitions, leaving "
            "partition 397 with 2 samples; every partition needs at least 3",
        ),
        ("shards", 900, "partitioner 'shards' splits 1797 samples into 900 partitions"),
    ],
)
def test_too_many_partitions_are_reported(partitioner, num_partitions, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        partition_sizes(dataset="digits", partitioner=partitioner, num_partitions=num_partitions)


@pytest.mark.parametrize(
    ("num_samples", "test_fraction", "expected"),
    [
        (10, 0.3, 3),
        (100, 0.3, 30),
        (5, 0.5, 3),  # 2.5 rounds half up to 3
        (3, 0.01, 1),  # at least 1 test sample
        (3, 0.99, 1),  # at least 2 train samples
        (1000, 0.99, 990),
    ],
)
def test_num_test_samples(num_samples, test_fraction, expected):
    assert num_test_samples(num_samples, test_fraction) == expected


@settings(max_examples=100, deadline=None)
@given(
    labels=st.lists(st.integers(0, 5), min_size=3, max_size=200).map(np.array),
    test_fraction=st.floats(0.01, 0.99),
    seed=st.integers(0, 2**16),
)
def test_property_split_is_sized_disjoint_covering_and_stratified(labels, test_fraction, seed):
    train, test = train_test_split(labels, test_fraction, seed, partition_id=0)
    n_test = num_test_samples(len(labels), test_fraction)
    assert len(test) == n_test
    assert len(train) >= 2
    assert np.array_equal(np.sort(np.concatenate([train, test])), np.arange(len(labels)))
    # Stratified: each label's test count is its proportional share, rounded down or up.
    for label in np.unique(labels):
        share = np.sum(labels == label) * n_test / len(labels)
        assert np.floor(share) <= np.sum(labels[test] == label) <= np.ceil(share)


def test_split_depends_on_seed_and_partition_id():
    labels = np.repeat(np.arange(5), 20)
    base = train_test_split(labels, 0.3, seed=0, partition_id=0)[1]
    assert np.array_equal(base, train_test_split(labels, 0.3, seed=0, partition_id=0)[1])
    assert not np.array_equal(base, train_test_split(labels, 0.3, seed=1, partition_id=0)[1])
    assert not np.array_equal(base, train_test_split(labels, 0.3, seed=0, partition_id=1)[1])
