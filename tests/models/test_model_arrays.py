"""Tests of `model_to_arrays` and `arrays_to_model`."""

from collections import OrderedDict

import numpy as np
import pytest
import torch
from torch import nn

from fairfl.models import MODELS, arrays_to_model, build_model, model_to_arrays

SHAPES = {
    "logreg": (60,),
    "binary-logreg": (13,),
    "mlp": (60,),
    "cnn": (1, 8, 8),
    "resnet18gn": (3, 32, 32),
}
CLASSES = {"binary-logreg": 2}  # the others: 10


@pytest.mark.parametrize("name", MODELS)
def test_round_trip_into_a_differently_seeded_model(name):
    # Prepare
    source = build_model(name, SHAPES[name], CLASSES.get(name, 10), seed=1)
    target = build_model(name, SHAPES[name], CLASSES.get(name, 10), seed=2)
    x = torch.randn(3, *SHAPES[name])
    # Execute
    arrays = model_to_arrays(source)
    arrays_to_model(target, arrays)
    # Assert
    assert isinstance(arrays, OrderedDict)
    assert list(arrays) == list(source.state_dict())
    assert all(a.dtype == np.float32 and a.flags.c_contiguous for a in arrays.values())
    torch.testing.assert_close(target(x), source(x), rtol=0, atol=0)


def test_arrays_are_copies_both_ways():
    model = build_model("logreg", (60,), 10)
    arrays = model_to_arrays(model)
    before = model.fc.weight.detach().clone()
    arrays["fc.weight"][:] = 7.0  # changing the export leaves the model alone
    assert torch.equal(model.fc.weight, before)
    arrays_to_model(model, arrays)
    arrays["fc.weight"][:] = -1.0  # changing the import source after loading too
    assert torch.all(model.fc.weight == 7.0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_floating_point_state_is_exported_as_float32(dtype):
    model = build_model("mlp", (60,), 10).to(dtype)
    arrays = model_to_arrays(model)
    assert all(a.dtype == np.float32 for a in arrays.values())
    # Loading casts back to each entry's dtype.
    arrays_to_model(model, arrays)
    assert all(p.dtype == dtype for p in model.parameters())


def test_integer_buffers_keep_their_dtype():
    # Not a zoo model: BatchNorm has an int64 counter, which must survive a round trip.
    model = nn.BatchNorm1d(4)
    arrays = model_to_arrays(model)
    assert arrays["num_batches_tracked"].dtype == np.int64
    arrays["num_batches_tracked"] = np.asarray(5)
    arrays_to_model(model, arrays)
    assert model.num_batches_tracked.item() == 5


def test_read_only_and_float64_arrays_load():
    model = build_model("logreg", (60,), 10)
    arrays = {k: v.astype(np.float64) for k, v in model_to_arrays(model).items()}
    for value in arrays.values():
        value.setflags(write=False)
    arrays_to_model(model, arrays)
    assert model.fc.weight.dtype == torch.float32


def test_missing_keys_are_named():
    model = build_model("mlp", (60,), 10)
    arrays = model_to_arrays(model)
    del arrays["fc.bias"]
    with pytest.raises(ValueError, match=r"arrays are missing keys of the model: 'fc.bias'$"):
        arrays_to_model(model, arrays)


def test_unexpected_keys_are_named():
    model = build_model("mlp", (60,), 10)
    arrays = dict(model_to_arrays(model), extra=np.zeros(1, np.float32))
    with pytest.raises(ValueError, match=r"arrays have keys the model lacks: 'extra'$"):
        arrays_to_model(model, arrays)


def test_long_key_lists_are_shortened():
    # Five keys are listed in full; more are cut to the first five, sorted, then a count.
    model = build_model("resnet18gn", (3, 32, 32), 10)
    arrays = {k: v for k, v in model_to_arrays(model).items() if k.startswith("layer")}
    with pytest.raises(
        ValueError,
        match=r"missing keys of the model: 'bn1.bias', 'bn1.weight', 'conv1.weight', "
        r"'fc.bias', 'fc.weight'$",
    ):
        arrays_to_model(model, arrays)
    arrays = model_to_arrays(build_model("mlp", (60,), 10))
    with pytest.raises(ValueError, match=r"'bn1.bias', .* and \d+ more$"):
        arrays_to_model(model, arrays)


def test_shape_mismatch_names_key_and_shapes():
    model = build_model("mlp", (60,), 10)
    arrays = model_to_arrays(build_model("mlp", (60,), 5))
    with pytest.raises(
        ValueError,
        match=r"shape mismatch for key 'fc.weight': model has \(10, 64\), array has \(5, 64\)",
    ):
        arrays_to_model(model, arrays)


def test_non_numeric_array_is_rejected():
    model = build_model("logreg", (60,), 10)
    arrays = model_to_arrays(model)
    arrays["fc.bias"] = np.array(["a"] * 10)
    with pytest.raises(ValueError, match=r"array for key 'fc.bias' is not numeric \(dtype <U1\)"):
        arrays_to_model(model, arrays)


def test_float_array_for_integer_entry_is_rejected():
    model = nn.BatchNorm1d(4)
    arrays = model_to_arrays(model)
    arrays["num_batches_tracked"] = np.asarray(2.5)
    with pytest.raises(
        ValueError,
        match=r"array for key 'num_batches_tracked' is floating-point \(float64\) but the "
        r"model entry is torch.int64",
    ):
        arrays_to_model(model, arrays)


def test_failed_load_leaves_the_model_unchanged():
    # Prepare: the first entries are valid, the last has the wrong shape
    model = build_model("mlp", (60,), 10, seed=0)
    before = model_to_arrays(model)
    arrays = model_to_arrays(build_model("mlp", (60,), 10, seed=1))
    arrays["fc.bias"] = np.zeros(3, np.float32)
    # Execute
    with pytest.raises(ValueError, match=r"shape mismatch for key 'fc.bias'"):
        arrays_to_model(model, arrays)
    # Assert
    after = model_to_arrays(model)
    assert all(np.array_equal(before[k], after[k]) for k in before)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_round_trip_on_cuda():
    model = build_model("cnn", (1, 8, 8), 10, seed=1).cuda()
    arrays = model_to_arrays(model)
    assert all(isinstance(a, np.ndarray) for a in arrays.values())
    target = build_model("cnn", (1, 8, 8), 10, seed=2).cuda()
    arrays_to_model(target, arrays)
    assert all(p.device.type == "cuda" for p in target.parameters())
    x = torch.randn(2, 1, 8, 8, device="cuda")
    torch.testing.assert_close(target(x), model(x), rtol=0, atol=0)
