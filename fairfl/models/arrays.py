"""Convert a model's state dict to numpy arrays and back, checking keys and shapes."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

# How many key names an error message lists before "and N more".
_KEYS_SHOWN = 5


def model_to_arrays(model: nn.Module) -> OrderedDict[str, NDArray[np.generic]]:
    """Copy a model's state dict into numpy arrays.

    Parameters
    ----------
    model : nn.Module
        Any PyTorch module, on any device.

    Returns
    -------
    OrderedDict[str, NDArray]
        One C-contiguous array per state-dict entry, in state-dict order. Arrays are
        copies on the CPU, so changing them does not change the model. Floating-point
        tensors (float16, bfloat16, float64, ...) become float32; other tensors keep
        their dtype.

    """
    arrays: OrderedDict[str, NDArray[np.generic]] = OrderedDict()
    for key, tensor in model.state_dict().items():
        value = tensor.detach().cpu()
        if value.is_floating_point():
            value = value.to(torch.float32)
        # .numpy() shares memory with the tensor; copy so the model stays unaliased.
        arrays[key] = value.numpy().copy(order="C")
    return arrays


def arrays_to_model(model: nn.Module, arrays: Mapping[str, NDArray[np.generic]]) -> None:
    """Load numpy arrays into a model's state dict, in place.

    Everything is checked before anything is loaded, so on error the model is
    unchanged. Values are cast to each entry's dtype and copied to its device.
    Values are not checked for NaN or Inf.

    Parameters
    ----------
    model : nn.Module
        The module to load into.
    arrays : Mapping[str, NDArray]
        One array per state-dict key, e.g. from `model_to_arrays`.

    Raises
    ------
    ValueError
        If ``arrays`` lacks a key of the state dict or has a key it lacks (the
        message names them), an array's shape differs from its entry's (naming the
        key and both shapes), an array is not numeric, or a floating-point array is
        given for an integer or boolean entry.

    """
    state = model.state_dict()
    missing = state.keys() - arrays.keys()
    if missing:
        raise ValueError(f"arrays are missing keys of the model: {_list_keys(missing)}")
    unexpected = arrays.keys() - state.keys()
    if unexpected:
        raise ValueError(f"arrays have keys the model lacks: {_list_keys(unexpected)}")
    tensors: dict[str, torch.Tensor] = {}
    for key, target in state.items():
        value = np.asarray(arrays[key])
        if value.shape != tuple(target.shape):
            raise ValueError(
                f"shape mismatch for key {key!r}: model has {tuple(target.shape)}, "
                f"array has {value.shape}"
            )
        if value.dtype.kind not in "biuf":
            raise ValueError(f"array for key {key!r} is not numeric (dtype {value.dtype})")
        if value.dtype.kind == "f" and not target.is_floating_point():
            raise ValueError(
                f"array for key {key!r} is floating-point ({value.dtype}) but the model "
                f"entry is {target.dtype}"
            )
        tensors[key] = torch.tensor(value, dtype=target.dtype)
    model.load_state_dict(tensors)


def _list_keys(keys: Iterable[str]) -> str:
    """Return the sorted keys for an error message, the first few then a count."""
    ordered = sorted(keys)
    shown = ", ".join(repr(k) for k in ordered[:_KEYS_SHOWN])
    rest = len(ordered) - _KEYS_SHOWN
    return f"{shown} and {rest} more" if rest > 0 else shown
