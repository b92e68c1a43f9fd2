"""FedAdam and FedYogi: FedAvg's average as a pseudo-gradient, stepped by Flower's server optimiser.

Reddi, Charles, Zaheer, Garrett, Rush, Konečný, Kumar and McMahan, *Adaptive Federated
Optimization*, ICLR 2021, https://openreview.net/forum?id=LkFG3lB13U5, Algorithm 2
(FedAdam, FedYogi). With Δ_t = Σ_i p_i w_i − w^t, the average's move from the sent
model:

    m_t = β_1 m_{t-1} + (1 − β_1) Δ_t
    v_t = β_2 v_{t-1} + (1 − β_2) Δ_t²                                (FedAdam)
    v_t = v_{t-1} − (1 − β_2) Δ_t² sign(v_{t-1} − Δ_t²)                 (FedYogi)
    w^{t+1} = w^t + η m_t / (√v_t + τ)

The step is Flower's own (:class:`flwr.serverapp.strategy.FedAdam` and
:class:`~flwr.serverapp.strategy.FedYogi`, their shared
:class:`~flwr.serverapp.strategy.FedOpt`): :func:`flower_server_step` hands it fairfl's
validated average and reads back w^{t+1}, m_t and v_t. Flower's FedAdam multiplies η by
Adam's bias correction ``√(1 − β_2^{t+1}) / (1 − β_1^{t+1})`` (t the server round);
Algorithm 2 of the paper and FLamby's ``flamby/strategies/fed_opt.py`` have none, so
fairfl's FedAdam hands Flower η divided by that factor (:func:`flower_bias_correction`)
and steps as the paper does; ``fedadam-bias-correction = true`` keeps Flower's. FedYogi
has none in any of the three.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord
from flwr.serverapp.strategy import FedAdam as FlowerFedAdam
from flwr.serverapp.strategy import FedYogi as FlowerFedYogi
from flwr.serverapp.strategy.fedopt import FedOpt as FlowerFedOpt
from numpy.typing import NDArray

from fairfl.contract import keys
from fairfl.secagg.forms import SecureForm
from fairfl.strategies.core.base import ConfigValue
from fairfl.strategies.core.params import RuleParameters, flag, real
from fairfl.strategies.core.reweighted import (
    LossRule,
    StepsFromWeightedAverage,
    TrainRound,
    Weights,
)

#: m_t or v_t: one float64 array per floating array of the model, by its ArrayRecord key.
Moments = dict[str, NDArray[np.float64]]


@dataclass(frozen=True)
class FedAdamParameters(RuleParameters):
    """FedAdam's hyperparameters (see :class:`FedAdam`); defaults are Flower's."""

    eta: float = real(1e-1, key="fedadam-eta", lower=0.0, lower_open=True)
    eta_l: float | None = real(None, key="lr", lower=0.0, lower_open=True, optional=True)
    beta_1: float = real(0.9, key="fedadam-beta-1", lower=0.0, upper=1.0, upper_open=True)
    beta_2: float = real(0.99, key="fedadam-beta-2", lower=0.0, upper=1.0, upper_open=True)
    tau: float = real(1e-3, key="fedadam-tau", lower=0.0, lower_open=True)
    #: Flower's Adam bias correction of η (not in the paper's Algorithm 2 nor FLamby's).
    bias_correction: bool = flag(False, key="fedadam-bias-correction")


@dataclass(frozen=True)
class FedYogiParameters(RuleParameters):
    """FedYogi's hyperparameters (see :class:`FedYogi`); defaults are Flower's."""

    eta: float = real(1e-2, key="fedyogi-eta", lower=0.0, lower_open=True)
    eta_l: float | None = real(None, key="lr", lower=0.0, lower_open=True, optional=True)
    beta_1: float = real(0.9, key="fedyogi-beta-1", lower=0.0, upper=1.0, upper_open=True)
    beta_2: float = real(0.99, key="fedyogi-beta-2", lower=0.0, upper=1.0, upper_open=True)
    tau: float = real(1e-3, key="fedyogi-tau", lower=0.0, lower_open=True)


class FedOptRule(StepsFromWeightedAverage, LossRule):
    """FedAvg's sample-weighted average, then one step of a Flower server optimiser.

    The average is fairfl's (validated replies, values checked, ``max_client_share``);
    its move Δ_t from w^t is the pseudo-gradient of :attr:`flower_step`, a Flower FedOpt
    strategy, which returns w^{t+1} and the moments m_t, v_t (:func:`flower_server_step`).
    The moments change only once the round is accepted (``state_updates``) and are
    checkpointed (:meth:`state_dict`). Subclasses set :attr:`flower_step` and the rule's
    names and parameters.

    Parameters
    ----------
    eta : float
        η > 0, the server learning rate.
    eta_l : float | None (default: None)
        η_l > 0, the clients' learning rate. ``None``: the run's ``lr``, which the server
        sends every round; a value is sent as each round's ``lr`` instead (the registry
        reads it from the run config's ``lr``, so both are one). Flower's FedOpt keeps an
        ``eta_l`` too but neither sends nor reads it.
    beta_1 : float
        β_1 in [0, 1), the first moment's decay.
    beta_2 : float
        β_2 in [0, 1), the second moment's decay.
    tau : float
        τ > 0, the adaptivity: added to √v_t in the step's denominator.
    **kwargs
        Sampling settings of :class:`fairfl.strategies.core.base.FairStrategy`.

    Raises
    ------
    ValueError
        If a setting is out of its range (the message names it).
    """

    needs_loss = False
    #: Under SecAgg+ (issue #48): the server optimiser reads only the average, so each
    #: client masks n_k and Δ_k as for FedAvg and the step runs on the unmasked mean.
    secure_form = SecureForm.one_round(
        "num-examples", "the server sees n_k in the clear; its optimiser steps from the sum"
    )
    #: Flower's strategy whose ``aggregate_train`` makes the step (its FedAvg half replaced).
    flower_step: ClassVar[type[_GivenAverage]]
    params: FedAdamParameters | FedYogiParameters

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: m_{t-1} and v_{t-1} (``None``: zeros, Flower's start).
        self.first_moment: Moments | None = None
        self.second_moment: Moments | None = None

    def train_config(self, server_round: int) -> dict[str, ConfigValue]:
        """``lr`` = η_l when it was given (else the run's ``lr`` goes out unchanged)."""
        eta_l = self.params.eta_l
        return {} if eta_l is None else {keys.LR: eta_l}

    def weights(self, round: TrainRound) -> Weights:
        """FedAvg's ``p_i = n_i / Σ n_j``: the average whose move is Δ_t."""
        return round.shares, {}

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state: m and v by array key (nested lists, float64), or ``None``."""
        return {
            "first_moment": _moments_to_lists(self.first_moment),
            "second_moment": _moments_to_lists(self.second_moment),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output; ``{}`` is the state before round 1."""
        self.first_moment = _moments_of_lists(state.get("first_moment"))
        self.second_moment = _moments_of_lists(state.get("second_moment"))

    def step_from_average(
        self,
        server_round: int,
        global_arrays: list[NDArray[Any]],
        average: list[NDArray[Any]],
    ) -> tuple[list[NDArray[Any]], dict[str, Any]]:
        """Flower's step from w^t and the average w̄ (m, v deferred); its diagnostics.

        The step reads the average only, never a reply: under secure aggregation
        (:class:`fairfl.strategies.secure.SecureRounds`) it runs on the unmasked sum's.
        """
        assert self.current_arrays is not None  # set by configure_train
        names = list(self.current_arrays.keys())
        floating = [
            i for i, array in enumerate(global_arrays) if np.issubdtype(array.dtype, np.floating)
        ]
        stepped, first, second = flower_server_step(
            self.flower_strategy(server_round),
            server_round,
            {names[i]: global_arrays[i] for i in floating},
            {names[i]: average[i] for i in floating},
            self.first_moment,
            self.second_moment,
        )
        self.state_updates.set(self, first_moment=first, second_moment=second)
        new_arrays = list(average)  # arrays that are not floating point keep w̄'s (w^t's)
        for i in floating:
            new_arrays[i] = stepped[names[i]].astype(global_arrays[i].dtype)
        moves = (stepped[names[i]] - global_arrays[i] for i in floating)
        norm = float(np.sqrt(sum(float(np.vdot(d, d)) for d in moves)))
        return new_arrays, {"fedopt-step-norm": norm}

    def flower_strategy(self, server_round: int) -> _GivenAverage:
        """A fresh :attr:`flower_step` with the rule's η, β_1, β_2 and τ for ``server_round``.

        Flower's ``eta_l`` is left at its default: its server step does not read it.
        """
        params = self.params
        return self.flower_step(
            eta=params.eta, beta_1=params.beta_1, beta_2=params.beta_2, tau=params.tau
        )


class _GivenAverage(FlowerFedOpt):
    """Flower's FedOpt whose FedAvg half returns an average already made (:attr:`average`).

    Mixed in after Flower's FedAdam or FedYogi, it is what their ``aggregate_train``
    reaches with ``super().aggregate_train``: their step then runs on fairfl's average.
    """

    average: ArrayRecord

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The given average (the replies were read and averaged by fairfl)."""
        return self.average, None


class _FlowerAdamStep(FlowerFedAdam, _GivenAverage):
    """Flower's FedAdam step on a given average."""


class _FlowerYogiStep(FlowerFedYogi, _GivenAverage):
    """Flower's FedYogi step on a given average."""


def flower_server_step(
    step: _GivenAverage,
    server_round: int,
    global_arrays: Mapping[str, NDArray[Any]],
    average: Mapping[str, NDArray[Any]],
    first_moment: Moments | None,
    second_moment: Moments | None,
) -> tuple[Moments, Moments, Moments]:
    """One server step of Flower's FedAdam or FedYogi from w^t, w̄ and (m_{t-1}, v_{t-1}).

    The equations are the module's (Reddi et al., ICLR 2021, Algorithm 2), computed by
    ``step.aggregate_train`` in float64 with Δ_t = w̄ − w^t.

    Parameters
    ----------
    step : _GivenAverage
        A Flower FedAdam or FedYogi with :class:`_GivenAverage` mixed in after it
        (``_FlowerAdamStep``, ``_FlowerYogiStep``), built with the rule's settings.
    server_round : int
        t, the round (FedAdam's bias correction reads it).
    global_arrays : Mapping[str, NDArray]
        w^t by array key (floating arrays only).
    average : Mapping[str, NDArray]
        w̄ = Σ_i p_i w_i, same keys and shapes.
    first_moment, second_moment : Moments | None
        m_{t-1} and v_{t-1} by array key; ``None``: zeros (the first round).

    Returns
    -------
    tuple[Moments, Moments, Moments]
        w^{t+1}, m_t and v_t by array key, in float64. The inputs are not changed
        (Flower builds new dicts and arrays).

    Raises
    ------
    flwr.serverapp.exception.AggregationError
        If the keys or shapes of ``average`` differ from ``global_arrays``'s (Flower's check).
    """
    step.current_arrays = {k: np.asarray(v, dtype=np.float64) for k, v in global_arrays.items()}
    step.average = ArrayRecord(
        {k: Array(np.asarray(v, dtype=np.float64)) for k, v in average.items()}
    )
    step.m_t = None if first_moment is None else dict(first_moment)
    step.v_t = None if second_moment is None else dict(second_moment)
    stepped, _ = step.aggregate_train(server_round, [])
    assert stepped is not None and step.m_t is not None and step.v_t is not None
    new_arrays = {k: np.asarray(array.numpy(), dtype=np.float64) for k, array in stepped.items()}
    return new_arrays, dict(step.m_t), dict(step.v_t)


def _moments_to_lists(moments: Moments | None) -> dict[str, Any] | None:
    return None if moments is None else {k: v.tolist() for k, v in moments.items()}


def _moments_of_lists(state: Mapping[str, Any] | None) -> Moments | None:
    if state is None:
        return None
    return {str(k): np.asarray(v, dtype=np.float64) for k, v in state.items()}


class FedAdam(FedOptRule):
    """FedAdam (Reddi et al., ICLR 2021, Algorithm 2): Flower's FedAdam step on fairfl's average.

    Parameters are those of :class:`FedOptRule` and ``bias_correction`` (default False,
    as the paper's Algorithm 2; True is Flower's Adam bias correction of η, module
    docstring); the other defaults are Flower's FedAdam: η = 0.1, β_1 = 0.9, β_2 = 0.99,
    τ = 1e-3 (the paper fixes β_1 = 0.9, β_2 = 0.99 and tunes η and τ per task).
    FLamby's Fed-Heart-Disease benchmark (Ogier du Terrail et al., NeurIPS 2022 Datasets
    and Benchmarks) uses η = 1e-2, β_2 = 0.999, client SGD at 1e-2, and no bias
    correction: set ``fedadam-eta = 0.01`` and ``fedadam-beta-2 = 0.999`` for its setting.
    """

    rule_name = "FedAdam"
    registry_name = "fedadam"
    Parameters = FedAdamParameters
    flower_step = _FlowerAdamStep
    params: FedAdamParameters

    def flower_strategy(self, server_round: int) -> _GivenAverage:
        """Flower's FedAdam step; unless ``bias_correction``, with the paper's η (no correction)."""
        step = super().flower_strategy(server_round)
        if not self.params.bias_correction:  # Flower multiplies η by the factor: undo it
            params = self.params
            step.eta = params.eta / flower_bias_correction(
                params.beta_1, params.beta_2, server_round
            )
        return step


def flower_bias_correction(beta_1: float, beta_2: float, server_round: int) -> float:
    """The factor Flower's FedAdam multiplies η by in ``server_round``.

    ``√(1 − β_2^{t+1}) / (1 − β_1^{t+1})`` with t = ``server_round``, written as
    ``flwr/serverapp/strategy/fedadam.py`` computes it (Kingma & Ba's α_t, ICLR 2015).
    """
    return float(
        np.sqrt(1 - np.power(beta_2, server_round + 1.0))
        / (1 - np.power(beta_1, server_round + 1.0))
    )


class FedYogi(FedOptRule):
    """FedYogi (Reddi et al., ICLR 2021, Algorithm 2): Flower's FedYogi step on fairfl's average.

    Parameters are those of :class:`FedOptRule`; defaults are Flower's FedYogi:
    η = 1e-2, β_1 = 0.9, β_2 = 0.99, τ = 1e-3 (Flower's eta_l default, 0.0316, is not
    taken: η_l is the run's ``lr``). FLamby's Fed-Heart-Disease benchmark (Ogier du
    Terrail et al., NeurIPS 2022 Datasets and Benchmarks) uses η = 1e-2, β_2 = 0.999,
    τ = 1e-3 and client SGD at 10^-2.5: set ``fedyogi-beta-2 = 0.999`` for its setting.
    Flower starts v at 0, as FLamby does; the paper's Algorithm 2 starts it at τ² or more.
    """

    rule_name = "FedYogi"
    registry_name = "fedyogi"
    Parameters = FedYogiParameters
    flower_step = _FlowerYogiStep
