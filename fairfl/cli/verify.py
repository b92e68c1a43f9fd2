"""``fairfl verify DIR``: check the hash chain of a run's results, or of a comparison's runs.

A run's out-dir: its ``rounds.jsonl`` and sealed ``summary.json`` (the ledger,
:mod:`fairfl.telemetry.ledger`); a comparison folder: every run its ``manifest.json``
lists, tuning runs included. Exit 0 if it holds, 1 naming the first bad round, 3 when
every chain holds but a run has no ``summary.json`` (stopped mid-run, or the summary was
deleted: nothing then checks the chain's end).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from fairfl.cli.common import EXIT_FAILED, EXIT_OK, EXIT_UNFINISHED, MANIFEST_FILE


def add_parser(commands: Any) -> None:
    """``fairfl verify DIR``: check a run's or a comparison's hash chains."""
    verify = commands.add_parser(
        "verify",
        help="check the hash chain of a run's rounds.jsonl and summary.json, or of every "
        "run of a comparison (exit 1 naming the first bad round; 3 when a run has no "
        "summary.json: it did not finish)",
    )
    verify.add_argument(
        "folder", type=Path, metavar="DIR", help="a run's out-dir or a compare --out"
    )


def _verify_run(folder: Path, label: str) -> int:
    """Print whether one run's ledger holds (stdout) or where it breaks (stderr).

    Returns :data:`EXIT_OK`, :data:`EXIT_FAILED` (broken) or :data:`EXIT_UNFINISHED`
    (intact, but no ``summary.json``).
    """
    from fairfl.telemetry.ledger import ledger_file, verify_ledger

    report = verify_ledger(folder)
    path = ledger_file(folder)
    if not report.ok:
        print(f"fairfl verify: {label}{path}: {report.problem}", file=sys.stderr)
        return EXIT_FAILED
    if report.summary_missing:
        print(
            f"fairfl verify: {label}{path}: {report.rounds} rounds, chain intact, but "
            f"{folder / 'summary.json'} is missing: the run did not finish (or its summary "
            "was deleted), so rounds cut off at the end would go unseen",
            file=sys.stderr,
        )
        return EXIT_UNFINISHED
    print(f"fairfl verify: {label}{path}: {report.rounds} rounds, chain intact")
    return EXIT_OK


def _has_ledger(folder: Path) -> bool:
    return (folder / "rounds.jsonl").exists() or (folder / "rounds.jsonl.gz").exists()


def _verify_comparison(folder: Path) -> int:
    """Verify every run a comparison's ``manifest.json`` lists (and its tuning runs)."""
    comparisons = [
        folder,
        *([folder / "tuning"] if (folder / "tuning" / MANIFEST_FILE).is_file() else []),
    ]
    checked = broken = unfinished = 0
    for comparison in comparisons:
        try:
            manifest = json.loads((comparison / MANIFEST_FILE).read_text(encoding="utf-8"))
            runs = list(manifest["runs"])
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(
                f"{comparison / MANIFEST_FILE} is not a comparison's manifest: {error}"
            ) from error
        root = comparison.resolve()
        for run in runs:
            run_dir = (comparison / str(run.get("dir", ""))).resolve()
            label = f"{run.get('label', '?')} seed {run.get('seed', '?')}: "
            checked += 1
            if not run_dir.is_relative_to(root) or run_dir == root:
                print(
                    f"fairfl verify: {label}{run.get('dir')!r} is not a folder inside {comparison}",
                    file=sys.stderr,
                )
                broken += 1
            elif not _has_ledger(run_dir):
                if run.get("status") == "failed":  # nothing was recorded to verify
                    print(f"fairfl verify: {label}{run_dir}: no rounds (the run failed)")
                else:
                    print(f"fairfl verify: {label}{run_dir}: no rounds.jsonl", file=sys.stderr)
                    broken += 1
            else:
                status = _verify_run(run_dir, label)
                broken += status == EXIT_FAILED
                unfinished += status == EXIT_UNFINISHED
    if broken:
        print(f"fairfl verify: {broken} of {checked} runs in {folder} failed", file=sys.stderr)
        return EXIT_FAILED
    if unfinished:
        print(
            f"fairfl verify: {unfinished} of {checked} runs in {folder} did not finish",
            file=sys.stderr,
        )
        return EXIT_UNFINISHED
    print(f"fairfl verify: all {checked} runs in {folder} intact")
    return EXIT_OK


def _verify(args: argparse.Namespace) -> int:
    """``fairfl verify DIR``: a run's out-dir, a comparison folder; else say which it is not."""
    folder: Path = args.folder
    if not folder.exists():
        raise ValueError(f"{folder} does not exist")
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder (give a run's out-dir or a compare --out)")
    if (folder / MANIFEST_FILE).is_file():
        return _verify_comparison(folder)
    if _has_ledger(folder):
        return _verify_run(folder, "")
    if not any(folder.iterdir()):
        raise ValueError(f"{folder} is empty: no run has written results there")
    raise ValueError(
        f"{folder} holds no run (no rounds.jsonl) and no comparison (no {MANIFEST_FILE})"
    )
