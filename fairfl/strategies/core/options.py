"""The settings every rule takes besides its own hyperparameters: :class:`StrategyOptions`.

:class:`~fairfl.strategies.core.base.FairStrategy` splits its keywords in two: the ones named
here (Flower's FedAvg's and fairfl's own), checked once in :class:`StrategyOptions`, and
the rest, the rule's hyperparameters (:mod:`fairfl.strategies.core.params`). Both sets make
the rule's constructor signature (:func:`constructor_signature`).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Protocol

from fairfl.contract import keys
from fairfl.contract.options import (
    EVALUATE_EVERY,
    FRACTION_EVALUATE,
    FRACTION_TRAIN,
    LOSS_CLIP_MAD,
    MAX_ABS_WEIGHT,
    MAX_CLIENT_SHARE,
    MAX_LOSS,
    MAX_LOSS_SPEC,
    MIN_AVAILABLE_NODES,
    SAMPLING,
)
from fairfl.fields import Fields, declared, flag, function, integer, text
from fairfl.strategies.core.params import RuleParameters, check_keywords, keyword_parameters
from fairfl.strategies.core.records import MetricsAggregation, aggregate_app_metrics
from fairfl.strategies.core.sampling import Sampling


class RuleClass(Protocol):
    """What this module reads of a rule class: its hyperparameters' dataclass.

    ``FairStrategy`` has it; a protocol, so that this module need not import the base
    class, which imports it.
    """

    Parameters: ClassVar[type[RuleParameters]]


#: The keywords :class:`flwr.serverapp.strategy.FedAvg` takes, passed on to it.
FLOWER_KEYWORDS = (
    "fraction_train",
    "fraction_evaluate",
    "min_train_nodes",
    "min_evaluate_nodes",
    "min_available_nodes",
    "weighted_by_key",
    "arrayrecord_key",
    "configrecord_key",
    "train_metrics_aggr_fn",
    "evaluate_metrics_aggr_fn",
)


@dataclass(frozen=True)
class StrategyOptions(Fields):
    """The settings of every rule, checked when built.

    Every rule takes all of :class:`flwr.serverapp.strategy.FedAvg`'s keyword arguments,
    with Flower's defaults and meaning, plus fairfl's below.

    Parameters
    ----------
    fraction_train, fraction_evaluate, min_train_nodes, min_evaluate_nodes, \
min_available_nodes
        As in :class:`flwr.serverapp.strategy.FedAvg`, but checked: fractions in
        [0, 1], counts >= 0.
    weighted_by_key : str (default: "num-examples")
        As in FedAvg: the reply metric holding n_k (train) or the test-sample count
        (evaluate). fairfl requires it in every reply, as an int > 0.
    arrayrecord_key, configrecord_key : str (default: "arrays", "config")
        As in FedAvg: the names of the ArrayRecord and ConfigRecord in the messages
        sent. Train replies must carry their ArrayRecord under ``arrayrecord_key``.
    train_metrics_aggr_fn, evaluate_metrics_aggr_fn : Callable | None (default: None)
        As in FedAvg: ``(list[RecordDict], weighted_by_key) -> MetricRecord`` over the
        accepted replies (default:
        :func:`~fairfl.strategies.core.records.aggregate_app_metrics`, Flower's weighted
        average of every metric but fairfl's per-client reports). The round's
        MetricRecord holds its result *and* fairfl's metrics and diagnostics (fairfl's
        win on a name clash). If it raises, a WARNING names the error and the record
        holds fairfl's metrics only.
    train_loss_key : str (default: "loss-before-training")
        The reply metric the loss-aware rules read as F_k(w^t), the loss of the
        received global model measured *before* local training (Flower's QFedAvg
        parameter name; Flower's default key ``train_loss`` is the loss *during*
        training in a stock ClientApp). ``train_loss_key="train_loss"`` is for apps
        whose ``train_loss`` is measured before local training; it makes
        :class:`~fairfl.strategies.QFFL` equal Flower's QFedAvg on the same replies.
    allow_missing_metrics : bool (default: False)
        When every reply of a round lacks a metric the rule needs (``required
        metrics`` in ``summary()``), the run stops with a
        :class:`~fairfl.strategies.core.errors.MissingMetricError` naming the key and the
        client helper that reports it. True drops such replies with a WARNING instead
        and goes on (the round then keeps the previous model). Replies that lack it
        while others carry it are always dropped.
    max_abs_weight : float | None (default: 1e6)
        Drop replies with a weight larger than this in absolute value (an absurd
        magnitude no trained network has; it would swamp every other client in a
        weighted sum). ``None`` only rejects NaN/Inf. The new global model is held to
        the same bound: a round whose aggregate breaks it (or is not finite) keeps the
        previous model, logs a WARNING and records ``skipped`` in its
        :class:`~fairfl.strategies.core.records.TrainRoundRecord` (``skipped-aggregate`` in
        its metrics).
    max_loss : float (default: 1e6, :data:`fairfl.contract.bounds.MAX_LOSS`)
        Drop train replies reporting a loss (``train_loss_key``, ``train_loss``) above
        this, or an ``|rcfl-eta|`` above it; losses must also be >= 0. A finite number
        > 0; raise it for a federation whose honest losses are larger
        (:mod:`fairfl.contract.bounds` says why 1e6).
    evaluate_every : int (default: 1)
        Federated evaluation only every this many rounds, and always in the last round
        of ``start()`` (long runs: q-FFL's Synthetic trains for thousands of rounds).
    client_sampling : {"uniform", "size-proportional"} (default: "uniform")
        How the round's training nodes are picked (run-config key ``sampling``).
        ``"uniform"``: Flower's FedAvg sampling, ``fraction_train`` of the connected
        nodes uniformly without replacement. ``"size-proportional"``: the same number
        drawn with probability ∝ n_k without replacement, as q-FFL's experiments
        (Li et al. 2020; :class:`fairfl.strategies.core.sampling.SizeSampler`), the drawn
        replies then counting as n_k = 1 each for the rule (a uniform sum, as the
        reference code's aggregation). Round 1, where no n_k is known yet, trains
        every node. Evaluation always samples uniformly (``fraction_evaluate``).
    loss_clip_mad : float (default: 0.0, off)
        Not in any paper; a defence against clients inflating ``train_loss_key``
        (:mod:`fairfl.strategies.core.defences`). k > 0 clips each round's reported losses to
        ``[max(0, m - k·MAD), m + k·MAD]`` (m, MAD: their median and median absolute
        deviation) before the rule reads them. A finite number >= 0.
    max_client_share : float (default: 1.0, off)
        Not in any paper; the other defence of :mod:`fairfl.strategies.core.defences`. Below
        1, no reply's aggregation weight λ_i may exceed this share of the round's
        ``Σ_j λ_j``; the excess goes to the others. Only for
        :class:`~fairfl.strategies.core.reweighted.ReweightedStrategy` rules. In (0, 1].

    Raises
    ------
    fairfl.fields.ParameterError
        A ``ValueError`` naming the first setting out of range (and its run-config key
        where a run config sets it), its bound and the value received.

    Every bound is declared once, on the field (:mod:`fairfl.fields`); those a run
    config sets too are shared with :class:`fairfl.settings.RunSettings`
    (:mod:`fairfl.contract.options`).
    """

    fraction_train: float = declared(1.0, FRACTION_TRAIN)
    fraction_evaluate: float = declared(1.0, FRACTION_EVALUATE)
    min_train_nodes: int = integer(2, key=None, lower=0)
    min_evaluate_nodes: int = integer(2, key=None, lower=0)
    min_available_nodes: int = declared(2, MIN_AVAILABLE_NODES)
    weighted_by_key: str = text(keys.NUM_EXAMPLES, key=None)
    arrayrecord_key: str = text(keys.ARRAYS, key=None)
    configrecord_key: str = text(keys.CONFIG, key=None)
    train_metrics_aggr_fn: MetricsAggregation | None = function()
    evaluate_metrics_aggr_fn: MetricsAggregation | None = function()
    train_loss_key: str = text(keys.LOSS_BEFORE_TRAINING, key=None)
    allow_missing_metrics: bool = flag(False, key=None)
    max_abs_weight: float | None = declared(1e6, MAX_ABS_WEIGHT)
    max_loss: float = declared(MAX_LOSS, MAX_LOSS_SPEC)
    evaluate_every: int = declared(1, EVALUATE_EVERY)
    client_sampling: Sampling = declared("uniform", SAMPLING)
    loss_clip_mad: float = declared(0.0, LOSS_CLIP_MAD)
    max_client_share: float = declared(1.0, MAX_CLIENT_SHARE)

    @classmethod
    def split(cls, keywords: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """``keywords`` as (this class's settings, the rest: the rule's hyperparameters)."""
        names = {f.name for f in fields(cls)}
        ours = {k: v for k, v in keywords.items() if k in names}
        return ours, {k: v for k, v in keywords.items() if k not in names}

    def check_share_cap(self, rule_name: str, reweighted: bool) -> None:
        """Refuse ``max_client_share < 1`` for a rule not of the form ``w - Σ λ_i (w - w_i)``.

        Raises
        ------
        ValueError
            If ``max_client_share < 1`` and not ``reweighted``, naming the rule.
        """
        if self.max_client_share < 1 and not reweighted:
            raise ValueError(
                f"max_client_share < 1 caps the weights λ_i of the rules of the form "
                f"w - Σ λ_i (w - w_i); {rule_name} is not one, got {self.max_client_share!r}"
            )

    def flower_keywords(self) -> dict[str, Any]:
        """The keywords for FedAvg's constructor (the metric functions defaulted)."""
        flower = {name: getattr(self, name) for name in FLOWER_KEYWORDS}
        for name in ("train_metrics_aggr_fn", "evaluate_metrics_aggr_fn"):
            flower[name] = flower[name] or aggregate_app_metrics
        return flower


#: Each parameters class's :func:`constructor_signature`, made once.
_SIGNATURES: dict[type[RuleParameters], inspect.Signature] = {}


def constructor_signature(parameters: type[RuleParameters]) -> inspect.Signature:
    """The signature of a rule whose hyperparameters are ``parameters``.

    Keyword-only: the fields of ``parameters``, then those of :class:`StrategyOptions`,
    each with its default and type. The constructor itself takes ``**keywords`` and
    checks them against this (:func:`~fairfl.strategies.core.params.check_keywords`).

    Raises
    ------
    ValueError
        If a field of ``parameters`` has the name of one of :class:`StrategyOptions`
        (the rule could never receive it).
    """
    if parameters not in _SIGNATURES:
        ours = keyword_parameters(StrategyOptions)
        _SIGNATURES[parameters] = inspect.Signature(
            [*keyword_parameters(parameters), *ours], return_annotation=None
        )
    return _SIGNATURES[parameters]


class ConstructorSignature:
    """``__signature__`` of every rule class: :func:`constructor_signature` of its Parameters.

    A descriptor, not a value set per class: a rule's signature follows the
    :attr:`~fairfl.strategies.core.base.FairStrategy.Parameters` it has when asked, and is only
    made when asked (``inspect.signature``, ``help()``, Sphinx's autodoc), so defining a
    rule costs nothing and an annotation ``inspect`` cannot resolve never fails its
    import. A rule whose ``__init__`` takes more than ``**kwargs`` (a plug-in's own
    keyword) gets ``None``, which tells ``inspect`` to read that ``__init__`` instead.
    """

    def __get__(self, instance: object, owner: type[RuleClass]) -> inspect.Signature | None:
        own = list(inspect.signature(owner.__init__).parameters.values())[1:]  # after self
        if any(item.kind is not inspect.Parameter.VAR_KEYWORD for item in own):
            return None
        return constructor_signature(owner.Parameters)


def rule_settings(
    rule: type[RuleClass], keywords: Mapping[str, Any]
) -> tuple[RuleParameters, StrategyOptions]:
    """A rule's constructor keywords, checked: its hyperparameters and its options.

    Every rule's constructor takes ``**keywords``, so a keyword its signature
    (:func:`constructor_signature`) lacks is refused here, naming the rule, as Python
    refuses one; then the hyperparameters are built, so that a bad value's error names
    its field, then the options.

    Raises
    ------
    TypeError
        Naming the rule and the keyword, and the close match if there is one
        (``TERM() got an unexpected keyword argument 'alpah'. Did you mean 'alpha'?``).
    ValueError
        A value refused: :class:`~fairfl.strategies.core.params.ParameterError` naming the
        hyperparameter, or :class:`StrategyOptions`'s error naming the option.
    """
    check_keywords(rule.__name__, keywords, constructor_signature(rule.Parameters).parameters)
    ours, parameters = StrategyOptions.split(keywords)
    return rule.Parameters(**parameters), StrategyOptions(**ours)
