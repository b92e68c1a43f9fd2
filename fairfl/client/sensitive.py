"""Group counts of a model over a sensitive attribute (``group-counts``, issue 37).

The client counts its samples per (attribute value, label, prediction) and sends the
counts, never the predictions (:mod:`fairfl.contract.sensitive`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from fairfl.contract.sensitive import group_counts

#: Samples per forward pass (memory bound only).
_BATCH = 4096


@torch.no_grad()
def model_group_counts(
    model: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    attribute: np.ndarray,
    num_groups: int,
    device: torch.device,
) -> list[int]:
    """``group-counts`` of ``model``'s argmax predictions on ``(x, y)`` with ``attribute``.

    Parameters
    ----------
    model : nn.Module
        A binary classifier (two output logits).
    x, y, attribute : np.ndarray
        Samples, labels in {0, 1} and attribute values in [0, ``num_groups``).
    num_groups : int
        G, the number of attribute values of the data set.
    device : torch.device
        Where the model is.

    Returns
    -------
    list[int]
        4 G counts, cell ``4 a + 2 y + ŷ``.
    """
    model.eval()
    predictions = np.concatenate(
        [
            model(torch.from_numpy(x[start : start + _BATCH]).to(device))
            .argmax(dim=1)
            .cpu()
            .numpy()
            for start in range(0, len(x), _BATCH)
        ]
        or [np.empty(0, dtype=np.int64)]
    )
    return group_counts(attribute, y, predictions, num_groups)
