"""Digits read straight from scikit-learn's data file, without importing scikit-learn."""

import gzip
import importlib.util
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from fairfl.data import sources


def test_same_arrays_as_sklearn_load_digits():
    from sklearn.datasets import load_digits

    digits = load_digits()
    x, y = sources.load_digits_file(sources.digits_file())
    assert x.shape == (1797, 1, 8, 8) and x.dtype == np.float32
    assert y.shape == (1797,) and y.dtype == np.int64
    np.testing.assert_array_equal(x, (digits.images / 16.0).astype(np.float32)[:, None])
    np.testing.assert_array_equal(y, digits.target)


def test_pixels_are_counts_over_16(tmp_path):
    # One row: pixel counts 0, 16, 8, 4 then zeros; label 7.
    row = [0, 16, 8, 4] + [0] * 60 + [7]
    path = tmp_path / "digits.csv.gz"
    with gzip.open(path, "wt") as file:
        file.write(",".join(map(str, row)) + "\n")
    x, y = sources.load_digits_file(path)
    np.testing.assert_array_equal(x[0, 0, 0, :4], [0.0, 1.0, 0.5, 0.25])
    assert y.tolist() == [7]


def test_locating_the_file_does_not_import_sklearn():
    probe = (
        "import sys; from fairfl.data import load_client_data; "
        "load_client_data(dataset='digits', partitioner='shards', partition_id=0, "
        "num_partitions=4); print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('sklearn', 'scipy')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_clear_error_without_sklearn(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"scikit-learn is not installed: pip install"):
        sources.digits_file()


def test_clear_error_when_the_file_is_missing(monkeypatch, tmp_path):
    spec = SimpleNamespace(submodule_search_locations=[str(tmp_path)])
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)
    with pytest.raises(FileNotFoundError, match=r"missing from the installed scikit-learn"):
        sources.digits_file()
