"""Fair aggregation rules as Flower Message-API strategies, one module per rule."""

from fairfl.strategies.base import FairStrategy, ReweightedStrategy
from fairfl.strategies.fedavg import FedAvg
from fairfl.strategies.registry import STRATEGIES, build_strategy

__all__ = [
    "STRATEGIES",
    "FairStrategy",
    "FedAvg",
    "ReweightedStrategy",
    "build_strategy",
]
