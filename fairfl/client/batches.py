"""What a batch of the app's DataLoader is: ``(inputs, targets)`` or a dict of named columns.

Flower's templates and flwr-datasets yield dict batches (``{"img": ..., "label": ...}``
for CIFAR-10, ``{"image": ..., "label": ...}`` for MNIST, ``{"img": ..., "fine_label":
..., "coarse_label": ...}`` for CIFAR-100); plain PyTorch code yields ``(x, y)`` pairs.
:func:`split_batch` reads both, so :func:`fairfl.client.fair_train` takes the app's
DataLoader as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: ``(inputs key, targets key)`` of a dict batch.
BatchKeys = tuple[str, str]

#: Input column names that are detected, in no order of preference: a batch with two of
#: them is ambiguous. Flower / Hugging Face data sets' usual names.
INPUT_KEYS: tuple[str, ...] = ("img", "image", "pixel_values", "x", "features", "inputs")
#: Target column names that are detected. CIFAR-100's ``coarse_label`` is left out so that
#: its batches (``fine_label`` and ``coarse_label``) resolve to the usual 100-class task.
TARGET_KEYS: tuple[str, ...] = ("label", "labels", "y", "target", "targets", "fine_label")


def split_batch(batch: Any, batch_keys: BatchKeys | None = None) -> tuple[Any, Any]:
    """Return ``(inputs, targets)`` of a batch: a pair (tuple or list) or a dict.

    Parameters
    ----------
    batch : Any
        ``(inputs, targets)`` or a mapping of column names to values.
    batch_keys : tuple[str, str] | None
        The ``(inputs, targets)`` keys of a dict batch. ``None``: the one key of the batch
        in :data:`INPUT_KEYS` and the one in :data:`TARGET_KEYS`.

    Raises
    ------
    KeyError
        If a dict batch lacks one of ``batch_keys`` (the message lists the batch's keys).
    ValueError
        If ``batch_keys`` is ``None`` and a dict batch has none or several of the known
        input (or target) names (the message lists the batch's keys and asks for
        ``batch_keys``).
    TypeError
        If the batch is neither a mapping nor a sequence of two items.
    """
    if isinstance(batch, Mapping):
        found = list(batch)
        if batch_keys is None:
            batch_keys = (
                _detect(found, INPUT_KEYS, "inputs"),
                _detect(found, TARGET_KEYS, "targets"),
            )
        missing = [key for key in batch_keys if key not in batch]
        if missing:
            raise KeyError(
                f"batch_keys={tuple(batch_keys)!r}: the dict batch has no {missing[0]!r} "
                f"(its keys: {found})"
            )
        return batch[batch_keys[0]], batch[batch_keys[1]]
    if not isinstance(batch, Sequence) or isinstance(batch, str) or len(batch) != 2:
        raise TypeError(
            "each batch must be an (inputs, targets) pair or a dict of named columns, got "
            f"{type(batch).__name__}"
        )
    return batch[0], batch[1]


def _detect(found: list[Any], names: tuple[str, ...], role: str) -> str:
    """The one key of ``found`` in ``names``; a ValueError naming the keys otherwise."""
    matches = [key for key in found if key in names]
    if len(matches) == 1:
        return str(matches[0])
    which = "none" if not matches else f"several ({matches})"
    raise ValueError(
        f"cannot tell the {role} of a dict batch with keys {found}: {which} of the usual "
        f"names {list(names)}; pass batch_keys=(inputs_key, targets_key)"
    )
