"""``fairfl report DIR``: rebuild a comparison's tables, plots and report.md from its files.

Nothing runs again: the report is read back from each run's saved ``rounds.jsonl``
(and ``tuning.md`` from ``tuning.json`` in a ``--tune`` folder).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fairfl.cli.common import COLUMN_SETS, EXIT_OK, TUNING_JSON


def add_parser(commands: Any) -> None:
    """``fairfl report DIR``: rebuild tables, plots and report.md."""
    report = commands.add_parser(
        "report", help="rebuild tables, plots and report.md from saved results"
    )
    report.add_argument("folder", type=Path)
    report.add_argument("--baseline")
    report.add_argument("--weights-of", dest="weights_label")
    report.add_argument("--columns", choices=COLUMN_SETS)
    report.add_argument("--title")


def _run_report(args: argparse.Namespace) -> int:
    from fairfl.report.build import build_report
    from fairfl.sweep.tune import write_tuning_markdown

    report = build_report(
        args.folder,
        baseline=args.baseline,
        weights_label=args.weights_label,
        columns=args.columns,
        title=args.title,
    )
    print(report.text())
    print(f"report: {args.folder / 'report.md'}")
    if (args.folder / TUNING_JSON).is_file():
        print(f"tuning: {write_tuning_markdown(args.folder)}")
    return EXIT_OK
