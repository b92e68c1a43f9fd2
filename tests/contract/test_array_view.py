"""contract.array_view: the zero-copy decode of reply arrays, and check_values=False."""

import numpy as np
import pytest
from flwr.app import Array

from fairfl.contract import (
    ModelLayout,
    ReplyError,
    array_view,
    check_array_values,
    keys,
    read_train_reply,
)
from tests.conftest import arrays_of, make_reply


@pytest.mark.parametrize(
    "value",
    [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.asfortranarray(np.arange(6.0).reshape(2, 3)),
        np.zeros((0, 3), np.float32),
        np.array(3.5),
        np.arange(5, dtype=np.int64),
        np.ones((2, 2), np.float16),
    ],
)
def test_view_equals_numpy_and_is_read_only(value):
    array = Array(value)
    view = array_view(array)
    assert view.shape == value.shape and view.dtype == value.dtype
    np.testing.assert_array_equal(view, array.numpy())
    assert not view.flags.writeable


def test_a_truncated_payload_is_refused_not_loaded():
    array = Array(np.arange(3, dtype=np.float32))
    array.data = array.data[:-4]
    with pytest.raises(
        ValueError, match=r"has 8 payload bytes, its header \(float32, \(3,\)\) needs 12"
    ):
        array_view(array)


def test_check_values_false_leaves_values_to_the_caller():
    layout = ModelLayout.of(arrays_of([np.zeros(2, np.float32)]))
    reply = make_reply(1, [np.array([np.nan, 1.0], np.float32)], {keys.NUM_EXAMPLES: 3})
    with pytest.raises(ReplyError, match=r"arrays\['0'\] contains nan"):
        read_train_reply(reply, layout)
    unchecked = read_train_reply(reply, layout, check_values=False)
    assert np.isnan(unchecked.arrays[0][0])
    with pytest.raises(ReplyError, match=r"arrays\['w'\] has \|value\| 5 > 2"):
        check_array_values(1, "w", np.array([5.0, -1.0]), 2.0)
    check_array_values(1, "w", np.array([5.0, -1.0]), None)
