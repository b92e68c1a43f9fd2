"""Server side: the fairfl ServerApp, its run loop and results files."""

from fairfl.server.preflight import check_run, make_strategy
from fairfl.server.results import RoundLog
from fairfl.server.run import RunOutcome, initial_arrays, run_federation

__all__ = [
    "RoundLog",
    "RunOutcome",
    "check_run",
    "initial_arrays",
    "make_strategy",
    "run_federation",
]
