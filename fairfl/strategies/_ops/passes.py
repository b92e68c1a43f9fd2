"""One-pass kernels over the replies that more than one rule shares.

:func:`max_abs` bounds the global model's values for the reply checks that a rule folds
into its own pass over the replies (FedMGDA+'s Gram, q-FFL's distances): a reply value
is at most ``max |w^t| + ‖w_k − w^t‖``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray


def max_abs(array: NDArray) -> float:
    """``max |w|`` of one array (0 for empty or non-floating arrays)."""
    if array.size == 0 or not np.issubdtype(array.dtype, np.floating):
        return 0.0
    return float(max(-array.min(), array.max()))
