"""Compare rules side by side and report: Malekmohammadi & Yu's Tables 6 and 2, plots, report.md.

``fairfl compare`` (:func:`compare`) runs rules and grids on identical partitions,
initial models and seeds; ``fairfl compare --tune`` (:func:`tune_and_compare`) first
chooses each rule's hyperparameters on validation splits of the training data;
``fairfl report`` (:func:`build_report`) rebuilds the tables and plots from saved
``rounds.jsonl`` files.
"""

from fairfl.report.build import Report, build_report
from fairfl.report.compare import compare, execute, expand_variants, plan_runs
from fairfl.report.recipes import RECIPES, Recipe
from fairfl.report.results import RunResult, group_by_label, load_runs
from fairfl.report.tables import (
    QFFL_COLUMNS,
    TABLE6_COLUMNS,
    paired_comparison,
    summarize,
    table2,
)
from fairfl.report.tune import select_setting, tune_and_compare

__all__ = [
    "QFFL_COLUMNS",
    "RECIPES",
    "TABLE6_COLUMNS",
    "Recipe",
    "Report",
    "RunResult",
    "build_report",
    "compare",
    "execute",
    "expand_variants",
    "group_by_label",
    "load_runs",
    "paired_comparison",
    "plan_runs",
    "select_setting",
    "summarize",
    "table2",
    "tune_and_compare",
]
