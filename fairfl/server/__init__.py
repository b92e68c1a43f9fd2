"""Server side: the fairfl ServerApp, its run loop and results files."""

from fairfl.server.results import RoundLog
from fairfl.server.run import RunOutcome, initial_arrays, make_strategy, run_federation

__all__ = ["RoundLog", "RunOutcome", "initial_arrays", "make_strategy", "run_federation"]
