"""q-FFL's h_k (Li et al. 2020, eq. 3), the formula both the server and a client use.

:func:`lipschitz_estimate` is the one h_k of both of the paper's solvers, q-FedSGD
(Algorithm 1: the device's full-batch gradient) and q-FedAvg (Algorithm 2:
``Δw_k = L (w^t - w̄_k)`` after local epochs); :func:`write_gradient_reply` writes
q-FedSGD's train reply (the gradient as the ArrayRecord ``gradient``).

In the paper's protocol each device computes and sends ``Δ_k`` and ``h_k``. fairfl's
server computes both itself from the local model and the reported loss (spec
``docs/specs/spec-vred-qffl.md`` §5, [REC]), so sending ``h_k`` is optional: when a reply
carries ``qffl-h`` the server checks it against its own value and drops the reply on
disagreement (a client and server that disagree on q or the learning rate).

A ClientApp sends it when the train config carries ``keys.QFFL_Q``::

    if keys.QFFL_Q in config:
        h = qffl_h(loss_before, global_arrays, local_arrays, config[keys.QFFL_Q], config["lr"])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from flwr.app import ArrayRecord, RecordDict
from numpy.typing import ArrayLike

from fairfl.contract import keys
from fairfl.contract.replies import write_train_reply

#: ε added to F_k before powers, as in the reference code and Flower's QFedAvg.
QFFL_EPSILON = 1e-10


def lipschitz_estimate(
    loss: float,
    squared_norm: float,
    *,
    q: float,
    lipschitz: float,
    epsilon: float = QFFL_EPSILON,
) -> float:
    """h_k of q-FedSGD and q-FedAvg: ``q (F_k + ε)^{q-1} ‖g_k‖² + L (F_k + ε)^q`` (eq. 3).

    The one h_k of both solvers of Li et al. 2020 (Lemma 3, eq. 3): ``g_k = ∇F_k(w^t)`` in
    q-FedSGD (Algorithm 1, line 5), ``g_k = Δw_k = L (w^t - w̄_k)`` in q-FedAvg
    (Algorithm 2, line 6; :func:`h_term` takes ``‖w^t - w̄_k‖²`` instead).

    Parameters
    ----------
    loss : float
        F_k(w^t) >= 0.
    squared_norm : float
        ``‖g_k‖²`` >= 0.
    q : float
        q >= 0.
    lipschitz : float
        L > 0.
    epsilon : float
        ε added to the loss (reference code: 1e-10).

    Returns
    -------
    float
        h_k, an upper bound of the local Lipschitz constant of ∇(F_k^{q+1}/(q+1)).
    """
    base = loss + epsilon
    # q·x^{q-1} is 0 at q = 0 whatever x (float_power would give 0·(1/ε) = 0 too).
    first = q * float(np.float_power(base, q - 1.0)) * squared_norm if q > 0 else 0.0
    return first + lipschitz * float(np.float_power(base, q))


def h_term(
    loss: float,
    squared_distance: float,
    *,
    q: float,
    lipschitz: float,
    epsilon: float = QFFL_EPSILON,
) -> float:
    """q-FedAvg's h_k from ``‖w^t - w̄_k‖²`` (Li et al. 2020, Alg. 2, line 6).

    :func:`lipschitz_estimate` with ``‖Δw_k‖² = L² ‖w^t - w̄_k‖²``.

    Parameters
    ----------
    loss : float
        F_k(w^t) >= 0.
    squared_distance : float
        ``‖w^t - w̄_k‖²``; ``‖Δw_k‖² = L² ·`` this.
    q : float
        q >= 0.
    lipschitz : float
        L = 1/η.
    epsilon : float
        ε added to the loss (reference code: 1e-10).

    Returns
    -------
    float
        h_k, an estimate of the local Lipschitz constant of ∇(F_k^{q+1}/(q+1))
        (Lemma 3, eq. 3).
    """
    return lipschitz_estimate(
        loss, lipschitz * lipschitz * squared_distance, q=q, lipschitz=lipschitz, epsilon=epsilon
    )


def qffl_h(
    loss_before: float,
    global_arrays: Sequence[ArrayLike],
    local_arrays: Sequence[ArrayLike],
    q: float,
    lr: float,
) -> float:
    """h_k of q-FedAvg (Li et al. 2020, Algorithm 2, line 6), computed on the client.

    ``h_k = q (F_k + ε)^{q-1} ‖Δw_k‖² + L (F_k + ε)^q`` with ``L = 1/lr``,
    ``Δw_k = L (w^t - w̄_k)`` and ε = 1e-10 (reference code and Flower).

    Parameters
    ----------
    loss_before : float
        F_k(w^t): mean loss of the received global model on the whole local training
        split, before local training (the reply's reported loss).
    global_arrays : Sequence[ArrayLike]
        w^t as received, one array per model tensor (numpy arrays or CPU tensors).
    local_arrays : Sequence[ArrayLike]
        w̄_k after local training, in the same order.
    q : float
        q >= 0 (train-config key ``qffl-q``).
    lr : float
        The local SGD learning rate η > 0 (train-config key ``lr``).

    Returns
    -------
    float
        h_k > 0, for the reply's ``qffl-h``.

    Raises
    ------
    ValueError
        If q < 0, lr <= 0, the loss is negative, or the array lists differ in length
        or shapes.
    """
    if not q >= 0:
        raise ValueError(f"q must be >= 0, got {q}")
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    if not loss_before >= 0:
        raise ValueError(f"loss_before must be >= 0, got {loss_before}")
    distance = squared_distance(global_arrays, local_arrays)
    return h_term(loss_before, distance, q=q, lipschitz=1.0 / lr, epsilon=QFFL_EPSILON)


def squared_distance(
    global_arrays: Sequence[ArrayLike], local_arrays: Sequence[ArrayLike]
) -> float:
    """``‖w^t - w̄_k‖²`` in float64 over the floating arrays (counters are skipped).

    The server's fused pass
    (:func:`fairfl.strategies._ops.passes.delta_sums_and_squared_distances`) takes
    differences in the arrays' dtype; the two agree far within ``QFFL``'s
    ``h_rtol``.

    Raises
    ------
    ValueError
        If the lists differ in length or an array in shape.
    """
    if len(global_arrays) != len(local_arrays):
        raise ValueError(
            f"global and local models must have the same number of arrays, got "
            f"{len(global_arrays)} and {len(local_arrays)}"
        )
    total = 0.0
    for index, (g, a) in enumerate(zip(global_arrays, local_arrays, strict=True)):
        g_arr, a_arr = np.asarray(g), np.asarray(a)
        if g_arr.shape != a_arr.shape:
            raise ValueError(
                f"array {index} has shape {a_arr.shape} locally and {g_arr.shape} globally"
            )
        if not np.issubdtype(g_arr.dtype, np.floating):
            continue
        diff = np.subtract(g_arr, a_arr, dtype=np.float64)
        total += float(np.dot(diff.ravel(), diff.ravel()))
    return total


def write_gradient_reply(
    gradient: ArrayRecord,
    *,
    num_examples: int,
    loss_before_training: float,
    partition_id: int | None = None,
) -> RecordDict:
    """The train reply of a q-FedSGD round (Li et al. 2020, Algorithm 1, lines 5-6).

    ``gradient`` (∇F_k(w^t), keys, shapes and dtypes of the received model) goes under
    the ArrayRecord ``gradient`` instead of ``arrays``; the metrics are ``num-examples``,
    ``loss-before-training`` (F_k(w^t), from the same pass) and ``partition-id``.
    """
    content = write_train_reply(
        gradient,
        num_examples=num_examples,
        loss_before_training=loss_before_training,
        partition_id=partition_id,
    )
    return RecordDict({keys.GRADIENT: content[keys.ARRAYS], keys.METRICS: content[keys.METRICS]})
