"""The public view of FedMGDA+'s Gram: which path it takes, and the matrix (issue #50).

The how-to *Use the compiled Gram kernel* calls these instead of the private ``_ops``.
"""

import numpy as np
import pytest

from fairfl.strategies.fedmgda_qp import gram_path, update_gram

pytestmark = pytest.mark.flower_free  # no Flower API: not run again under the oldest flwr


def test_gram_path_names_numpy_and_why_when_told_to(monkeypatch):
    monkeypatch.setenv("FAIRFL_GRAM_KERNEL", "numpy")
    assert gram_path() == "numpy (BLAS syrk): FAIRFL_GRAM_KERNEL=numpy"
    monkeypatch.setenv("FAIRFL_GRAM_KERNEL", "fast")
    with pytest.raises(ValueError, match="FAIRFL_GRAM_KERNEL must be one of"):
        gram_path()


@pytest.mark.parametrize("mode", ["numpy", "auto"])
def test_update_gram_is_the_gram_of_the_differences(monkeypatch, mode):
    monkeypatch.setenv("FAIRFL_GRAM_KERNEL", mode)
    w_t = [np.array([1.0, 2.0], dtype=np.float32), np.array([3.0], dtype=np.float32)]
    # g_1 = w_t - w_1 = ([1, 0], [0]); g_2 = ([0, 2], [-1]); g_3 = ([1, 1], [1])
    w_1 = [np.array([0.0, 2.0], dtype=np.float32), np.array([3.0], dtype=np.float32)]
    w_2 = [np.array([1.0, 0.0], dtype=np.float32), np.array([4.0], dtype=np.float32)]
    w_3 = [np.array([0.0, 1.0], dtype=np.float32), np.array([2.0], dtype=np.float32)]
    # <g_1, g_1> = 1, <g_1, g_2> = 0, <g_1, g_3> = 1, <g_2, g_2> = 4 + 1 = 5,
    # <g_2, g_3> = 2 - 1 = 1, <g_3, g_3> = 1 + 1 + 1 = 3
    expected = np.array([[1.0, 0.0, 1.0], [0.0, 5.0, 1.0], [1.0, 1.0, 3.0]])
    np.testing.assert_array_equal(update_gram(w_t, [w_1, w_2, w_3]), expected)
