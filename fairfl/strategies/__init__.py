"""Fair aggregation rules as Flower Message-API strategies, one module per rule."""

from fairfl.strategies.afl import AFL
from fairfl.strategies.base import FairStrategy
from fairfl.strategies.deltafl import DeltaFL
from fairfl.strategies.ditto import Ditto
from fairfl.strategies.equitable import EquitableFL
from fairfl.strategies.errors import MissingMetricError
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
from fairfl.strategies.reweighted import ReweightedStrategy
from fairfl.strategies.semivred import SemiVRed
from fairfl.strategies.term import TERM
from fairfl.strategies.vred import VRed

__all__ = [
    "AFL",
    "QFFL",
    "RCFL",
    "STRATEGIES",
    "TERM",
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
    "MGDAProx",
    "MissingMetricError",
    "PropFair",
    "QFedSGD",
    "ReweightedStrategy",
    "SemiVRed",
    "VRed",
    "build_strategy",
]
