"""What the commands' parsers share: exit codes, engines, recipe and column names, defaults.

The parser is built from these constants, not from the modules that own them, so that
``fairfl --help`` and ``fairfl verify`` import neither torch nor matplotlib (tests/cli
checks each against its module); every command module reads them from here.
"""

from __future__ import annotations

#: Exit codes (fairfl.simulation.engine's EXIT_OK, EXIT_FAILED, EXIT_USAGE).
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
#: ``fairfl verify``: every chain holds, but a run has no summary.json (it did not finish).
EXIT_UNFINISHED = 3
#: fairfl.sweep.compare.ENGINES and MAX_WORKERS.
ENGINES = ("inprocess", "flwr", "ray")
MAX_WORKERS = 2
#: fairfl.sweep.recipes.RECIPES, fairfl.report.tables.COLUMN_SETS.
RECIPE_NAMES = (
    "digits-table6",
    "fairfed-adult",
    "fairfed-adult-quick",
    "flamby-heart",
    "flamby-heart-quick",
    "qffl-adult",
    "qffl-adult-quick",
    "qffl-synthetic",
    "qffl-synthetic-light",
)
COLUMN_SETS = ("flamby-heart", "group", "personal", "qffl", "table6")
#: fairfl.sweep.tune's CRITERIA, DEFAULT_CRITERION, DEFAULT_TOLERANCE,
#: DEFAULT_VALIDATION_FRACTION and TUNING_JSON.
TUNE_CRITERIA = ("worst10-near-baseline", "worst10", "mean")
DEFAULT_CRITERION = "worst10-near-baseline"
DEFAULT_TOLERANCE = 2.0
DEFAULT_VALIDATION_FRACTION = 0.2
TUNING_JSON = "tuning.json"
#: fairfl.report.results.MANIFEST_FILE.
MANIFEST_FILE = "manifest.json"
#: Engines of ``fairfl run``: this process, or Flower's simulation engine.
RUN_ENGINES = ("inprocess", "flower")

#: Port of ``fairfl dashboard`` and ``fairfl compare --dashboard`` (Dash's default).
DASHBOARD_PORT = 8050
