"""The report of a comparison: Malekmohammadi & Yu's Tables 6 and 2, plots, report.md.

``fairfl report`` (:func:`build_report`) rebuilds the tables and plots of a comparison
folder from its saved ``rounds.jsonl`` files, running nothing. The sweeps that write
those folders (``fairfl compare``, ``--tune``, Ray) are :mod:`fairfl.sweep`; this package
reads their files (:mod:`fairfl.report.results`) and never imports the runner.
"""

from fairfl.report.build import Report, build_report
from fairfl.report.results import RunResult, group_by_label, load_runs
from fairfl.report.tables import (
    QFFL_COLUMNS,
    TABLE6_COLUMNS,
    paired_comparison,
    summarize,
    table2,
)

__all__ = [
    "QFFL_COLUMNS",
    "TABLE6_COLUMNS",
    "Report",
    "RunResult",
    "build_report",
    "group_by_label",
    "load_runs",
    "paired_comparison",
    "summarize",
    "table2",
]
