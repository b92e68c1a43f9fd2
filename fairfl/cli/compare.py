"""``fairfl compare``: rules side by side on the same partitions and seeds, then a report.

Its parser (grid, settings, engines, the ``--tune`` group, ``--dashboard``), what it
takes from a recipe, the plain comparison and the tuned one (``--tune``).
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from pathlib import Path
from typing import Any

from fairfl.cli.common import (
    COLUMN_SETS,
    DASHBOARD_PORT,
    DEFAULT_CRITERION,
    DEFAULT_TOLERANCE,
    DEFAULT_VALIDATION_FRACTION,
    ENGINES,
    EXIT_FAILED,
    MAX_WORKERS,
    RECIPE_NAMES,
    TUNE_CRITERIA,
)
from fairfl.cli.dashboard import _keep_serving, _live_dashboard


def add_parser(commands: Any) -> None:
    """``fairfl compare``: run rules side by side, then report."""
    run = commands.add_parser(
        "compare",
        help="run rules side by side on the same partitions and seeds, then report",
        description=(
            "Run every rule variant once per seed on identical partitions, initial models "
            "and seeds; write each run's rounds.jsonl and the comparison's tables, plots "
            "and report.md into --out."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "grid and set items:\n"
            "  key=v1,v2        grid axis; a rule key varies its rule(s), a shared key\n"
            "                   (lr, local-epochs, ...) varies every rule; axes multiply\n"
            "  rule:key=v1,v2   grid axis for one rule only\n"
            "  --set key=value  base run config of every run; rule:key=value for one rule\n"
            "values take the type of the key's default; `fairfl rules` lists the keys."
        ),
    )
    run.add_argument("--recipe", choices=RECIPE_NAMES, help="a preset comparison")
    run.add_argument(
        "--rules",
        nargs="+",
        action="extend",
        metavar="RULE",
        help="registered rules ('all': every)",
    )
    run.add_argument("--grid", nargs="+", action="extend", default=None, metavar="[RULE:]KEY=V1,V2")
    run.add_argument("--seeds", nargs="+", action="extend", type=int, metavar="SEED")
    run.add_argument(
        "--set", nargs="+", action="extend", default=[], dest="settings", metavar="[RULE:]KEY=VALUE"
    )
    run.add_argument("--out", type=Path, required=True, help="output folder")
    run.add_argument(
        "--engine",
        choices=ENGINES,
        default="inprocess",
        help="inprocess (default): this process or --workers; flwr: Flower's simulation "
        "engine, one run at a time; ray: each run a task on the Ray cluster at "
        "--ray-address (--out on a filesystem every node mounts)",
    )
    run.add_argument(
        "--ray-address",
        default=None,
        help="--engine ray: the cluster's GCS address host:port (default: $RAY_ADDRESS)",
    )
    run.add_argument(
        "--cpus-per-run",
        type=float,
        default=1.0,
        help="--engine ray: CPUs each run's task asks Ray for (default 1; fractions allowed)",
    )
    run.add_argument(
        "--workers",
        type=int,
        default=None,
        help=f"worker processes for in-process runs, 1 to {MAX_WORKERS} (default: 1, "
        "or the recipe's)",
    )
    run.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch threads per worker (default 1; 0 keeps torch's default)",
    )
    run.add_argument("--baseline", help="Table 2 baseline variant (default: fedavg)")
    run.add_argument("--weights-of", dest="weights_label", help="variant whose weights to plot")
    run.add_argument("--columns", choices=COLUMN_SETS, help="extra table columns")
    run.add_argument("--title", help="report title")
    run.add_argument("--no-models", action="store_true", help="delete final_model.npz files")
    run.add_argument("--skip-existing", action="store_true", help="keep finished runs")
    run.add_argument(
        "--overwrite", action="store_true", help="run again runs whose folders hold results"
    )
    run.add_argument(
        "--compress-runs", action="store_true", help="gzip each run's rounds.jsonl (for git)"
    )
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    tune = run.add_argument_group(
        "tuning (--tune)",
        "choose each rule's hyperparameters on per-client validation splits of the training "
        "data (tuning seeds), then run the chosen settings on --seeds and report on test "
        "(fairfl.sweep.tune)",
    )
    tune.add_argument("--tune", action="store_true", help="tuned comparison")
    tune.add_argument(
        "--tune-seeds",
        nargs="+",
        action="extend",
        type=int,
        metavar="SEED",
        help="tuning seeds, disjoint from --seeds (default: 100 + each of --seeds)",
    )
    tune.add_argument(
        "--tune-grid",
        nargs="+",
        action="extend",
        default=None,
        metavar="[RULE:]KEY=V1,V2",
        help="grid items replacing the papers' default grid of the rules they apply to",
    )
    tune.add_argument(
        "--tune-criterion",
        choices=TUNE_CRITERIA,
        default=DEFAULT_CRITERION,
        help="worst10-near-baseline (default): best validation worst-10%% among settings "
        "whose validation mean is within --tune-tolerance points of FedAvg's; worst10; mean",
    )
    tune.add_argument(
        "--tune-tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        help=f"points (default {DEFAULT_TOLERANCE:g})",
    )
    tune.add_argument(
        "--validation-fraction",
        type=float,
        default=DEFAULT_VALIDATION_FRACTION,
        help="share of each client's training split held out for validation while tuning "
        f"(default {DEFAULT_VALIDATION_FRACTION:g})",
    )
    run.add_argument(
        "--dashboard",
        nargs="?",
        const=DASHBOARD_PORT,
        type=int,
        metavar="PORT",
        help=f"serve the live dashboard on 127.0.0.1:PORT (default {DASHBOARD_PORT}) while "
        "the comparison runs, and its finished results afterwards until Ctrl-C",
    )


def _run_compare(args: argparse.Namespace, argv: list[str]) -> int:
    from fairfl.report.results import read_manifest
    from fairfl.strategies.registry import STRATEGIES
    from fairfl.sweep.compare import compare
    from fairfl.sweep.recipes import RECIPES

    recipe = RECIPES[args.recipe] if args.recipe else None
    rules = args.rules or (list(recipe.rules or STRATEGIES) if recipe else None)
    if rules == ["all"] or (recipe and recipe.rules is None and not args.rules):
        rules = list(STRATEGIES)
    if not rules:
        raise ValueError("give --rules (or --recipe)")
    seeds = args.seeds or (list(recipe.seeds) if recipe else [0])
    grid = args.grid if args.grid is not None else (list(recipe.grid) if recipe else [])
    settings = [*(recipe.settings if recipe else ()), *args.settings]
    workers = args.workers or (recipe.workers if recipe else 1)
    if args.tune:
        return _run_tuned(args, argv, recipe, rules, seeds, settings, workers)
    live: list[Any] = []  # the dashboard, started once every run passed its checks
    report = compare(
        rules=rules,
        out_dir=args.out,
        seeds=seeds,
        grid=grid,
        settings=settings,
        **_run_options(args, workers),
        baseline=args.baseline or (_present(recipe.baseline, rules, grid) if recipe else None),
        weights_label=args.weights_label
        or (_present(recipe.weights_label, rules, grid) if recipe else None),
        columns=args.columns or (recipe.columns if recipe else "table6"),
        title=args.title or (recipe.title if recipe else None),
        description=_description(recipe, args),
        reference=list(recipe.reference) if recipe else [],
        command=shlex.join(["fairfl", *argv]),
        recipe=recipe.name if recipe else None,
        on_start=lambda: live.append(_live_dashboard("fairfl compare", args.out, args.dashboard)),
    )
    print(report.text())
    print(f"report: {args.out / 'report.md'}")
    runs = (read_manifest(args.out) or {}).get("runs", [])
    failed = [run["dir"] for run in runs if run.get("status") == "failed"]
    code = 0
    if failed:
        print(
            f"fairfl compare: {len(failed)} of {len(runs)} runs failed (see error.txt in "
            + ", ".join(str(args.out / d) for d in failed)
            + ")",
            file=sys.stderr,
        )
        code = EXIT_FAILED
    for server in filter(None, live):
        _keep_serving("fairfl compare", server)
    return code


def _description(recipe: Any, args: argparse.Namespace) -> str:
    """The recipe's description, then what this command's flags change of it."""
    if recipe is None:
        return ""
    changes = [
        f"{flag} {' '.join(str(value) for value in values)}"
        for flag, values in (
            ("--rules", args.rules),
            ("--seeds", args.seeds),
            ("--grid", args.grid),
            ("--set", args.settings),
            ("--tune-grid", args.tune_grid),
        )
        if values
    ]
    if not changes:
        return str(recipe.description)
    return f"{recipe.description} This run departs from the recipe: {'; '.join(changes)}."


def _run_options(args: argparse.Namespace, workers: int) -> dict[str, Any]:
    """How ``fairfl compare`` runs each run (plain or ``--tune``), from its flags."""
    return {
        "engine": args.engine,
        "workers": workers,
        "torch_threads": args.torch_threads,
        "keep_models": not args.no_models,
        "skip_existing": args.skip_existing,
        "overwrite": args.overwrite,
        "progress": not args.no_progress,
        "log_level": logging.INFO if args.verbose else logging.WARNING,
        "compress_runs": args.compress_runs,
        "ray_address": args.ray_address,
        "cpus_per_run": args.cpus_per_run,
    }


def _run_tuned(
    args: argparse.Namespace,
    argv: list[str],
    recipe: Any,
    rules: list[str],
    seeds: list[int],
    settings: list[str],
    workers: int,
) -> int:
    """``fairfl compare --tune``: tune on validation splits, report on fresh seeds."""
    from fairfl.report.results import read_manifest
    from fairfl.sweep.tune import tune_and_compare

    if args.grid is not None:
        raise ValueError("--tune takes --tune-grid, not --grid")
    report = tune_and_compare(
        rules=rules,
        out_dir=args.out,
        seeds=seeds,
        tuning_seeds=args.tune_seeds or [100 + seed for seed in seeds],
        tune_grid=args.tune_grid,
        settings=settings,
        criterion=args.tune_criterion,
        tolerance=args.tune_tolerance,
        validation_fraction=args.validation_fraction,
        baseline_rule=args.baseline or (recipe.baseline if recipe else None) or "fedavg",
        weights_rule=args.weights_label or (recipe.weights_label if recipe else None),
        title=args.title or (f"{recipe.title}, tuned" if recipe else None),
        description=_description(recipe, args),
        command=shlex.join(["fairfl", *argv]),
        **_run_options(args, workers),
        columns=args.columns or (recipe.columns if recipe else "table6"),
        reference=list(recipe.reference) if recipe else [],
        recipe=recipe.name if recipe else None,
    )
    print(report.text())
    print(f"report: {args.out / 'report.md'}; tuning: {args.out / 'tuning.md'}")
    runs = [
        *((read_manifest(args.out / "tuning") or {}).get("runs", [])),
        *((read_manifest(args.out) or {}).get("runs", [])),
    ]
    failed = [run["dir"] for run in runs if run.get("status") == "failed"]
    if failed:
        print(f"fairfl compare --tune: {len(failed)} of {len(runs)} runs failed", file=sys.stderr)
        return EXIT_FAILED
    return 0


def _present(label: str | None, rules: list[str], grid: list[str]) -> str | None:
    """A recipe's label if the (possibly narrowed) rules still produce it."""
    if label is None:
        return None
    rule = label.split("[")[0]
    if rule not in rules or ("[" in label and not grid):
        return None
    return label
