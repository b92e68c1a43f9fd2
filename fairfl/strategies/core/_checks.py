"""Input checks shared by the rules' math (the settings are declared: :mod:`fairfl.fields`)."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray


def check_real(
    name: str,
    value: object,
    *,
    lower: float | None = None,
    upper: float | None = None,
    lower_open: bool = False,
) -> float:
    """Return ``value`` as a float, or raise ``ValueError`` naming ``name`` and the bound.

    ``lower`` is inclusive unless ``lower_open``; ``upper`` is inclusive. Bools and
    non-finite numbers are rejected.
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    number = float(value)
    if lower is not None and (number < lower or (lower_open and number == lower)):
        relation = ">" if lower_open else ">="
        raise ValueError(f"{name} must be {relation} {lower:g}, got {value!r}")
    if upper is not None and number > upper:
        raise ValueError(f"{name} must be <= {upper:g}, got {value!r}")
    return number


def check_shares_and_losses(
    p: ArrayLike, losses: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Validate the inputs of a weight rule: data shares ``p > 0`` and finite losses.

    Raises
    ------
    ValueError
        If the vectors are empty, not 1-D or of different shapes, a share is not > 0,
        or a loss is not finite.
    """
    shares = np.asarray(p, dtype=np.float64)
    f = np.asarray(losses, dtype=np.float64)
    if shares.ndim != 1 or shares.size == 0 or shares.shape != f.shape:
        raise ValueError(
            "p and losses must be non-empty 1-D vectors of one shape, "
            f"got {shares.shape} and {f.shape}"
        )
    if not np.all(shares > 0):
        raise ValueError(f"p must all be > 0, got {shares.tolist()}")
    if not np.all(np.isfinite(f)):
        raise ValueError(f"losses must be finite, got {f.tolist()}")
    return shares, f


def check_fraction(name: str, value: float) -> None:
    """Raise ``ValueError`` unless ``0 <= value <= 1``."""
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value}")


def check_positive_int(name: str, value: int, minimum: int = 1) -> None:
    """Raise ``ValueError`` unless ``value`` is an int ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
