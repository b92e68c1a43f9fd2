r"""The ``fairfl`` command: compare rules side by side, and rebuild reports.

``fairfl run``
    Run one federation: in this process (default) or through Flower's simulation
    engine (``--engine flower``), with the run-config keys as ``-c key=value``
    overrides (``--strategy X`` for ``-c strategy=X``); prints each round's fairness
    and the final line. Example::

        fairfl run --strategy qffl -c num-server-rounds=5 num-partitions=10 --out results/q

``fairfl compare``
    Run rules (and hyperparameter grids) on identical partitions, initial models and
    seeds, then write tables, plots and ``report.md``. Examples::

        fairfl compare --rules fedavg semivred qffl --grid "semivred-beta=0.1,0.5" \\
            --seeds 0 1 2 --set dataset=digits num-partitions=20 dirichlet-alpha=0.1 \\
            num-server-rounds=30 --out results/digits
        fairfl compare --recipe digits-table6 --out docs/results/digits-table6
        fairfl compare --recipe qffl-synthetic --out results/qffl-synthetic

``fairfl report DIR``
    Rebuild the tables, plots and ``report.md`` of a comparison folder from its saved
    ``rounds.jsonl`` files, without re-running anything (and ``tuning.md`` from
    ``tuning.json`` in a ``--tune`` folder).

``fairfl rules``
    List the registered rules, their run-config keys and defaults.

``fairfl recipes``
    List the reproduction recipes.

``fairfl dashboard DIR [DIR ...]``
    Serve a live web page (127.0.0.1:8050 by default) that follows each run's
    ``rounds.jsonl`` as it grows: fairness per round, per-client accuracy, the rule's
    weights and diagnostics, participation, config. ``DIR`` is a run's out-dir or a
    ``fairfl compare`` folder, and may not exist yet. Another address needs
    ``--allow-remote`` and a token (``FAIRFL_DASHBOARD_TOKEN`` or ``--token-file``).

``fairfl verify DIR``
    Check the hash chain of a run's ``rounds.jsonl`` and its sealed ``summary.json``
    (the ledger, :mod:`fairfl.telemetry.ledger`), or of every run of a comparison
    folder: exit 0 if it holds, 1 naming the first tampered, missing or truncated
    round; 2 for a folder that does not exist or holds no run.

Without ``pip install``, run it as ``python -m fairfl ...`` from the repository.

The package holds a module per command (:mod:`fairfl.cli.run`, ``compare``, ``report``,
``verify``, ``rules``, ``recipes``, ``dashboard``: each its parser and what it runs) and
:mod:`fairfl.cli.common`, the constants their parsers share; this module builds the
parser from them and dispatches.

Each subcommand imports only what it needs: ``fairfl --help``, ``verify`` and
``rules`` work on the core install; a missing extra is one line naming it
(``pip install "fairfl[report]"``), exit 2.

Exit codes: 0 done; 1 a run failed (each failed run of a comparison has an
``error.txt``; the report is still written) or ``verify`` found a broken chain; 2 bad
arguments, a run config that fails its up-front checks, or a missing extra; 130/143
stopped by SIGINT/SIGTERM (every process it started, a Flower-engine run's SuperLink
and Ray included, is stopped by PID first; each run's last checkpoint stays).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Iterator

from fairfl.cli import compare, dashboard, recipes, report, rules, run, verify
from fairfl.cli.common import (
    COLUMN_SETS,
    DASHBOARD_PORT,
    DEFAULT_CRITERION,
    DEFAULT_TOLERANCE,
    DEFAULT_VALIDATION_FRACTION,
    ENGINES,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    MANIFEST_FILE,
    MAX_WORKERS,
    RECIPE_NAMES,
    RUN_ENGINES,
    TUNE_CRITERIA,
    TUNING_JSON,
)
from fairfl.cli.compare import _description
from fairfl.cli.dashboard import MIN_TOKEN_LENGTH, TOKEN_ENV, wait_for_interrupt
from fairfl.extras import MODULE_EXTRAS, install_hint

__all__ = [
    "COLUMN_SETS",
    "DASHBOARD_PORT",
    "DEFAULT_CRITERION",
    "DEFAULT_TOLERANCE",
    "DEFAULT_VALIDATION_FRACTION",
    "ENGINES",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "MANIFEST_FILE",
    "MAX_WORKERS",
    "MIN_TOKEN_LENGTH",
    "MODULE_EXTRAS",
    "RECIPE_NAMES",
    "RUN_ENGINES",
    "TOKEN_ENV",
    "TUNE_CRITERIA",
    "TUNING_JSON",
    "_description",
    "build_parser",
    "main",
    "wait_for_interrupt",
]

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``fairfl`` (imports nothing beyond the standard library)."""
    parser = argparse.ArgumentParser(
        prog="fairfl",
        description="Fair federated learning on Flower: run, compare, report, verify.",
        epilog="exit codes: 0 done; 1 a run failed or verify found a broken chain; 2 bad "
        "arguments, a run config that fails its checks, or a missing extra (the line "
        "names it); 3 verify found the chains intact but a run without summary.json (it "
        "did not finish); 130/143 stopped by SIGINT/SIGTERM",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log fairfl at INFO")
    commands = parser.add_subparsers(dest="command", required=True)
    for command in (run, compare, report, verify, rules, recipes, dashboard):
        command.add_parser(commands)
    return parser


def _configure_logging(verbose: bool) -> None:
    from fairfl.logs import attach_flower_console

    level = logging.INFO if verbose else logging.WARNING
    attach_flower_console(level)  # fairfl lines through Flower's console handler, once
    logging.getLogger("fairfl").setLevel(level)
    logging.getLogger("flwr").setLevel(logging.WARNING)


def _missing_extra(error: ModuleNotFoundError) -> str | None:
    """One line naming the extra that brings a missing module (None: not one of ours)."""
    module = (error.name or "").split(".")[0]
    if module not in MODULE_EXTRAS:
        return None
    return f"needs the Python module {module!r}, which is not installed: {install_hint(module)}"


@contextlib.contextmanager
def _signals(command: str) -> Iterator[None]:
    """Commands that start runs stop what they started on SIGINT/SIGTERM."""
    from fairfl.simulation.engine import exit_on_signals

    with exit_on_signals(f"fairfl {command}"):
        yield


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fairfl`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    _configure_logging(args.verbose)
    try:
        if args.command == "compare":
            with _signals(args.command):
                return compare._run_compare(args, argv)
        if args.command == "run":
            with _signals(args.command):
                return run._run_one(args)
        commands = {
            "report": report._run_report,
            "dashboard": dashboard._run_dashboard,
            "verify": verify._verify,
            "rules": rules._list_rules,
            "recipes": recipes._list_recipes,
        }
        return commands[args.command](args)
    except ModuleNotFoundError as error:
        message = _missing_extra(error)
        if message is None:
            raise
        print(f"fairfl {args.command}: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    except (ValueError, FileNotFoundError, FileExistsError) as error:
        print(f"fairfl {args.command}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # the dashboard's Ctrl-C
        return 130
