"""Client side of q-FedAvg: the h_k a client may report (paper 002, Algorithm 2).

In the paper's protocol each device computes and sends ``Δ_k`` and ``h_k``. fairfl's
server computes both itself from the local model and ``train_loss`` (spec
``specs/spec-vred-qffl.md`` §5, [REC]), so sending ``h_k`` is optional: when a reply
carries ``qffl-h`` the server checks it against its own value and drops the reply on
disagreement (a client and server that disagree on q or the learning rate).

A ClientApp sends it when the train config carries :data:`QFFL_Q`::

    if QFFL_Q in config:
        h = qffl_h(loss_before, global_arrays, local_arrays, config[QFFL_Q], config["lr"])
"""

from __future__ import annotations

from collections.abc import Sequence

from numpy.typing import ArrayLike

from fairfl.strategies.qffl import QFFL_EPSILON, QFFL_Q, h_term, squared_distance

# QFFL_Q ("qffl-q") is the train-config key with q that QFFL sends every round.
__all__ = ["QFFL_Q", "qffl_h"]


def qffl_h(
    loss_before: float,
    global_arrays: Sequence[ArrayLike],
    local_arrays: Sequence[ArrayLike],
    q: float,
    lr: float,
) -> float:
    """h_k of q-FedAvg (paper 002, Algorithm 2, line 6), computed on the client.

    ``h_k = q (F_k + ε)^{q-1} ‖Δw_k‖² + L (F_k + ε)^q`` with ``L = 1/lr``,
    ``Δw_k = L (w^t - w̄_k)`` and ε = 1e-10 (reference code and Flower).

    Parameters
    ----------
    loss_before : float
        F_k(w^t): mean loss of the received global model on the whole local training
        split, before local training (the reply's ``train_loss``).
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
