"""The "groups" partitioner: planted label-disjoint client groups of unequal size."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairfl.data import PARTITIONERS, load_client_data, partition_sizes
from fairfl.data.groups import (
    GroupLayout,
    default_group_labels,
    group_layout,
    groups_partition,
    parse_group_labels,
    parse_group_sizes,
    planted_groups,
)
from fairfl.data.sources import load_pool
from fairfl.settings import RunSettings

DIGITS_3_7 = {
    "dataset": "digits",
    "partitioner": "groups",
    "num_partitions": 10,
    "group_sizes": "3,7",
}


def test_groups_is_a_partitioner():
    assert "groups" in PARTITIONERS


def test_parse_sizes():
    assert parse_group_sizes("3, 7") == (3, 7)
    for bad in ("", "3,0", "a,b", "-1"):
        with pytest.raises(ValueError, match="group-sizes must be comma-separated ints >= 1"):
            parse_group_sizes(bad)


@pytest.mark.parametrize(
    ("sizes", "num_classes", "expected_counts"),
    [
        ((4, 6), 10, [4, 6]),  # paper's MNIST / CIFAR-10: classes 0-3 and 4-9
        ((2, 3, 5), 100, [20, 30, 50]),  # paper's CIFAR-100
        ((3, 7), 10, [3, 7]),
        ((1, 1, 1), 10, [4, 3, 3]),  # ties go to the earlier group
        ((9, 1), 10, [9, 1]),
    ],
)
def test_default_labels_are_blocks_in_proportion_to_sizes(sizes, num_classes, expected_counts):
    blocks = default_group_labels(sizes, num_classes)
    assert [len(b) for b in blocks] == expected_counts
    assert [c for b in blocks for c in b] == list(range(num_classes))


@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=8),
    num_classes=st.integers(8, 120),
)
def test_property_default_labels_cover_every_class_once_with_one_per_group(sizes, num_classes):
    blocks = default_group_labels(tuple(sizes), num_classes)
    assert [c for b in blocks for c in b] == list(range(num_classes))
    assert all(len(b) >= 1 for b in blocks)
    # Within one class of the proportional share, unless the minimum of 1 interferes.
    if all(num_classes * s / sum(sizes) >= 1 for s in sizes):
        assert all(
            abs(len(b) - num_classes * s / sum(sizes)) < 2
            for b, s in zip(blocks, sizes, strict=True)
        )


def test_default_labels_need_a_class_per_group():
    with pytest.raises(ValueError, match="group-sizes has 3 groups but the data set has only 2"):
        default_group_labels((1, 1, 1), 2)


def test_parse_labels():
    assert parse_group_labels("0-3|4-9", (4, 6), 10) == ((0, 1, 2, 3), (4, 5, 6, 7, 8, 9))
    assert parse_group_labels("0, 2 | 1,3-4", (1, 1), 10) == ((0, 2), (1, 3, 4))
    assert parse_group_labels(" ", (3, 7), 10) == default_group_labels((3, 7), 10)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0-3", "group-labels must list 2 groups separated by '|'"),
        ("0-3||", "group-labels must list 2 groups"),
        ("0-3|", "group-labels has an empty group"),
        ("0-3|4-10", r"group-labels classes must be in \[0, 10\), got \[10\]"),
        ("0-3|x", "group-labels entries must be ints or ranges 'a-b', got 'x'"),
    ],
)
def test_parse_labels_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse_group_labels(text, (4, 6), 10)


def test_layout_checks_sizes_against_partitions_and_samples():
    layout = group_layout("3,7", "", 0, num_partitions=10, num_classes=10)
    assert layout == GroupLayout((3, 7), ((0, 1, 2), (3, 4, 5, 6, 7, 8, 9)), 0)
    assert layout.num_partitions == 10
    with pytest.raises(ValueError, match="adds up to 10 clients, but num-partitions is 20"):
        group_layout("3,7", "", 0, num_partitions=20, num_classes=10)
    with pytest.raises(ValueError, match="group-samples-per-class must be an int >= 0, got -1"):
        group_layout("3,7", "", -1, num_partitions=10, num_classes=10)


def test_planted_groups_follow_partition_order():
    assert planted_groups((3, 7)).tolist() == [0, 0, 0] + [1] * 7


def test_paper_mnist_layout_gives_800_images_per_class_per_client():
    # MNIST-like pool: 10 classes of 5,400 samples; 4 + 6 clients, classes 0-3 | 4-9.
    labels = np.repeat(np.arange(10), 5400)
    layout = group_layout("4,6", "0-3|4-9", 800, num_partitions=10, num_classes=10)
    parts = groups_partition(labels, layout, seed=0)
    assert [len(p) for p in parts] == [3200] * 4 + [4800] * 6
    for pid, rows in enumerate(parts):
        counts = np.bincount(labels[rows], minlength=10)
        classes = range(4) if pid < 4 else range(4, 10)
        assert all(counts[c] == 800 for c in classes)
        assert counts.sum() == 800 * len(classes)
    every = np.concatenate(parts)
    assert len(np.unique(every)) == len(every)  # disjoint


def test_default_quota_is_the_largest_every_class_can_supply():
    labels, _ = load_pool("digits", "", False)[1], None
    layout = group_layout("3,7", "", 0, num_partitions=10, num_classes=10)
    parts = groups_partition(labels, layout, seed=1)
    counts = np.bincount(labels)
    # Classes 3-9 are shared by 7 clients: min count 174 (class 8) // 7 = 24.
    quota = min(min(counts[:3]) // 3, min(counts[3:]) // 7)
    assert quota == 24
    assert [len(p) for p in parts] == [3 * quota] * 3 + [7 * quota] * 7


def test_infeasible_quota_and_tiny_partitions_are_rejected():
    labels = np.repeat(np.arange(4), 10)
    layout = group_layout("2,2", "0-1|2-3", 6, num_partitions=4, num_classes=4)
    with pytest.raises(ValueError, match="at most 5 samples per class per client are possible"):
        groups_partition(labels, layout, seed=0)
    layout = group_layout("2,2", "0|1-3", 1, num_partitions=4, num_classes=4)
    with pytest.raises(ValueError, match="gives a client only 1 samples"):
        groups_partition(labels, layout, seed=0)
    layout = group_layout("3,1", "0|1", 0, num_partitions=4, num_classes=4)
    with pytest.raises(ValueError, match="asked for at least 1"):
        groups_partition(np.array([0, 0, 1, 1, 1]), layout, seed=0)


def test_shared_classes_are_split_between_groups():
    labels = np.repeat(np.arange(3), 12)
    layout = group_layout("1,2", "0-1|1-2", 4, num_partitions=3, num_classes=3)
    parts = groups_partition(labels, layout, seed=0)
    assert [np.bincount(labels[p], minlength=3).tolist() for p in parts] == [
        [4, 4, 0],
        [0, 4, 4],
        [0, 4, 4],
    ]


def test_client_data_holds_only_its_groups_labels_and_is_deterministic():
    sizes = partition_sizes(**DIGITS_3_7)
    for pid in range(10):
        data = load_client_data(partition_id=pid, **DIGITS_3_7)
        allowed = set(range(3)) if pid < 3 else set(range(3, 10))
        assert set(np.unique(data.y_train)) == allowed
        assert set(np.unique(data.y_test)) <= allowed
        assert len(data.y_train) == sizes[pid]
    again = load_client_data(partition_id=4, **DIGITS_3_7)
    np.testing.assert_array_equal(
        again.y_train, load_client_data(partition_id=4, **DIGITS_3_7).y_train
    )


def test_bad_group_keys_fail_at_load_and_in_run_settings():
    with pytest.raises(ValueError, match="adds up to 10 clients, but num-partitions is 5"):
        load_client_data(partition_id=0, **{**DIGITS_3_7, "num_partitions": 5})
    with pytest.raises(ValueError, match="adds up to 4 clients, but num-partitions is 20"):
        RunSettings(partitioner="groups", group_sizes="1,3", num_partitions=20)
    settings = RunSettings(partitioner="groups", group_sizes="3,7", num_partitions=10)
    assert settings.data_kwargs()["group_sizes"] == "3,7"
    # Other partitioners ignore the group keys.
    RunSettings(partitioner="iid", group_sizes="1,3", num_partitions=20)
