"""Fair aggregation rules as Flower Message-API strategies, one module per rule."""

from fairfl.strategies.base import FairStrategy, ReweightedStrategy
from fairfl.strategies.fedavg import FedAvg
from fairfl.strategies.qffl import QFFL
from fairfl.strategies.registry import STRATEGIES, build_strategy
from fairfl.strategies.semivred import SemiVRed
from fairfl.strategies.vred import VRed

__all__ = [
    "QFFL",
    "STRATEGIES",
    "FairStrategy",
    "FedAvg",
    "ReweightedStrategy",
    "SemiVRed",
    "VRed",
    "build_strategy",
]
