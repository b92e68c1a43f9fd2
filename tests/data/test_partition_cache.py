"""The partition file cache: hits, misses, keys, a broken file, concurrent writers."""

import threading

import numpy as np
import pytest

from fairfl.data import cache, load_client_data
from fairfl.data.cache import cache_dir, cached_partition, partition_key

LABELS = np.array([0, 1, 1, 2, 0, 2, 1], dtype=np.int64)
SETTINGS = {"partitioner": "shards", "num_partitions": 2, "seed": 0}
LISTS = [np.array([0, 4, 1], dtype=np.int64), np.array([2, 3, 5, 6], dtype=np.int64)]


class Counting:
    """A partitioner stand-in that counts its calls."""

    def __init__(self, lists):
        self.lists, self.calls = lists, 0

    def __call__(self):
        self.calls += 1
        return [rows.copy() for rows in self.lists]


def assert_same_lists(got, expected):
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert a.dtype == np.int64
        np.testing.assert_array_equal(a, b)


def test_second_call_reads_the_file_instead_of_computing(tmp_path):
    compute = Counting(LISTS)
    first = cached_partition(SETTINGS, LABELS, compute, folder=tmp_path)
    second = cached_partition(SETTINGS, LABELS, compute, folder=tmp_path)
    assert compute.calls == 1
    assert_same_lists(first, LISTS)
    assert_same_lists(second, LISTS)
    assert [p.name for p in (tmp_path / "partitions").iterdir()] == [
        f"{partition_key(SETTINGS, LABELS)}.npz"
    ]


def test_key_changes_with_every_setting_and_with_the_labels():
    base = partition_key(SETTINGS, LABELS)
    assert partition_key(dict(reversed(SETTINGS.items())), LABELS) == base  # order-free
    assert partition_key({**SETTINGS, "seed": 1}, LABELS) != base
    assert partition_key({**SETTINGS, "num_partitions": 3}, LABELS) != base
    swapped = LABELS.copy()
    swapped[[0, 1]] = swapped[[1, 0]]
    assert partition_key(SETTINGS, swapped) != base
    assert partition_key(SETTINGS, LABELS.astype(np.int32)) != base  # same values, new dtype


def test_off_computes_every_time_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("FAIRFL_CACHE_DIR", "off")
    monkeypatch.chdir(tmp_path)
    assert cache_dir() is None
    compute = Counting(LISTS)
    cached_partition(SETTINGS, LABELS, compute)
    cached_partition(SETTINGS, LABELS, compute)
    assert compute.calls == 2
    assert list(tmp_path.iterdir()) == []


def test_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("FAIRFL_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("FAIRFL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "fairfl"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "fairfl"


@pytest.mark.parametrize(
    "content",
    [
        b"not an npz file",
        "indices-out-of-range",
        "offsets-not-ending-at-len",
    ],
)
def test_a_broken_or_inconsistent_file_is_recomputed_and_rewritten(tmp_path, content):
    path = tmp_path / "partitions" / f"{partition_key(SETTINGS, LABELS)}.npz"
    path.parent.mkdir(parents=True)
    if content == "indices-out-of-range":  # index 7 does not exist in 7 labels
        np.savez(path, indices=np.array([0, 7], dtype=np.int64), offsets=np.array([0, 1, 2]))
    elif content == "offsets-not-ending-at-len":
        np.savez(path, indices=np.arange(7, dtype=np.int64), offsets=np.array([0, 3, 5]))
    else:
        path.write_bytes(content)
    compute = Counting(LISTS)
    assert_same_lists(cached_partition(SETTINGS, LABELS, compute, folder=tmp_path), LISTS)
    assert compute.calls == 1
    assert_same_lists(cached_partition(SETTINGS, LABELS, compute, folder=tmp_path), LISTS)
    assert compute.calls == 1  # the rewritten file is read back


def test_an_unwritable_folder_only_costs_the_recomputation(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("the cache folder cannot be created below a file")
    compute = Counting(LISTS)
    assert_same_lists(cached_partition(SETTINGS, LABELS, compute, folder=blocker), LISTS)
    assert_same_lists(cached_partition(SETTINGS, LABELS, compute, folder=blocker), LISTS)
    assert compute.calls == 2


def test_empty_partitions_round_trip(tmp_path):
    lists = [np.zeros(0, dtype=np.int64), np.array([3], dtype=np.int64)]
    cached_partition(SETTINGS, LABELS, Counting(lists), folder=tmp_path)
    compute = Counting(LISTS)
    assert_same_lists(cached_partition(SETTINGS, LABELS, compute, folder=tmp_path), lists)
    assert compute.calls == 0


def test_concurrent_writers_leave_one_whole_file_and_readers_never_see_half(tmp_path):
    big = [np.arange(k * 20_000, (k + 1) * 20_000, dtype=np.int64) for k in range(10)]
    labels = np.zeros(200_000, dtype=np.int64)
    path = tmp_path / "partitions" / f"{partition_key(SETTINGS, labels)}.npz"
    path.parent.mkdir(parents=True)
    seen: list[object] = []

    def write():
        for _ in range(15):
            cache._write(path, big)

    writers = [threading.Thread(target=write) for _ in range(3)]
    for thread in writers:
        thread.start()
    while any(thread.is_alive() for thread in writers):
        seen.append(cache._read(path, len(labels)))
    for thread in writers:
        thread.join()
    for lists in [*seen, cache._read(path, len(labels))]:
        if lists is not None:  # absent before the first rename, whole after it
            assert_same_lists(lists, big)
    assert cache._read(path, len(labels)) is not None
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left


@pytest.mark.parametrize("partitioner", ["iid", "dirichlet", "shards"])
def test_client_data_is_the_same_with_and_without_the_cache(tmp_path, monkeypatch, partitioner):
    from fairfl.data import client_data

    kwargs = {"dataset": "digits", "partitioner": partitioner, "num_partitions": 7, "seed": 3}
    monkeypatch.setenv("FAIRFL_CACHE_DIR", "off")
    client_data._partition_lists.cache_clear()
    plain = [load_client_data(partition_id=p, **kwargs) for p in range(7)]
    monkeypatch.setenv("FAIRFL_CACHE_DIR", str(tmp_path))
    for _ in range(2):  # first call writes the file, second (new process state) reads it
        client_data._partition_lists.cache_clear()
        cached = [load_client_data(partition_id=p, **kwargs) for p in range(7)]
        for a, b in zip(plain, cached, strict=True):
            np.testing.assert_array_equal(a.x_train, b.x_train)
            np.testing.assert_array_equal(a.y_train, b.y_train)
            np.testing.assert_array_equal(a.x_test, b.x_test)
            np.testing.assert_array_equal(a.y_test, b.y_test)
    assert len(list((tmp_path / "partitions").iterdir())) == 1
    client_data._partition_lists.cache_clear()
