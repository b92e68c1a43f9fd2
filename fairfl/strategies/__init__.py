"""Fair aggregation rules as Flower Message-API strategies, one module per rule.

The rules and their math sit here beside the registry; the round machinery they share is
:mod:`fairfl.strategies.core`. What a rule author needs is re-exported here: the bases
(``FairStrategy``, ``ReweightedStrategy``, ``LossRule``), the round a rule reads
(``TrainRound``, ``Weights``), the type of a config value (``ConfigValue``) and the rule
kit (``RuleParameters``, ``real``, ``integer``, ``flag``, ``choice``, ``text``,
``ParameterError``; :mod:`fairfl.strategies.core.params`). ``TrainRound`` is imported
here but not listed in ``__all__``: the API reference describes it in
:mod:`fairfl.strategies.core.rounds`, where a third alias would be a duplicate.
"""

from fairfl.strategies.afl import AFL
from fairfl.strategies.core.base import ConfigValue, FairStrategy
from fairfl.strategies.core.errors import MissingMetricError
from fairfl.strategies.core.params import (
    ParameterError,
    RuleParameters,
    choice,
    flag,
    integer,
    real,
    text,
)
from fairfl.strategies.core.reweighted import LossRule, ReweightedStrategy, Weights
from fairfl.strategies.core.rounds import TrainRound as TrainRound  # not in __all__ (above)
from fairfl.strategies.deltafl import DeltaFL
from fairfl.strategies.ditto import Ditto
from fairfl.strategies.equitable import EquitableFL
from fairfl.strategies.fairfed import FairFed
from fairfl.strategies.fedavg import FedAvg
from fairfl.strategies.fedfa import FedFa
from fairfl.strategies.fedfv import FedFV
from fairfl.strategies.fedmgda import FedAvgN, FedMGDAPlain, FedMGDAPlus, MGDAProx
from fairfl.strategies.fedopt import FedAdam, FedYogi
from fairfl.strategies.fedprox import FedProx
from fairfl.strategies.gifair import GiFair
from fairfl.strategies.propfair import PropFair
from fairfl.strategies.qfedsgd import QFedSGD
from fairfl.strategies.qffl import QFFL
from fairfl.strategies.rcfl import RCFL
from fairfl.strategies.registry import STRATEGIES, build_strategy
from fairfl.strategies.semivred import SemiVRed
from fairfl.strategies.term import TERM
from fairfl.strategies.vred import VRed

__all__ = [
    "AFL",
    "QFFL",
    "RCFL",
    "STRATEGIES",
    "TERM",
    "ConfigValue",
    "DeltaFL",
    "Ditto",
    "EquitableFL",
    "FairFed",
    "FairStrategy",
    "FedAdam",
    "FedAvg",
    "FedAvgN",
    "FedFV",
    "FedFa",
    "FedMGDAPlain",
    "FedMGDAPlus",
    "FedProx",
    "FedYogi",
    "GiFair",
    "LossRule",
    "MGDAProx",
    "MissingMetricError",
    "ParameterError",
    "PropFair",
    "QFedSGD",
    "ReweightedStrategy",
    "RuleParameters",
    "SemiVRed",
    "VRed",
    "Weights",
    "build_strategy",
    "choice",
    "flag",
    "integer",
    "real",
    "text",
]
