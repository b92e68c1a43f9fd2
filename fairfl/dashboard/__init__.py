"""A live fairness dashboard for running and finished federations (``fairfl dashboard``).

It follows each run's ``rounds.jsonl`` as it grows (:mod:`fairfl.dashboard.follow`) and
shows, per round, the fairness metrics of several runs overlaid, every client's accuracy,
the rule's weights and diagnostics, participation and drops, and the run's config
(:mod:`fairfl.dashboard.figures`), in a Dash page (:mod:`fairfl.dashboard.app`). Needs the
``dashboard`` extra (Dash and Plotly): ``pip install "fairfl[dashboard]"``.
"""

from fairfl.dashboard.app import DashboardServer, check_binding, create_app
from fairfl.dashboard.follow import Note, Registry, RoundData, RunFollower, Source, parse_entry
from fairfl.telemetry.config import is_loopback

__all__ = [
    "DashboardServer",
    "Note",
    "Registry",
    "RoundData",
    "RunFollower",
    "Source",
    "check_binding",
    "create_app",
    "is_loopback",
    "parse_entry",
]
