"""FedFa: weights from the information quantity of accuracy and participation, then momentum.

Huang, Li, Wang, Du and Zhang, *Fairness and Accuracy in Federated Learning*, arXiv
2012.10069 (2020), https://arxiv.org/abs/2012.10069; journal version *Fairness and
accuracy in horizontal federated learning*, Information Sciences 589 (2022). The paper's
text was not available; the formulas are those of FLGo's non-official implementation
(``flgo/algorithm/fedfa.py`` in ``WwZzz/easyFL``, commit ``ea07f1d``), numbered as in
``docs/specs/spec-fedfa.md``, the same as in ``method/fedfa.py`` on the ``easyFL_v1.0``
branch, whose records are the FedFa runs of the FedFV paper (Wang et al., IJCAI 2021):

    a_i = Acc_i / Σ_j Acc_j                                           (F1)
    I^acc_i = -log2(a_i + 1e-6),   I^f_i = -log2(1 - f_i / Σ_j f_j + 1e-5)   (F2, F3)
    p_i = (1 - β) I^acc_i / Σ_j I^acc_j + β I^f_i / Σ_j I^f_j          (F4, F5)
    w̄ = Σ_i p_i w_i,   m^t = γ m^{t-1} + (1 - γ)(w̄ - w^t),   w^{t+1} = w̄ - η m^t   (F6-F8)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fairfl.contract import TrainReply, keys, sorted_client_keys
from fairfl.secagg.forms import SecureForm
from fairfl.strategies.core._checks import check_real
from fairfl.strategies.core.base import ConfigValue
from fairfl.strategies.core.params import RuleParameters, choice, real
from fairfl.strategies.core.reweighted import StepsFromWeightedAverage

#: The reference's ε inside the accuracy logarithm (F2): keeps a 0 share finite.
ACCURACY_EPSILON = 1e-6
#: The reference's ε inside the frequency logarithm (F3): keeps a round's only client finite.
FREQUENCY_EPSILON = 1e-5

#: When a client measures Acc_k: on its locally trained model, or on the received one.
Accuracy = Literal["after-training", "before-training"]
ACCURACIES: tuple[Accuracy, ...] = ("after-training", "before-training")
#: The train-config key that asks for each, and the metric key of the reply.
ACCURACY_REQUESTS: dict[Accuracy, tuple[str, str]] = {
    "after-training": (keys.WANT_ACCURACY_AFTER_TRAINING, keys.ACC_AFTER_TRAINING),
    "before-training": (keys.WANT_ACCURACY, keys.ACC_BEFORE_TRAINING),
}


@dataclass(frozen=True)
class FedFaParameters(RuleParameters):
    """FedFa's hyperparameters: β, γ, η and when Acc_k is measured (see :class:`FedFa`)."""

    beta: float = real(0.5, key="fedfa-beta", lower=0.0, upper=1.0)
    gamma: float = real(0.5, key="fedfa-gamma", lower=0.0, upper=1.0)
    eta: float = real(0.1, key="fedfa-eta", lower=0.0)
    accuracy: Accuracy = choice("after-training", ACCURACIES, key="fedfa-accuracy")


class FedFa(StepsFromWeightedAverage):
    """Weights from the information quantity of accuracy and participation, then momentum.

    Each client reports Acc_k, the accuracy on its training split of its locally trained
    model, measured after local training (``acc-after-training``; the rule asks for it
    with ``want-accuracy-after-training`` in every train config), or with
    ``accuracy="before-training"`` of the received model w^t before training
    (``acc-before-training``, asked with ``want-accuracy``). The server counts each client's
    participation f_k itself, by client key: a client cannot raise its own weight by
    reporting a count. The weights are :func:`fedfa_weights` (n_k is not used), then
    :func:`fedfa_momentum_step` moves from w̄ with the server momentum.

    Parameters
    ----------
    beta : float (default: 0.5)
        β in [0, 1]: the weight of the participation term; the accuracy term gets
        α = 1 - β (spec-fedfa F5; FLGo's default).
    gamma : float (default: 0.5)
        γ in [0, 1]: the server momentum (F7). 0.5 is what every FedFa run recorded on
        ``easyFL_v1.0`` used (``fedfa_beta0.5_gamma0.5_...``); FLGo's default is 0.9.
    eta : float (default: 0.1)
        η >= 0: the momentum's step (F8). FLGo uses the clients' learning rate (0.1 by
        default); fairfl makes it the rule's own setting. 0 gives the p-weighted average.
    accuracy : {"after-training", "before-training"} (default: "after-training")
        When a client measures Acc_k (F1). ``"after-training"``: its locally trained
        model, after training, as the code of the paper's experiments (``easyFL_v1.0``'s
        ``communicate`` tests the client's model after ``reply()`` trained it).
        ``"before-training"``: the received model, before training, as FLGo
        (``Client.reply`` tests before ``train``).
    **kwargs
        Sampling settings of :class:`fairfl.strategies.core.base.FairStrategy`.

    Raises
    ------
    ValueError
        If a setting is not a finite number in its range.

    Notes
    -----
    * As the reference, w^{t+1} = w̄ - η m^t with m^t following w̄ - w^t: the momentum
      holds the step back (docs/specs/spec-fedfa.md §2 on the sign).
    * Not implemented: the reference's *client* momentum (each client's SGD momentum set
      to γ); fairfl's ClientApp trains with plain SGD for every rule.
    * A client counts in f_k only when its reply is accepted. The counts and m are
      checkpointed; arrays that are not floating point keep the global value.
    * Diagnostics: ``fedfa-momentum-norm`` (‖m^t‖) besides the λ statistics.
    """

    rule_name = "FedFa"
    registry_name = "fedfa"
    #: Under SecAgg+ (issue #48): Acc_k stays on the client; secure sums give Σ Acc_k and
    #: Σ I^acc_k, each client computes its own p_k from them and the server's
    #: participation share (:mod:`fairfl.strategies.secure_sums`), masks p_k Δ_k, and the
    #: momentum steps from the unmasked average (:meth:`step_from_average`).
    secure_form = SecureForm.two_rounds(
        "fedfa",
        "the server sees the sums Σ Acc_k and Σ I^acc_k and its own participation counts, "
        "never Acc_k",
    )
    #: The default's report; :attr:`required_metrics` follows ``accuracy``.
    required_train_metrics = (keys.ACC_AFTER_TRAINING,)
    Parameters = FedFaParameters
    params: FedFaParameters

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: f_k, rounds taken part in, by client key.
        self.participation: dict[str, int] = {}
        #: m^{t-1}, one float64 array per model array (``None``: m^0 = 0).
        self.momentum: list[NDArray[np.float64]] | None = None

    @property
    def accuracy_key(self) -> str:
        """The metric Acc_k is read from: ``acc-after-training`` or ``acc-before-training``."""
        return ACCURACY_REQUESTS[self.params.accuracy][1]

    @property
    def required_metrics(self) -> tuple[str, ...]:
        """The base's, with the accuracy metric of ``accuracy``."""
        return tuple(
            self.accuracy_key if key == keys.ACC_AFTER_TRAINING else key
            for key in super().required_metrics
        )

    def train_config(self, server_round: int) -> dict[str, ConfigValue]:
        """Ask every client for the accuracy of ``accuracy``."""
        return {ACCURACY_REQUESTS[self.params.accuracy][0]: True}

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state: f_k by client key and m (nested lists, float64)."""
        return {
            "participation": {
                k: self.participation[k] for k in sorted_client_keys(self.participation)
            },
            "momentum": None if self.momentum is None else [m.tolist() for m in self.momentum],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output; ``{}`` is the state before round 1."""
        self.participation = {str(k): int(v) for k, v in state.get("participation", {}).items()}
        momentum = state.get("momentum")
        self.momentum = (
            None if momentum is None else [np.asarray(m, dtype=np.float64) for m in momentum]
        )

    def lambdas(self, server_round: int, replies: list[TrainReply]) -> NDArray[np.float64]:
        """p_k of :func:`fedfa_weights`, counting this round's participation first."""
        participation = dict(self.participation)
        for reply in replies:
            key = self.client_key(reply)
            participation[key] = participation.get(key, 0) + 1
        self.state_updates.set(self, participation=participation)
        accuracies = [float(r.metrics[self.accuracy_key]) for r in replies]  # type: ignore[arg-type]
        counts = [participation[self.client_key(r)] for r in replies]
        return fedfa_weights(accuracies, counts, self.params.beta)

    def step_from_average(
        self,
        server_round: int,
        global_arrays: list[NDArray[Any]],
        average: list[NDArray[Any]],
    ) -> tuple[list[NDArray[Any]], dict[str, Any]]:
        """The server momentum (F7-F8) from w^t and w̄; m deferred. Reads no reply.

        Under secure aggregation (:class:`fairfl.strategies.secure.SecureRounds`) it runs
        on the unmasked average.
        """
        new_arrays, momentum = fedfa_momentum_step(
            global_arrays, average, self.momentum, self.params.gamma, self.params.eta
        )
        self.state_updates.set(self, momentum=momentum)
        norm = float(np.sqrt(sum(float(np.vdot(m, m)) for m in momentum)))
        return new_arrays, {"fedfa-momentum-norm": norm}


def fedfa_weights(
    accuracies: ArrayLike, frequencies: ArrayLike, beta: float
) -> NDArray[np.float64]:
    """FedFa's aggregation weights p_i (spec-fedfa F1-F5).

    Parameters
    ----------
    accuracies : ArrayLike
        Acc_i in [0, 1]: each participant's accuracy on its training split (of its trained
        model after local training, or of the received model before it).
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
    global_arrays: list[NDArray[Any]],
    average_arrays: list[NDArray[Any]],
    momentum: list[NDArray[np.float64]] | None,
    gamma: float,
    eta: float,
) -> tuple[list[NDArray[Any]], list[NDArray[np.float64]]]:
    """FedFa's server momentum (spec-fedfa F7-F8), from w^t, w̄ and m^{t-1}.

    ``m^t = γ m^{t-1} + (1 - γ)(w̄ - w^t)`` and ``w^{t+1} = w̄ - η m^t``, per array in
    float64. As in the reference, the momentum is *subtracted* from w̄: it holds the
    step back towards w^t (the paper's text, unavailable, may use the other sign; the
    spec's §2 says why the reference's is kept).

    Parameters
    ----------
    global_arrays : list[NDArray[Any]]
        w^t.
    average_arrays : list[NDArray[Any]]
        w̄ = Σ_i p_i w_i (F6), same shapes.
    momentum : list[NDArray[np.float64]] | None
        m^{t-1}; ``None`` for m^0 = 0.
    gamma : float
        γ in [0, 1].
    eta : float
        η >= 0; 0 gives w^{t+1} = w̄.

    Returns
    -------
    tuple[list[NDArray[Any]], list[NDArray[np.float64]]]
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
    new_arrays: list[NDArray[Any]] = []
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
    shares: NDArray[np.float64] = information / total
    return shares
