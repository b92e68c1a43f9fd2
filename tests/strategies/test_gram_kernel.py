"""The compiled float32 Gram kernel of FedMGDA+ (``fairfl.strategies._ops.gram_kernel``).

Its products are checked against ``⟨w_i − c, w_j − c⟩`` computed in float64 from the
definition, on shapes that hit every edge of its tiles (4 x 3 rows) and chunks (8
lanes, up to 4,096 columns); ``gram_matrix`` is checked to give the numpy path's result
whichever path runs, with a NaN or a float32 overflow included. The loader's choices
(mode variable, cache folder, compiler) are checked with folders and compilers the tests
make. CI sets ``FAIRFL_GRAM_KERNEL=compiled``, so a kernel that does not build there
fails these tests instead of skipping them.
"""

import logging
import os
import platform
import stat
import threading
from pathlib import Path

import numpy as np
import pytest

from fairfl.strategies import FedMGDAPlus
from fairfl.strategies._ops import gram_kernel as gram_kernel_module
from fairfl.strategies._ops.gram_kernel import (
    GramKernel,
    GramKernelUnavailableError,
    build_and_load,
    gram_kernel,
    gram_kernel_description,
)
from fairfl.strategies.fedmgda import gram_matrix

pytestmark = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64"), reason="the kernel is built on x86-64 only"
)


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
    assert [p.name for p in folder.iterdir()] == [first.path.name]  # no build leftovers


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
