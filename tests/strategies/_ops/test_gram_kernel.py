"""The compiled float32 Gram kernel of FedMGDA+ (``fairfl.strategies._ops.gram_kernel``).

Its products are checked against ``⟨w_i − c, w_j − c⟩`` computed in float64 from the
definition, on shapes that hit every edge of its tiles (4 x 3 rows) and chunks (8
lanes, up to 4,096 columns); ``gram_matrix`` is checked to give the numpy path's result
whichever path runs, with a NaN or a float32 overflow included. The loader's choices
(mode variable, cache folder, compiler) are checked with folders and compilers the tests
make. CI sets ``FAIRFL_GRAM_KERNEL=compiled``, so a kernel that does not build there
fails these tests instead of skipping them.
"""

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import stat
import threading
from pathlib import Path

import numpy as np
import pytest

from fairfl.strategies import FedMGDAPlus
from fairfl.strategies._ops import gram_kernel as gram_kernel_module
from fairfl.strategies._ops.gram import gram_matrix
from fairfl.strategies._ops.gram_kernel import (
    GramKernel,
    GramKernelUnavailableError,
    build_and_load,
    gram_kernel,
    gram_kernel_description,
)

pytestmark = [
    pytest.mark.flower_free,
    pytest.mark.skipif(
        platform.machine() not in ("x86_64", "AMD64"), reason="the kernel is built on x86-64 only"
    ),
]


@pytest.fixture
def kernel(monkeypatch) -> GramKernel:
    """The kernel of this test session's cache folder (required: an error if it fails)."""
    monkeypatch.setenv("FAIRFL_GRAM_KERNEL", "compiled")
    loaded = gram_kernel()
    assert loaded is not None
    return loaded


def float64_gram(centre: np.ndarray, rows: list[np.ndarray]) -> np.ndarray:
    """``⟨w_i − c, w_j − c⟩`` in float64, straight from the definition."""
    differences = np.stack([row.astype(np.float64) - centre.astype(np.float64) for row in rows])
    return differences @ differences.T


def float32_updates(n: int, k: int, seed: int = 0) -> tuple[np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    centre = rng.standard_normal(k).astype(np.float32)
    rows = [(centre + 1e-2 * rng.standard_normal(k)).astype(np.float32) for _ in range(n)]
    return centre, rows


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 12, 13, 50, 51])
@pytest.mark.parametrize("k", [1, 7, 8, 9, 4095, 4096, 4097, 10_007])
def test_products_match_the_float64_definition(kernel, n, k):
    centre, rows = float32_updates(n, k, seed=n * k)
    reference = float64_gram(centre, rows)
    got = kernel.gram(centre, rows)
    assert got.shape == (n, n)
    assert np.array_equal(got, got.T)
    # Float32 differences and products, at most 512 terms per float32 sum: ~1e-7.
    assert np.max(np.abs(got - reference)) <= 1e-6 * np.max(np.abs(reference))


def test_many_clients_shrink_the_chunk_and_stay_exact(kernel):
    centre, rows = float32_updates(300, 5_000)
    reference = float64_gram(centre, rows)
    assert np.max(np.abs(kernel.gram(centre, rows) - reference)) <= 1e-6 * np.max(reference)


def test_the_gram_of_a_multi_array_model_matches_the_numpy_path(monkeypatch, kernel):
    rng = np.random.default_rng(3)
    shapes = [(300, 401), (401,), (7, 3, 3), (0,), (1,)]
    global_arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    local_arrays = [
        [(g + 1e-2 * rng.standard_normal(g.shape)).astype(np.float32) for g in global_arrays]
        for _ in range(9)
    ]
    trainable = [True, True, False, True, True]
    compiled = gram_matrix(global_arrays, local_arrays, trainable=trainable)
    monkeypatch.setenv("FAIRFL_GRAM_KERNEL", "numpy")
    numpy_path = gram_matrix(global_arrays, local_arrays, trainable=trainable)
    wide = [[a.astype(np.float64) for a in local] for local in local_arrays]
    exact = gram_matrix([g.astype(np.float64) for g in global_arrays], wide, trainable=trainable)
    scale = np.max(np.abs(exact))
    assert np.max(np.abs(compiled - exact)) <= 1e-6 * scale
    assert np.max(np.abs(numpy_path - exact)) <= 1e-6 * scale


def test_the_kernel_forms_the_gram_only_of_all_float32_models(monkeypatch, kernel):
    calls = []
    monkeypatch.setattr(
        GramKernel, "gram", lambda self, c, rows: calls.append(len(rows)) or np.zeros((2, 2))
    )
    centre, rows = float32_updates(2, 100)
    gram_matrix([centre], [[r] for r in rows])
    assert calls == [2]
    gram_matrix([centre.astype(np.float64)], [[r] for r in rows])  # a float64 global model
    gram_matrix([centre.astype(np.float16)], [[r.astype(np.float16)] for r in rows])
    assert calls == [2]


def test_a_nan_spoils_only_its_clients_row_and_column(kernel):
    centre, rows = float32_updates(6, 9_000)
    reference = float64_gram(centre, rows)
    rows[2] = rows[2].copy()
    rows[2][1234] = np.nan
    got = gram_matrix([centre], [[r] for r in rows])
    others = [i for i in range(6) if i != 2]
    assert np.all(np.isnan(got[2])) and np.all(np.isnan(got[:, 2]))
    clean = np.ix_(others, others)
    assert np.max(np.abs(got[clean] - reference[clean])) <= 1e-6 * np.max(reference)


def test_a_float32_overflow_is_redone_in_float64(kernel):
    centre = np.zeros(1_000, np.float32)
    rows = [np.full(1_000, 1e20, np.float32), np.full(1_000, -2e20, np.float32)]
    assert not np.all(np.isfinite(kernel.gram(centre, rows)))  # 1e43 overflows float32
    got = gram_matrix([centre], [[r] for r in rows])
    expected = 1_000 * np.array([[1e40, -2e40], [-2e40, 4e40]])
    assert np.allclose(got, expected, rtol=1e-6)


def test_threads_share_the_kernel_safely(kernel):
    centre, rows = float32_updates(13, 50_000)
    expected = kernel.gram(centre, rows)
    results: list[np.ndarray] = []

    def work() -> None:
        for _ in range(5):
            results.append(kernel.gram(centre, rows))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 20
    assert all(np.array_equal(result, expected) for result in results)


def test_numpy_mode_never_loads_the_kernel(monkeypatch):
    monkeypatch.setenv("FAIRFL_GRAM_KERNEL", "numpy")
    assert gram_kernel() is None
    assert "FAIRFL_GRAM_KERNEL=numpy" in gram_kernel_description()


def test_an_unknown_mode_is_named_in_the_error(monkeypatch):
    monkeypatch.setenv("FAIRFL_GRAM_KERNEL", "fast")
    with pytest.raises(ValueError, match=r"FAIRFL_GRAM_KERNEL must be one of.*'fast'"):
        gram_kernel()


def fake_compiler(folder: Path, body: str) -> str:
    """A shell script standing in for ``cc``: ``--version`` works, compiling runs ``body``."""
    script = folder / "fake-cc"
    script.write_text(f'#!/bin/sh\n[ "$1" = --version ] && echo fake-cc 1.0 && exit 0\n{body}\n')
    script.chmod(0o755)
    return str(script)


def test_a_failed_compilation_falls_back_to_numpy_or_fails_loudly(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("CC", fake_compiler(tmp_path, "echo 'error: no AVX here' >&2; exit 1"))
    monkeypatch.setenv("FAIRFL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FAIRFL_GRAM_KERNEL", "auto")
    with caplog.at_level(logging.INFO, logger="fairfl"):
        assert gram_kernel() is None
    assert any("no AVX here" in r.message for r in caplog.records)
    centre, rows = float32_updates(3, 100)  # numpy's path still aggregates
    assert np.allclose(gram_matrix([centre], [[r] for r in rows]), float64_gram(centre, rows))
    monkeypatch.setenv("FAIRFL_GRAM_KERNEL", "compiled")
    with pytest.raises(GramKernelUnavailableError, match=r"compiled, but compiling it.*no AVX"):
        gram_kernel()


def test_no_compiler_is_a_reason_not_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", str(tmp_path / "missing-cc"))
    kernel, reason = build_and_load(tmp_path / "cache")
    assert kernel is None and "does not run" in reason


def test_a_built_kernel_is_loaded_without_compiling_again(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    first, reason = build_and_load(folder)
    assert first is not None, reason
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    monkeypatch.setattr(gram_kernel_module, "_compile", lambda *args: pytest.fail("compiled again"))
    second, _ = build_and_load(folder)
    assert second is not None and second.path == first.path
    # No build leftovers: the library and the hash recorded when it was built.
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [first.path.name, first.path.with_suffix(".sha256").name]
    )


def test_a_damaged_cached_kernel_is_built_again(tmp_path):
    first, reason = build_and_load(tmp_path / "first")
    assert first is not None, reason
    # The damage goes to a file never loaded: rewriting a loaded library in place
    # would change the code this process runs.
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    (folder / first.path.name).write_bytes(b"not a shared library")
    again, reason = build_and_load(folder)
    assert again is not None and again.path == folder / first.path.name, reason
    centre, rows = float32_updates(3, 50)
    assert np.allclose(again.gram(centre, rows), float64_gram(centre, rows), rtol=1e-6)


def test_a_cache_folder_others_may_write_is_refused(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    kernel, reason = build_and_load(folder)
    assert kernel is None
    assert "others may write" in reason and "FAIRFL_CACHE_DIR" in reason
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("mode", [0o777, 0o775])
def test_a_cache_under_a_folder_others_may_swap_is_refused_naming_it(tmp_path, mode):
    # Issue 47: with only the cache folder checked, whoever may write its parent could
    # swap the folder between the check and the build and have their code loaded.
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)  # group or others may rename what is in it: not sticky
    folder = shared / "user" / "cache"
    folder.mkdir(parents=True, mode=0o700)
    (shared / "user").chmod(0o700)
    kernel, reason = build_and_load(folder)
    assert kernel is None
    assert f"under {shared} " in reason and "FAIRFL_CACHE_DIR" in reason
    assert list(folder.iterdir()) == []  # nothing built in it


def test_a_cache_under_a_sticky_shared_folder_is_used(tmp_path):
    shared = tmp_path / "sticky"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp: only an entry's owner may rename it
    kernel, reason = build_and_load(shared / "cache")
    assert kernel is not None, reason


def test_an_error_in_the_middle_of_a_build_falls_back_with_one_warning(
    tmp_path, monkeypatch, caplog
):
    # Issue 47: a FileNotFoundError escaped the build and ended FedMGDA+'s aggregation.
    def vanished(*args):
        raise FileNotFoundError(2, "No such file or directory", "gram_kernel.c")

    monkeypatch.setattr(gram_kernel_module, "_compile_in", vanished)
    monkeypatch.setenv("FAIRFL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FAIRFL_GRAM_KERNEL", "auto")
    with caplog.at_level(logging.INFO, logger="fairfl"):
        assert gram_kernel() is None
        assert gram_kernel() is None  # once per process: no second build, no second line
        centre, rows = float32_updates(3, 100)  # numpy's path still aggregates
        gram = gram_matrix([centre], [[r] for r in rows])
    assert np.allclose(gram, float64_gram(centre, rows))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "FileNotFoundError" in warnings[0].getMessage()
    monkeypatch.setenv("FAIRFL_GRAM_KERNEL", "compiled")
    with pytest.raises(GramKernelUnavailableError, match="FileNotFoundError"):
        gram_kernel()


def test_with_the_cache_off_each_process_builds_its_own(monkeypatch):
    monkeypatch.setenv("FAIRFL_CACHE_DIR", "off")
    monkeypatch.setenv("FAIRFL_GRAM_KERNEL", "compiled")
    loaded = gram_kernel()
    assert loaded is not None and loaded.path.parent.name.startswith("fairfl-gram-kernel-")
    assert os.path.exists(loaded.path)
    assert gram_kernel() is loaded  # built once per process, not once per call


def test_fedmgda_summary_names_the_grams_path(monkeypatch, caplog, kernel):
    with caplog.at_level(logging.INFO, logger="fairfl"):
        FedMGDAPlus().summary()
    assert any(
        "Gram of the updates: compiled AVX2 kernel" in r.message and str(kernel.path) in r.message
        for r in caplog.records
    )
    caplog.clear()
    monkeypatch.setenv("FAIRFL_GRAM_KERNEL", "numpy")
    with caplog.at_level(logging.INFO, logger="fairfl"):
        FedMGDAPlus().summary()
    assert any("Gram of the updates: numpy" in r.message for r in caplog.records)


# --------------------------------------------------------------- whose file is loaded
# A library found in the cache folder is loaded only when it is ours: a regular file,
# owned by this user, not writable by group or others, with the hash recorded when it
# was built (issue 35). Each test plants a library that *would* load (a copy of a real
# build, its hash recorded correctly) and checks by inode that ctypes never opened it;
# all under a umask of 000, where files and folders would otherwise be created 0777.


@pytest.fixture
def umask_000():
    previous = os.umask(0)
    yield
    os.umask(previous)


@pytest.fixture
def opened(monkeypatch) -> list[int]:
    """The inodes of every library ctypes is asked to load during the test."""
    inodes: list[int] = []
    real = ctypes.CDLL

    def spy(name, *args, **kwargs):
        inodes.append(os.stat(name).st_ino)  # follows /proc/self/fd/N and symlinks
        return real(name, *args, **kwargs)

    monkeypatch.setattr(gram_kernel_module.ctypes, "CDLL", spy)
    return inodes


def plant(tmp_path: Path, folder: Path) -> tuple[Path, int]:
    """A working library at the name the loader looks for in ``folder``, hash recorded.

    Returns its path and its inode, kept alive by a hard link outside ``folder`` so that
    no file built later can get the same inode number.
    """
    built, reason = build_and_load(tmp_path / "origin")
    assert built is not None, reason
    folder.mkdir(mode=0o700, exist_ok=True)
    planted = folder / built.path.name
    shutil.copyfile(built.path, planted)
    planted.chmod(0o700)
    recorded = planted.with_suffix(".sha256")
    recorded.write_text(hashlib.sha256(planted.read_bytes()).hexdigest() + "\n")
    recorded.chmod(0o600)
    os.link(planted, tmp_path / "planted-inode")
    return planted, planted.stat().st_ino


def assert_rebuilt_privately(kernel, reason, planted: Path, inode: int, opened: list[int]):
    assert kernel is not None, reason
    assert inode not in opened  # never handed to the dynamic loader
    assert opened and kernel.path == planted  # what was loaded is the fresh build
    status = os.lstat(planted)
    assert stat.S_ISREG(status.st_mode) and status.st_ino != inode
    assert status.st_uid == os.getuid() and stat.S_IMODE(status.st_mode) == 0o700
    centre, rows = float32_updates(3, 50)
    assert np.allclose(kernel.gram(centre, rows), float64_gram(centre, rows), rtol=1e-6)


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_a_library_of_another_user_is_never_loaded(tmp_path, umask_000, opened):
    planted, inode = plant(tmp_path, tmp_path / "cache")
    os.chown(planted, 4242, 4242)  # another uid, as if it had been planted
    opened.clear()
    kernel, reason = build_and_load(tmp_path / "cache")
    assert_rebuilt_privately(kernel, reason, planted, inode, opened)


def test_a_symlink_into_a_world_writable_folder_is_never_followed(tmp_path, umask_000, opened):
    planted, inode = plant(tmp_path, tmp_path / "cache")
    shared = tmp_path / "world-writable"
    shared.mkdir()
    shared.chmod(0o777)
    target = shared / "kernel.so"
    os.replace(planted, target)
    planted.symlink_to(target)
    opened.clear()
    kernel, reason = build_and_load(tmp_path / "cache")
    assert_rebuilt_privately(kernel, reason, planted, inode, opened)
    assert target.exists()  # the link was replaced; its target left alone


@pytest.mark.parametrize("mode", [0o720, 0o702, 0o777])
def test_a_library_group_or_others_may_write_is_never_loaded(tmp_path, umask_000, opened, mode):
    planted, inode = plant(tmp_path, tmp_path / "cache")
    planted.chmod(mode)
    opened.clear()
    kernel, reason = build_and_load(tmp_path / "cache")
    assert_rebuilt_privately(kernel, reason, planted, inode, opened)


def test_a_library_whose_hash_was_not_recorded_is_never_loaded(tmp_path, umask_000, opened):
    planted, inode = plant(tmp_path, tmp_path / "cache")
    with planted.open("ab") as library:  # still a loadable library, with other bytes
        library.write(b"\0" * 16)
    opened.clear()
    kernel, reason = build_and_load(tmp_path / "cache")
    assert_rebuilt_privately(kernel, reason, planted, inode, opened)


def test_a_hash_file_others_may_write_is_not_trusted(tmp_path, umask_000, opened):
    planted, inode = plant(tmp_path, tmp_path / "cache")
    planted.with_suffix(".sha256").chmod(0o666)
    opened.clear()
    kernel, reason = build_and_load(tmp_path / "cache")
    assert_rebuilt_privately(kernel, reason, planted, inode, opened)


def test_a_build_under_umask_000_is_private(tmp_path, umask_000):
    folder = tmp_path / "new" / "nested" / "cache"
    kernel, reason = build_and_load(folder)
    assert kernel is not None, reason
    for created in (tmp_path / "new", tmp_path / "new" / "nested", folder):
        assert stat.S_IMODE(created.stat().st_mode) == 0o700, created
    assert stat.S_IMODE(kernel.path.stat().st_mode) == 0o700
    assert stat.S_IMODE(kernel.path.with_suffix(".sha256").stat().st_mode) == 0o600


def test_a_fifo_at_the_librarys_name_neither_blocks_nor_loads(tmp_path, umask_000, opened):
    planted, inode = plant(tmp_path, tmp_path / "cache")
    planted.unlink()
    os.mkfifo(planted, 0o600)  # opening it for reading would wait for a writer
    opened.clear()
    kernel, reason = build_and_load(tmp_path / "cache")
    assert_rebuilt_privately(kernel, reason, planted, inode, opened)


def test_what_cannot_be_replaced_is_refused_naming_the_variable(tmp_path, umask_000, opened):
    planted, _ = plant(tmp_path, tmp_path / "cache")
    planted.unlink()
    planted.mkdir()  # a folder at the library's name: no rebuild can replace it
    (planted / "kernel.so").symlink_to(tmp_path / "planted-inode")
    opened.clear()
    kernel, reason = build_and_load(tmp_path / "cache")
    assert kernel is None and "FAIRFL_CACHE_DIR" in reason
    assert opened == []
