"""FedFa: weights from the information quantity of accuracy and participation, then momentum.

Huang, Li, Wang, Du and Zhang, *Fairness and Accuracy in Federated Learning*, arXiv
2012.10069 (2020), https://arxiv.org/abs/2012.10069; journal version *Fairness and
accuracy in horizontal federated learning*, Information Sciences 589 (2022). The paper's
text was not available; the formulas are those of FLGo's non-official implementation
(``flgo/algorithm/fedfa.py`` in ``WwZzz/easyFL``, commit ``ea07f1d``), numbered as in
``docs/specs/spec-fedfa.md``:

    a_i = Acc_i / Σ_j Acc_j                                           (F1)
    I^acc_i = -log2(a_i + 1e-6),   I^f_i = -log2(1 - f_i / Σ_j f_j + 1e-5)   (F2, F3)
    p_i = (1 - β) I^acc_i / Σ_j I^acc_j + β I^f_i / Σ_j I^f_j          (F4, F5)
    w̄ = Σ_i p_i w_i,   m^t = γ m^{t-1} + (1 - γ)(w̄ - w^t),   w^{t+1} = w̄ - η m^t   (F6-F8)
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fairfl.strategies._checks import check_real

#: The reference's ε inside the accuracy logarithm (F2): keeps a 0 share finite.
ACCURACY_EPSILON = 1e-6
#: The reference's ε inside the frequency logarithm (F3): keeps a round's only client finite.
FREQUENCY_EPSILON = 1e-5


def fedfa_weights(
    accuracies: ArrayLike, frequencies: ArrayLike, beta: float
) -> NDArray[np.float64]:
    """FedFa's aggregation weights p_i (spec-fedfa F1-F5).

    Parameters
    ----------
    accuracies : ArrayLike
        Acc_i in [0, 1]: each participant's accuracy of the received model on its training
        split, before local training.
    frequencies : ArrayLike
        f_i >= 1: the number of rounds each participant took part in, this one included
        (counted by the server).
    beta : float
        β in [0, 1], the weight of the frequency term; the accuracy term gets α = 1 - β.

    Returns
    -------
    NDArray[np.float64]
        p_i >= 0, summing to 1. Lower accuracy shares and higher participation shares get
        more weight (both -log2 terms grow).

    Raises
    ------
    ValueError
        If the vectors are empty, not 1-D or of different shapes, an accuracy is not a
        finite number in [0, 1], a frequency is not a finite number >= 1, or ``beta``
        is not in [0, 1].

    Notes
    -----
    Two departures from the reference, both where it is undefined or negative:
    all accuracies 0 (F1 is 0/0, NaN in the reference) gives equal shares 1/m; and
    I^acc is clipped at 0 (a share of exactly 1 gives -log2(1 + 1e-6) < 0 there), so
    no weight is negative. A lone participant gets weight 1.
    """
    acc = np.asarray(accuracies, dtype=np.float64)
    freq = np.asarray(frequencies, dtype=np.float64)
    if acc.ndim != 1 or acc.size == 0 or acc.shape != freq.shape:
        raise ValueError(
            "accuracies and frequencies must be non-empty 1-D vectors of one shape, "
            f"got {acc.shape} and {freq.shape}"
        )
    if not np.all(np.isfinite(acc) & (acc >= 0.0) & (acc <= 1.0)):
        raise ValueError(f"accuracies must be finite numbers in [0, 1], got {acc.tolist()}")
    if not np.all(np.isfinite(freq) & (freq >= 1.0)):
        raise ValueError(f"frequencies must be finite numbers >= 1, got {freq.tolist()}")
    beta = check_real("beta", beta, lower=0.0, upper=1.0)
    total = acc.sum()
    shares = acc / total if total > 0 else np.full(acc.size, 1.0 / acc.size)  # F1
    info_acc = np.maximum(-np.log2(shares + ACCURACY_EPSILON), 0.0)  # F2
    info_freq = -np.log2(1.0 - freq / freq.sum() + FREQUENCY_EPSILON)  # F3
    return (1.0 - beta) * _normalised(info_acc) + beta * _normalised(info_freq)  # F4, F5


def fedfa_momentum_step(
    global_arrays: list[NDArray],
    average_arrays: list[NDArray],
    momentum: list[NDArray[np.float64]] | None,
    gamma: float,
    eta: float,
) -> tuple[list[NDArray], list[NDArray[np.float64]]]:
    """FedFa's server momentum (spec-fedfa F7-F8), from w^t, w̄ and m^{t-1}.

    ``m^t = γ m^{t-1} + (1 - γ)(w̄ - w^t)`` and ``w^{t+1} = w̄ - η m^t``, per array in
    float64. As in the reference, the momentum is *subtracted* from w̄: it holds the
    step back towards w^t (the paper's text, unavailable, may use the other sign; the
    spec's §2 says why the reference's is kept).

    Parameters
    ----------
    global_arrays : list[NDArray]
        w^t.
    average_arrays : list[NDArray]
        w̄ = Σ_i p_i w_i (F6), same shapes.
    momentum : list[NDArray[np.float64]] | None
        m^{t-1}; ``None`` for m^0 = 0.
    gamma : float
        γ in [0, 1].
    eta : float
        η >= 0; 0 gives w^{t+1} = w̄.

    Returns
    -------
    tuple[list[NDArray], list[NDArray[np.float64]]]
        w^{t+1} (each array in w^t's dtype; arrays that are not floating point keep w^t's
        values) and m^t (zeros for those arrays). The inputs are not changed.

    Raises
    ------
    ValueError
        If the lists differ in length or shapes, or ``gamma`` / ``eta`` are out of range.
    """
    gamma = check_real("gamma", gamma, lower=0.0, upper=1.0)
    eta = check_real("eta", eta, lower=0.0)
    previous = momentum if momentum is not None else [None] * len(global_arrays)
    if not len(global_arrays) == len(average_arrays) == len(previous):
        raise ValueError(
            "global_arrays, average_arrays and momentum must have one length, got "
            f"{len(global_arrays)}, {len(average_arrays)} and {len(previous)}"
        )
    new_arrays: list[NDArray] = []
    new_momentum: list[NDArray[np.float64]] = []
    for index, (current, average, old) in enumerate(
        zip(global_arrays, average_arrays, previous, strict=True)
    ):
        current = np.asarray(current)
        if np.shape(average) != current.shape or (old is not None and old.shape != current.shape):
            raise ValueError(
                f"array {index}: shapes differ from the global model's {current.shape}"
            )
        if not np.issubdtype(current.dtype, np.floating):
            new_arrays.append(current.copy())
            new_momentum.append(np.zeros(current.shape, dtype=np.float64))
            continue
        mean = np.asarray(average, dtype=np.float64)
        step = (1.0 - gamma) * (mean - current.astype(np.float64))
        moment = step if old is None else gamma * old + step  # F7
        new_momentum.append(moment)
        new_arrays.append((mean - eta * moment).astype(current.dtype))  # F8
    return new_arrays, new_momentum


def _normalised(information: NDArray[np.float64]) -> NDArray[np.float64]:
    """``I_i / Σ_j I_j`` (F4); equal shares where every I_i is 0 (a lone participant)."""
    total = information.sum()
    if total == 0:
        return np.full(information.size, 1.0 / information.size)
    return information / total
