"""Tests of the public API of `fairfl.data`: names, shapes, determinism, copies, errors."""

import dataclasses
import re

import numpy as np
import pytest

import fairfl.data.client_data as client_data_module
from fairfl.data import (
    DATASETS,
    PARTITIONERS,
    ClientData,
    DatasetInfo,
    dataset_info,
    load_client_data,
    partition_sizes,
)
from fairfl.data.client_data import check_federation

DIGITS = {"dataset": "digits", "num_partitions": 10}


def test_names():
    assert DATASETS == (
        "digits",
        "synthetic",
        "mnist",
        "fashionmnist",
        "cifar10",
        "adult",
        "adult-synthetic",
        "fed-heart-disease",
    )
    assert PARTITIONERS == ("iid", "dirichlet", "shards", "groups", "phd", "natural")


@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("digits", (1, 8, 8)),
        ("synthetic", (60,)),
        ("synthetic-0.5-0.5", (60,)),
        ("mnist", (1, 28, 28)),
        ("fashionmnist", (1, 28, 28)),
        ("cifar10", (3, 32, 32)),
    ],
)
def test_dataset_info_needs_no_files(name, shape):
    assert dataset_info(name) == DatasetInfo(name=name, input_shape=shape, num_classes=10)


@pytest.mark.parametrize(
    ("dataset", "partitioner"),
    [("digits", "iid"), ("digits", "dirichlet"), ("digits", "shards"), ("synthetic", "natural")],
)
def test_client_data_matches_dataset_info(dataset, partitioner):
    data = load_client_data(
        dataset=dataset, partitioner=partitioner, partition_id=3, num_partitions=10
    )
    shape = dataset_info(dataset).input_shape
    assert data.x_train.shape == (len(data.y_train), *shape)
    assert data.x_test.shape == (len(data.y_test), *shape)
    assert data.x_train.dtype == data.x_test.dtype == np.float32
    assert data.y_train.dtype == data.y_test.dtype == np.int64
    assert set(np.unique(np.concatenate([data.y_train, data.y_test]))) <= set(range(10))


def test_digits_pixels_are_in_unit_interval():
    data = load_client_data(partitioner="iid", partition_id=0, **DIGITS)
    assert data.x_train.min() == 0.0
    assert data.x_train.max() == 1.0


@pytest.mark.parametrize("partitioner", ["iid", "dirichlet", "shards"])
def test_same_arguments_give_identical_arrays_whatever_the_global_rng(partitioner):
    np.random.seed(1)
    first = load_client_data(partitioner=partitioner, partition_id=4, seed=7, **DIGITS)
    np.random.seed(2)
    np.random.rand(5)
    second = load_client_data(partitioner=partitioner, partition_id=4, seed=7, **DIGITS)
    for field in dataclasses.fields(ClientData):
        assert np.array_equal(getattr(first, field.name), getattr(second, field.name))


@pytest.mark.parametrize("partitioner", ["iid", "dirichlet", "shards"])
def test_another_seed_gives_another_partition(partitioner):
    a = load_client_data(partitioner=partitioner, partition_id=0, seed=0, **DIGITS)
    b = load_client_data(partitioner=partitioner, partition_id=0, seed=1, **DIGITS)
    assert a.y_train.shape != b.y_train.shape or not np.array_equal(a.x_train, b.x_train)


def test_returned_arrays_are_fresh_copies():
    first = load_client_data(partitioner="iid", partition_id=0, **DIGITS)
    expected = first.x_train.copy()
    assert first.x_train.flags.writeable
    first.x_train[:] = 99.0
    first.y_train[:] = 99
    second = load_client_data(partitioner="iid", partition_id=0, **DIGITS)
    assert np.array_equal(second.x_train, expected)
    assert not np.any(second.y_train == 99)


def test_client_data_is_frozen():
    data = load_client_data(partitioner="iid", partition_id=0, **DIGITS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        data.x_train = data.x_test  # type: ignore[misc]


def test_numpy_integers_are_accepted_for_ids():
    a = load_client_data(
        dataset="digits", partitioner="iid", partition_id=np.int64(2), num_partitions=np.int32(10)
    )
    b = load_client_data(partitioner="iid", partition_id=2, **DIGITS)
    assert np.array_equal(a.x_test, b.x_test)


def test_the_partition_is_computed_once_for_all_clients(monkeypatch, tmp_path):
    calls = []
    original = client_data_module.partition_indices

    def counting(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(client_data_module, "partition_indices", counting)
    # An empty file cache, and seed=4242 is used by no other test: nothing is cached yet.
    monkeypatch.setenv("FAIRFL_CACHE_DIR", str(tmp_path))
    for pid in range(10):
        load_client_data(partitioner="dirichlet", partition_id=pid, seed=4242, **DIGITS)
    partition_sizes(partitioner="dirichlet", seed=4242, **DIGITS)
    assert len(calls) == 1
    # A new process (empty in-process cache) reads the file the first one wrote.
    client_data_module._partition_lists.cache_clear()
    load_client_data(partitioner="dirichlet", partition_id=3, seed=4242, **DIGITS)
    assert len(calls) == 1
    client_data_module._partition_lists.cache_clear()


@pytest.mark.parametrize(
    ("dataset", "partitioner"),
    [("digits", "iid"), ("digits", "dirichlet"), ("digits", "shards"), ("synthetic", "natural")],
)
def test_partition_sizes_are_the_train_sizes(dataset, partitioner):
    common = {"dataset": dataset, "partitioner": partitioner, "num_partitions": 12, "seed": 3}
    sizes = partition_sizes(**common, test_fraction=0.2)
    loaded = [
        len(load_client_data(**common, test_fraction=0.2, partition_id=pid).y_train)
        for pid in range(12)
    ]
    assert sizes == loaded


@pytest.mark.parametrize("test_fraction", [0.01, 0.5, 0.99])
def test_every_client_gets_two_train_and_one_test_sample(test_fraction):
    # 500 partitions of 1,797 digits: 3 or 4 samples each.
    common = {"dataset": "digits", "partitioner": "iid", "num_partitions": 500}
    for pid in (0, 250, 499):
        data = load_client_data(**common, partition_id=pid, test_fraction=test_fraction)
        assert len(data.y_train) >= 2
        assert len(data.y_test) >= 1


def test_test_split_is_stratified():
    data = load_client_data(partitioner="iid", partition_id=0, test_fraction=0.5, **DIGITS)
    train_counts = np.bincount(data.y_train, minlength=10)
    test_counts = np.bincount(data.y_test, minlength=10)
    # Each label's count is split in half, odd counts off by one.
    assert np.all(np.abs(train_counts - test_counts) <= 1)


# Every raise path, with its message.
BASE = {"dataset": "digits", "partitioner": "iid", "partition_id": 0, "num_partitions": 4}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"dataset": "foo"}, "dataset must be one of ('digits', 'synthetic', 'mnist', "),
        ({"dataset": "synthetic-1"}, "got 'synthetic-1'"),
        ({"dataset": 3}, "'synthetic-1-1-sigma0.75'), got 3"),
        ({"partitioner": "zipf"}, "partitioner must be one of ('iid', 'dirichlet', "),
        (
            {"dataset": "synthetic", "partitioner": "iid"},
            "partitioner must be 'natural' for synthetic dataset 'synthetic'",
        ),
        ({"partitioner": "natural"}, "only synthetic datasets have natural partitions"),
        ({"num_partitions": 0}, "num_partitions must be an int >= 1, got 0"),
        ({"num_partitions": 2.0}, "num_partitions must be an int >= 1, got 2.0"),
        ({"num_partitions": True}, "num_partitions must be an int >= 1, got True"),
        ({"partition_id": 4}, "partition_id must be an int in [0, num_partitions=4), got 4"),
        ({"partition_id": -1}, "partition_id must be an int in [0, num_partitions=4), got -1"),
        ({"partition_id": "0"}, "partition_id must be an int in [0, num_partitions=4), got '0'"),
        ({"seed": -1}, "seed must be an int >= 0, got -1"),
        ({"dirichlet_alpha": 0.0}, "dirichlet_alpha must be a finite number > 0, got 0.0"),
        ({"dirichlet_alpha": float("nan")}, "dirichlet_alpha must be a finite number > 0, got nan"),
        ({"dirichlet_alpha": float("inf")}, "dirichlet_alpha must be a finite number > 0, got inf"),
        ({"shards_per_partition": 0}, "shards_per_partition must be an int >= 1, got 0"),
        ({"test_fraction": 0.0}, "test_fraction must be a number in (0, 1), got 0.0"),
        ({"test_fraction": 1}, "test_fraction must be a number in (0, 1), got 1"),
        ({"data_root": None}, "data_root must be a str, got None"),
        ({"download": "yes"}, "download must be a bool, got 'yes'"),
        ({"validation_fraction": 1.0}, "validation_fraction must be a number in [0, 1), got 1.0"),
        ({"validation_fraction": -0.1}, "validation_fraction must be a number in [0, 1), got -0.1"),
    ],
)
def test_invalid_arguments_are_rejected(override, message):
    kwargs = {**BASE, **override}
    with pytest.raises(ValueError, match=re.escape(message)):
        load_client_data(**kwargs)
    if "partition_id" not in override:
        del kwargs["partition_id"]
        # The same arguments, the same check: without data (check_federation) or with.
        for function in (check_federation, partition_sizes):
            with pytest.raises(ValueError, match=re.escape(message)):
                function(**kwargs)


def test_dataset_info_rejects_unknown_names():
    with pytest.raises(ValueError, match=re.escape("dataset must be one of ('digits'")):
        dataset_info("imagenet")
