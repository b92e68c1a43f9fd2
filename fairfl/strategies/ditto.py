"""Ditto: fairness through personalisation, with FedAvg or any other rule as the global rule.

Li, Hu, Beirami and Smith, *Ditto: Fair and Robust Federated Learning Through
Personalization*, ICML 2021, https://arxiv.org/abs/2012.04221 (docs/specs/spec-ditto.md).
Each client k keeps a personal model v_k and, besides the global rule's local update,
minimises the personal objective

    h_k(v; w) = F_k(v) + (λ/2) ‖v − w‖²                      (paper Eq. 2; spec D1)

by the step of Algorithm 1, line 6 (:func:`personal_step`). The personal models never
leave the clients, so the server is the global rule's alone (Algorithm 1, line 9):
:class:`Ditto` is FedAvg, the paper's default, and :func:`with_ditto` pairs Ditto with
any other rule (``strategy = "ditto+qffl"``; spec §5). The pairing of a registered rule is
a class of this module too, named after the rule's class (``from fairfl.strategies.ditto
import DittoQFFL``; ``__getattr__``). The client side is :mod:`fairfl.client.ditto`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any, cast

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message
from flwr.serverapp import Grid
from numpy.typing import NDArray

from fairfl.contract import keys
from fairfl.strategies.core.base import ConfigValue, FairStrategy
from fairfl.strategies.core.params import RuleParameters, integer, real
from fairfl.strategies.fedavg import FedAvg

#: Prefix of a pairing's registry name: ``ditto+<rule>`` is Ditto with <rule> as its global rule.
PAIRING_PREFIX = "ditto+"


@dataclass(frozen=True)
class DittoParameters(RuleParameters):
    """Ditto's hyperparameters: λ, the personal epochs and step size (see :class:`Ditto`)."""

    lam: float = real(1.0, key="ditto-lambda", lower=0.0, grid=(0.05, 0.1, 0.2, 1.0, 2.0))
    personal_epochs: int = integer(0, key="ditto-personal-epochs", lower=0)
    personal_lr_scale: float = real(1.0, key="ditto-personal-lr-scale", lower=0.0, lower_open=True)


class DittoPersonalisation(FairStrategy):
    """Ditto's server half, mixed in before a global rule: its keys out, personal metrics in.

    Every train config carries the global rule's keys and Ditto's (``ditto-lambda``,
    ``ditto-personal-epochs``, ``ditto-personal-lr-scale``), which switch the client's
    personal step on; every evaluate config carries ``ditto-personal = true``, asking for
    the personal model's metrics too. Nothing else of the global rule changes. The
    class's :attr:`Parameters` must derive from :class:`DittoParameters` (:func:`with_ditto`
    builds such classes).
    """

    def train_config(self, server_round: int) -> dict[str, ConfigValue]:
        """The global rule's keys and Ditto's, every round."""
        ditto = cast(DittoParameters, self.params)  # Parameters derives from it (class doc)
        return {**super().train_config(server_round), **personal_config(ditto)}

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Ask every client for its personal model's metrics too (the caller's config is kept)."""
        return super().configure_evaluate(server_round, arrays, with_personal(config), grid)


class Ditto(DittoPersonalisation, FedAvg):
    """FedAvg on the server; every client also trains its personal model v_k.

    The rule's settings travel in every train config under ``ditto-lambda`` (float),
    ``ditto-personal-epochs`` (int) and ``ditto-personal-lr-scale`` (float); every
    evaluate config carries ``ditto-personal = true``, asking the client for its personal
    model's ``personal-eval_loss`` / ``personal-eval_acc`` beside the global model's.
    A ClientApp that ignores these keys trains and reports plain FedAvg.

    Parameters
    ----------
    lam : float (default: 1.0)
        λ >= 0 of h_k (paper Eq. 2): 0 trains v_k on the local data alone, a large λ
        keeps it near w^t. The default is FLGo's (``mu = 1.0``); the paper has each device
        pick λ on its validation data from {0.05, 0.1, 0.2} (strong attacks) or
        {0.1, 1, 2} (all other settings), its Appendix C: the grid is their union (spec §3).
    personal_epochs : int (default: 0)
        Local epochs of the personal step s (paper: s local iterations); 0 takes the
        run's ``local-epochs``, the same work as the global update (FLGo steps both
        models on every batch).
    personal_lr_scale : float (default: 1.0)
        The personal step size η as a multiple of the run's ``lr`` (> 0); 1 is FLGo's
        (one learning rate for both models).
    **kwargs
        Sampling settings of :class:`fairfl.strategies.core.base.FairStrategy`.

    Raises
    ------
    ValueError
        If ``lam`` is not a finite number >= 0, ``personal_epochs`` not an int >= 0, or
        ``personal_lr_scale`` not a finite number > 0.

    Notes
    -----
    Where the personal models live: in each ClientApp's ``Context.state`` (simulation
    and a running SuperNode) and, when the SuperNode's node config sets
    ``ditto-state-dir`` (``flower-supernode --node-config "partition-id=0
    num-partitions=4 ditto-state-dir='/var/lib/fairfl/ditto'"``), in
    ``<dir>/run-<run id>/client-<partition id>.npz`` too, written atomically, so that a
    restarted SuperNode keeps its personal model for the rest of the run. A client that
    never trained starts from (and reports) the global model.

    Paper: the global update may be any rule's. Here: FedAvg, the paper's default;
    ``strategy = "ditto+<rule>"`` (:func:`with_ditto`) takes any other registered rule's.
    """

    rule_name = "Ditto"
    registry_name = "ditto"
    Parameters = DittoParameters
    params: DittoParameters


#: Pairings made so far, by (global rule, registry name): one class each, built once.
_PAIRINGS: dict[tuple[type[FairStrategy], str], type[FairStrategy]] = {}


def with_ditto(rule: type[FairStrategy], name: str) -> type[FairStrategy]:
    """Ditto with ``rule`` as its global rule (Algorithm 1, line 9 by any rule; spec §5).

    The class returned is ``rule`` with :class:`DittoPersonalisation` mixed in: its
    parameters are the rule's and Ditto's (both sets of run-config keys, each with its
    default and check), its ``rule_name`` is ``"Ditto+" + rule.rule_name``, and its
    server step is the rule's, unchanged, so the global model equals the rule's alone for
    every λ. The registry builds it for the name ``ditto+<rule>``; one class per pairing.

    The class is ``Ditto<rule class>`` of this module (``DittoQFFL``), its parameters
    ``Ditto<rule class>Parameters``. For a rule of the registry, built-in or a plug-in,
    both are found under those names (``__getattr__``), so they can be imported,
    subclassed and pickled like any class here.

    Parameters
    ----------
    rule : type[FairStrategy]
        The global rule (built-in or another distribution's).
    name : str
        The pairing's registry name (``"ditto+qffl"``).

    Returns
    -------
    type[FairStrategy]
        The paired rule (:class:`Ditto` itself for FedAvg).

    Raises
    ------
    ValueError
        If ``rule`` already trains personal models (Ditto, a pairing) or declares a
        hyperparameter or run-config key of Ditto's.
    """
    if issubclass(rule, DittoPersonalisation):
        raise ValueError(
            f"{name}: {rule.__qualname__} already trains personal models; "
            f"pair Ditto with a rule that does not ({PAIRING_PREFIX}<rule>)"
        )
    if rule is FedAvg:
        return Ditto
    if (rule, name) in _PAIRINGS:
        return _PAIRINGS[(rule, name)]
    ours = {item.name for item in fields(DittoParameters)}
    our_keys = set(DittoParameters.run_config_keys())
    clash = sorted(
        (ours & {item.name for item in fields(rule.Parameters)})
        | (our_keys & set(rule.Parameters.run_config_keys()))
    )
    if clash:
        raise ValueError(f"{name}: {rule.__qualname__} declares Ditto's {clash} itself")
    parameters: type[RuleParameters] = dataclass(frozen=True)(
        type(
            f"Ditto{rule.__name__}Parameters",
            (DittoParameters, rule.Parameters),
            {
                "__module__": __name__,
                "__doc__": f"{rule.__qualname__}'s hyperparameters and Ditto's (``{name}``).",
            },
        )
    )
    paired = type(
        f"Ditto{rule.__name__}",
        (DittoPersonalisation, rule),
        {
            "__module__": __name__,
            "__doc__": (
                f"Ditto with {rule.__qualname__} as the global rule (``strategy = {name!r}``): "
                f"{rule.__qualname__}'s server step, personal models on the clients."
            ),
            "rule_name": f"Ditto+{rule.rule_name}",
            "registry_name": name,
            "Parameters": parameters,
        },
    )
    _PAIRINGS[(rule, name)] = paired
    return paired


def __getattr__(name: str) -> Any:
    """``Ditto<Rule>`` or ``Ditto<Rule>Parameters``: a registered rule's pairing (PEP 562).

    Pairings are made on first use (:func:`with_ditto`), so this module finds their names
    on demand: ``DittoQFFL`` is the class of ``ditto+qffl``, the one the registry builds,
    and pickle finds a pairing or its parameters by that name in a fresh process. Typed
    ``Any``: a type checker cannot see a class made at run time, and ``Any`` lets code
    subclass it (``class MyDitto(DittoQFFL)``).

    Raises
    ------
    AttributeError
        If ``name`` is no such class. A name that does not start with ``Ditto`` is
        refused without loading the registry (imports probe modules for ``__path__``,
        ``__wrapped__`` and the like).
    """
    if name.startswith("Ditto"):
        from fairfl.strategies.registry import STRATEGIES

        for rule in list(STRATEGIES):
            stem = f"Ditto{STRATEGIES[rule].strategy.__name__}"
            spec = STRATEGIES.get(PAIRING_PREFIX + rule) if name.startswith(stem) else None
            if spec is not None:  # ditto, which is no global rule, has no pairing
                for found in (spec.strategy, spec.strategy.Parameters):
                    if found.__name__ == name:  # not Ditto for "DittoFedAvg"
                        return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def personal_config(params: DittoParameters) -> dict[str, ConfigValue]:
    """The train-config keys that switch a client's personal step on (spec §3)."""
    return {
        keys.DITTO_LAMBDA: params.lam,
        keys.DITTO_PERSONAL_EPOCHS: params.personal_epochs,
        keys.DITTO_PERSONAL_LR_SCALE: params.personal_lr_scale,
    }


def with_personal(config: ConfigRecord) -> ConfigRecord:
    """``config`` plus ``ditto-personal = true``: report the personal model's metrics too."""
    return ConfigRecord({**dict(config), keys.DITTO_PERSONAL: True})


def personal_step(
    personal: NDArray[np.float64],
    gradient: NDArray[np.float64],
    global_model: NDArray[np.float64],
    *,
    lam: float,
    lr: float,
) -> NDArray[np.float64]:
    """One personal step of Ditto: ``v − η (∇F_k(v) + λ (v − w^t))``.

    Algorithm 1, line 6 of the paper (spec D2): a gradient step on
    h_k(v; w^t) = F_k(v) + (λ/2)‖v − w^t‖², whose gradient in v is ∇F_k(v) + λ(v − w^t).
    The client's torch loop (:func:`fairfl.client.training.train_local` with the
    proximal anchor w^t) takes the same step on each minibatch.

    Parameters
    ----------
    personal : NDArray[np.float64]
        v_k, the personal model before the step.
    gradient : NDArray[np.float64]
        ∇F_k(v_k) (a minibatch estimate in practice).
    global_model : NDArray[np.float64]
        w^t, the global model the client received this round.
    lam : float
        λ >= 0.
    lr : float
        η > 0.

    Returns
    -------
    NDArray[np.float64]
        The new v_k (the inputs are not changed).

    Raises
    ------
    ValueError
        If the shapes differ, ``lam < 0`` or ``lr <= 0``.
    """
    if not personal.shape == gradient.shape == global_model.shape:
        raise ValueError(
            f"personal, gradient and global_model must have one shape, got "
            f"{personal.shape}, {gradient.shape} and {global_model.shape}"
        )
    if not lam >= 0:
        raise ValueError(f"lam must be >= 0, got {lam!r}")
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr!r}")
    result: NDArray[np.float64] = personal - lr * (gradient + lam * (personal - global_model))
    return result
