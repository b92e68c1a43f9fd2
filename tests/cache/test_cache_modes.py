"""fairfl's cache folder: what it creates gets modes 0700 / 0600 whatever the umask.

A library loaded from the cache runs in the server process (issue 35): under a umask of
000, folders made with ``mkdir(parents=True)`` are 0777 and a compiler's output 0777,
so another user could replace what the next process loads. The compiled kernel's own
checks are in ``tests/strategies/_ops/test_gram_kernel.py``.
"""

import os
import stat

import numpy as np
import pytest

from fairfl._cache import is_private, make_private_dir
from fairfl.data.cache import cached_partition


@pytest.fixture(params=[0o000, 0o277], ids=["umask-000", "umask-277"])
def umask(request):
    previous = os.umask(request.param)
    yield request.param
    os.umask(previous)


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_every_missing_folder_is_created_0700(tmp_path, umask):
    folder = tmp_path / "a" / "b" / "cache"
    make_private_dir(folder)
    assert [mode(p) for p in (tmp_path / "a", tmp_path / "a" / "b", folder)] == [0o700] * 3
    make_private_dir(folder)  # idempotent


def test_an_existing_folder_keeps_its_mode(tmp_path, umask):
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared").chmod(0o755)
    make_private_dir(tmp_path / "shared" / "cache")
    assert mode(tmp_path / "shared") == 0o755
    assert mode(tmp_path / "shared" / "cache") == 0o700


def test_the_partition_cache_writes_private_folders_and_files(tmp_path, umask):
    root = tmp_path / "new" / "cache"
    lists = [np.array([0, 2], dtype=np.int64), np.array([1], dtype=np.int64)]
    labels = np.array([0, 1, 0], dtype=np.int64)
    cached_partition({"partitioner": "test"}, labels, lambda: lists, folder=root)
    files = list((root / "partitions").iterdir())
    assert len(files) == 1 and mode(files[0]) == 0o600
    assert [mode(p) for p in (tmp_path / "new", root, root / "partitions")] == [0o700] * 3


def test_is_private_needs_this_user_and_no_group_or_other_write(tmp_path):
    path = tmp_path / "file"
    path.write_bytes(b"")
    for file_mode, private in [(0o600, True), (0o755, True), (0o620, False), (0o602, False)]:
        path.chmod(file_mode)
        assert is_private(os.stat(path)) is private, oct(file_mode)
    if os.getuid() == 0:  # giving the file to another user needs root
        path.chmod(0o600)
        os.chown(path, 4242, 4242)
        assert not is_private(os.stat(path))
