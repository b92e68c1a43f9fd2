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
import json
import logging
import os
import secrets
import shlex
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fairfl.extras import MODULE_EXTRAS, install_hint

if TYPE_CHECKING:
    from fairfl.server.preflight import CheckedRun

logger = logging.getLogger(__name__)

# The parser is built from these constants, not from the modules that own them, so
# that ``fairfl --help`` and ``fairfl verify`` import neither torch nor matplotlib
# (tests/cli checks each against its module).
#: Exit codes (fairfl.simulation.engine's EXIT_OK, EXIT_FAILED, EXIT_USAGE).
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
#: fairfl.report.compare.ENGINES and MAX_WORKERS.
ENGINES = ("inprocess", "flwr", "ray")
MAX_WORKERS = 2
#: fairfl.report.recipes.RECIPES, fairfl.report.tables.COLUMN_SETS.
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
#: fairfl.report.tune's CRITERIA, DEFAULT_CRITERION, DEFAULT_TOLERANCE,
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
#: Environment variable holding the dashboard's token.
TOKEN_ENV = "FAIRFL_DASHBOARD_TOKEN"
#: Shortest token accepted (a generated one has 32 characters).
MIN_TOKEN_LENGTH = 16


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``fairfl`` (imports nothing beyond the standard library)."""
    parser = argparse.ArgumentParser(
        prog="fairfl",
        description="Fair federated learning on Flower: run, compare, report, verify.",
        epilog="exit codes: 0 done; 1 a run failed or verify found a broken chain; 2 bad "
        "arguments, a run config that fails its checks, or a missing extra (the line "
        "names it); 130/143 stopped by SIGINT/SIGTERM",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log fairfl at INFO")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_run_parser(commands)

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
    run.add_argument("--rules", nargs="+", metavar="RULE", help="registered rules ('all': every)")
    run.add_argument("--grid", nargs="+", default=None, metavar="[RULE:]KEY=V1,V2")
    run.add_argument("--seeds", nargs="+", type=int, metavar="SEED")
    run.add_argument("--set", nargs="+", default=[], dest="settings", metavar="[RULE:]KEY=VALUE")
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
        "(fairfl.report.tune)",
    )
    tune.add_argument("--tune", action="store_true", help="tuned comparison")
    tune.add_argument(
        "--tune-seeds",
        nargs="+",
        type=int,
        metavar="SEED",
        help="tuning seeds, disjoint from --seeds (default: 100 + each of --seeds)",
    )
    tune.add_argument(
        "--tune-grid",
        nargs="+",
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

    report = commands.add_parser(
        "report", help="rebuild tables, plots and report.md from saved results"
    )
    report.add_argument("folder", type=Path)
    report.add_argument("--baseline")
    report.add_argument("--weights-of", dest="weights_label")
    report.add_argument("--columns", choices=COLUMN_SETS)
    report.add_argument("--title")

    verify = commands.add_parser(
        "verify",
        help="check the hash chain of a run's rounds.jsonl and summary.json, or of every "
        "run of a comparison (exit 1 naming the first bad round)",
    )
    verify.add_argument(
        "folder", type=Path, metavar="DIR", help="a run's out-dir or a compare --out"
    )
    commands.add_parser("rules", help="list registered rules and their run-config keys")
    commands.add_parser("recipes", help="list reproduction recipes")

    board = commands.add_parser(
        "dashboard",
        help="serve a live web page of runs' fairness (follows rounds.jsonl as it grows)",
        description=(
            "Follow each folder's rounds.jsonl (a run's out-dir, or a fairfl compare "
            "folder; it may not exist yet) and serve a page that updates every few seconds."
        ),
        epilog=(
            "Bound to loopback (the default) the page needs no token; from another machine "
            "use an SSH tunnel (deploy/README.md). Any other --host needs --allow-remote "
            "and a token: FAIRFL_DASHBOARD_TOKEN or --token-file (else one is generated "
            "and printed); open the printed URL with ?token=... once (a cookie keeps it) "
            "or send 'Authorization: Bearer <token>'."
        ),
    )
    board.add_argument("folders", nargs="+", type=Path, metavar="DIR")
    board.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    board.add_argument("--port", type=int, default=DASHBOARD_PORT, help="port (8050; 0: any)")
    board.add_argument(
        "--interval", type=float, default=2.0, help="seconds between checks for new rounds (2)"
    )
    board.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a --host other than loopback (a token is then required)",
    )
    board.add_argument("--token-file", type=Path, help="file whose first line is the token")
    return parser


def _add_run_parser(commands: Any) -> None:
    """``fairfl run``: one federation, the run-config keys as ``-c key=value``."""
    run = commands.add_parser(
        "run",
        help="run one federation (in this process, or through Flower's simulation engine)",
        description=(
            "Run one federation with fairfl's ServerApp and ClientApp. Every run-config key "
            "of [tool.flwr.app.config] (`fairfl rules` lists the rules' keys) can be set "
            "with -c key=value; everything is checked before the first round. Prints each "
            "round's fairness and the final line; results go to --out."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "examples:\n"
            "  fairfl run --strategy qffl -c num-server-rounds=5 qffl-q=1 --out results/q\n"
            "  fairfl run --engine flower -c dataset=digits num-partitions=10 --out results/f"
        ),
    )
    run.add_argument("--strategy", help="the rule (shorthand for -c strategy=RULE)")
    run.add_argument(
        "-c",
        "--run-config",
        nargs="+",
        default=[],
        dest="overrides",
        metavar="KEY=VALUE",
        help="run-config values; each takes the type of the key's default",
    )
    run.add_argument(
        "--out",
        type=Path,
        help="results folder (shorthand for -c out-dir=DIR; default outputs/latest)",
    )
    run.add_argument(
        "--engine",
        choices=RUN_ENGINES,
        default="inprocess",
        help="inprocess (default): no Ray, no network; flower: Flower's simulation "
        "engine with one SuperNode per partition (needs the [simulation] extra and the "
        "repository's pyproject.toml)",
    )
    run.add_argument(
        "--timeout", type=float, default=1800.0, help="seconds a flower-engine run may take"
    )
    run.add_argument(
        "--flwr-home",
        type=Path,
        help="FLWR_HOME of a flower-engine run (default: <app>/.flwr-home)",
    )
    run.add_argument(
        "--dashboard",
        nargs="?",
        const=DASHBOARD_PORT,
        type=int,
        metavar="PORT",
        help=f"serve the live dashboard on 127.0.0.1:PORT (default {DASHBOARD_PORT}) while "
        "the run goes",
    )
    run.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch threads of an in-process run (default 1, as fairfl compare's workers: "
        "a small model trains faster on one thread than on several contending ones; 0 "
        "keeps torch's default)",
    )
    run.add_argument("--quiet", action="store_true", help="no per-round progress lines")


def _configure_logging(verbose: bool) -> None:
    from fairfl.logs import attach_flower_console

    level = logging.INFO if verbose else logging.WARNING
    attach_flower_console(level)  # fairfl lines through Flower's console handler, once
    logging.getLogger("fairfl").setLevel(level)
    logging.getLogger("flwr").setLevel(logging.WARNING)


def _load_dashboard() -> Any:
    """``fairfl.dashboard``, or a usage error naming the extra to install."""
    try:
        import fairfl.dashboard as dashboard
    except ImportError as error:
        raise ValueError(
            f"the dashboard needs Dash and Plotly ({error}): pip install 'fairfl[dashboard]'"
        ) from error
    return dashboard


def _dashboard_token(args: argparse.Namespace) -> str | None:
    """The token from ``--token-file`` or ``FAIRFL_DASHBOARD_TOKEN`` (None if neither)."""
    if args.token_file is not None:
        lines = args.token_file.read_text(encoding="utf-8").splitlines()
        token = lines[0].strip() if lines else ""
        source = f"--token-file {args.token_file}"
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
        source = TOKEN_ENV
        if not token:
            return None
    if len(token) < MIN_TOKEN_LENGTH:
        raise ValueError(
            f"{source}: the token must have at least {MIN_TOKEN_LENGTH} characters, "
            f"got {len(token)}"
        )
    return token


def _run_dashboard(args: argparse.Namespace) -> int:
    dashboard = _load_dashboard()
    token = _dashboard_token(args)
    if token is None and args.allow_remote and not dashboard.is_loopback(args.host):
        token = secrets.token_urlsafe(24)
    dashboard.check_binding(args.host, allow_remote=args.allow_remote, token=token)
    app = dashboard.create_app(
        args.folders,
        interval_s=args.interval,
        token=token,
        loopback=dashboard.is_loopback(args.host),
    )
    try:
        server = dashboard.DashboardServer(app, args.host, args.port)
    except OSError as error:
        raise ValueError(f"--host {args.host} --port {args.port}: {error}") from error
    app.registry.refresh(time.monotonic())  # read what exists now, before the first page
    url = server.url + (f"?token={token}" if token else "")
    for folder in args.folders:
        if not folder.exists():  # allowed (a run about to start), but say so
            print(
                f"fairfl dashboard: {folder} does not exist (yet): the page shows its "
                "runs once one writes there",
                file=sys.stderr,
            )
    print(f"fairfl dashboard: {url} (Ctrl-C to stop)", flush=True)
    server.serve_forever()
    return 0


def _live_dashboard(program: str, folder: Path, port: int | None) -> Any:
    """``--dashboard``: the started server; else print the command, None."""
    if port is None:
        command = shlex.join(["fairfl", "dashboard", str(folder)])
        print(f"{program}: watch it live with: {command}", file=sys.stderr, flush=True)
        return None
    dashboard = _load_dashboard()
    try:
        server = dashboard.DashboardServer(dashboard.create_app([folder]), port=port)
    except OSError as error:
        raise ValueError(f"--dashboard {port}: {error}") from error
    print(f"{program}: live dashboard at {server.url}", file=sys.stderr, flush=True)
    return server.start()


def _run_compare(args: argparse.Namespace, argv: list[str]) -> int:
    from fairfl.report.compare import compare
    from fairfl.report.recipes import RECIPES
    from fairfl.report.results import read_manifest
    from fairfl.strategies.registry import STRATEGIES

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


def wait_for_interrupt() -> None:
    """Block until Ctrl-C (SIGINT) or SIGTERM; both end the wait as KeyboardInterrupt.

    Every run has ended by now, so the handlers that stop a comparison's processes give
    way to these for the wait, and come back after it.
    """

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = {n: signal.signal(n, interrupt) for n in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            time.sleep(3600)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _keep_serving(program: str, server: Any) -> None:
    """After a comparison: serve its finished results until the user stops the page.

    The page of ``--dashboard`` would otherwise vanish the moment the last run ends,
    just when its results are complete; the terminal says so and how to stop it.
    """
    print(
        f"{program}: finished; the dashboard keeps serving the results at {server.url} "
        "until you stop it (Ctrl-C)",
        file=sys.stderr,
        flush=True,
    )
    try:
        wait_for_interrupt()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    print(f"{program}: dashboard stopped", file=sys.stderr, flush=True)


def _run_config(args: argparse.Namespace) -> dict[str, Any]:
    """``fairfl run``'s run config: ``-c`` items, then ``--strategy`` and ``--out``.

    Relative folders are taken from the working directory (Flower's engine runs the
    ServerApp elsewhere).
    """
    from fairfl.server.config_values import parse_value

    config: dict[str, Any] = {}
    for item in args.overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"-c: expected key=value, got {item!r}")
        config[key.strip()] = parse_value(key.strip(), text)
    if args.strategy is not None:
        config["strategy"] = args.strategy
    if args.out is not None:
        config["out-dir"] = str(args.out)
    for key in ("out-dir", "resume-from", "data-root", "telemetry-dir"):
        if isinstance(config.get(key), str) and config[key]:
            config[key] = str(Path(config[key]).expanduser().absolute())
    return config


def _run_one(args: argparse.Namespace) -> int:
    """``fairfl run``: check everything, run one federation, print the final line."""
    # Light imports only until the run config is checked: a typo is refused before
    # torch or matplotlib load (tests/cli/test_run_imports.py).
    from fairfl.server.preflight import check_run, require_modules
    from fairfl.settings import RunSettings

    if args.torch_threads < 0:
        raise ValueError(f"--torch-threads must be >= 0, got {args.torch_threads}")
    config = _run_config(args)
    config.setdefault("out-dir", str(Path(RunSettings.out_dir).absolute()))
    if args.engine == "flower":
        require_modules({"ray": "--engine flower (Flower's simulation engine)"})
    checked = check_run(config, local_clients=True)  # the clients run on this machine
    out_dir = Path(checked.settings.out_dir)
    print(
        f"fairfl run: {checked.settings.strategy} on {checked.settings.dataset}, "
        f"{checked.settings.num_partitions} clients, {checked.settings.num_server_rounds} "
        f"rounds -> {out_dir}",
        file=sys.stderr,
        flush=True,
    )
    live = _live_dashboard("fairfl run", out_dir, args.dashboard)
    try:
        if args.engine == "flower":
            code, summary, message = _run_on_flower(config, checked.settings, args)
        else:
            code, summary, message = _run_in_process(
                config, checked, quiet=args.quiet, torch_threads=args.torch_threads
            )
    finally:
        if live is not None:
            live.stop()
    if summary is not None and code == EXIT_OK:
        from fairfl.simulation.engine import final_line

        print(final_line(summary))
        print(f"results: {out_dir / 'rounds.jsonl'} {out_dir / 'summary.json'}")
    else:
        print(f"fairfl run: error: {message}", file=sys.stderr)
    return code


def _run_in_process(
    config: dict[str, Any], checked: CheckedRun, *, quiet: bool, torch_threads: int
) -> tuple[int, Any, str]:
    """Run in this process; each round's fairness line is the progress.

    ``checked`` is ``config`` as :func:`_run_one` checked it: the runner uses its rule
    instead of checking the run and building the rule again.
    """
    import torch

    from fairfl.server.run import RunFailedError
    from fairfl.simulation import run_inprocess

    if torch_threads > 0:
        torch.set_num_threads(torch_threads)
    if not quiet:  # RoundLog logs one line per round at INFO
        logging.getLogger("fairfl.server").setLevel(logging.INFO)
    try:
        outcome = run_inprocess(config, checked=checked)
    except (RunFailedError, TimeoutError) as error:
        return EXIT_FAILED, None, f"{type(error).__name__}: {error}"
    return EXIT_OK, outcome.summary, ""


def _run_on_flower(
    config: dict[str, Any], settings: Any, args: argparse.Namespace
) -> tuple[int, Any, str]:
    """Run through Flower's simulation engine, one SuperNode per partition."""
    from fairfl.simulation.engine import find_app_dir, simulate, toml_overrides

    app = find_app_dir()
    result = simulate(
        toml_overrides(config),
        settings.num_partitions,
        args.flwr_home or app / ".flwr-home",
        timeout=args.timeout,
        app_dir=app,
        summary_path=Path(settings.out_dir) / "summary.json",
    )
    return result.code, result.summary, result.message


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
    from fairfl.report.tune import tune_and_compare

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


def _run_report(args: argparse.Namespace) -> int:
    from fairfl.report.build import build_report
    from fairfl.report.tune import write_tuning_markdown

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


def _verify_run(folder: Path, label: str) -> bool:
    """Print whether one run's ledger holds (stdout) or where it breaks (stderr)."""
    from fairfl.telemetry.ledger import ledger_file, verify_ledger

    report = verify_ledger(folder)
    path = ledger_file(folder)
    if report.ok:
        print(f"fairfl verify: {label}{path}: {report.rounds} rounds, chain intact")
        return True
    print(f"fairfl verify: {label}{path}: {report.problem}", file=sys.stderr)
    return False


def _has_ledger(folder: Path) -> bool:
    return (folder / "rounds.jsonl").exists() or (folder / "rounds.jsonl.gz").exists()


def _verify_comparison(folder: Path) -> int:
    """Verify every run a comparison's ``manifest.json`` lists (and its tuning runs)."""
    comparisons = [
        folder,
        *([folder / "tuning"] if (folder / "tuning" / MANIFEST_FILE).is_file() else []),
    ]
    checked = broken = 0
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
            elif not _verify_run(run_dir, label):
                broken += 1
    if broken:
        print(f"fairfl verify: {broken} of {checked} runs in {folder} failed", file=sys.stderr)
        return EXIT_FAILED
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
        return EXIT_OK if _verify_run(folder, "") else EXIT_FAILED
    if not any(folder.iterdir()):
        raise ValueError(f"{folder} is empty: no run has written results there")
    raise ValueError(
        f"{folder} holds no run (no rounds.jsonl) and no comparison (no {MANIFEST_FILE})"
    )


def _list_rules(args: argparse.Namespace) -> int:
    from fairfl.strategies.registry import STRATEGIES

    for name, spec in STRATEGIES.items():
        defaults = spec.defaults()
        keys = {key: defaults.get(key) for key in spec.parameters}
        settings = ", ".join(f"{k}={v!r}" for k, v in keys.items()) or "(no hyperparameters)"
        print(f"{name:14s} {spec.strategy.__name__:14s} {settings}")
    for name, reason in STRATEGIES.broken.items():  # a plug-in that failed to load
        print(f"{name:14s} {'(broken)':14s} {reason}")
    return EXIT_OK


def _list_recipes(args: argparse.Namespace) -> int:
    from fairfl.report.recipes import RECIPES

    for recipe in RECIPES.values():
        print(f"{recipe.name}: {recipe.title}\n    {recipe.description}\n")
    return EXIT_OK


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
                return _run_compare(args, argv)
        if args.command == "run":
            with _signals(args.command):
                return _run_one(args)
        commands = {
            "report": _run_report,
            "dashboard": _run_dashboard,
            "verify": _verify,
            "rules": _list_rules,
            "recipes": _list_recipes,
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


if __name__ == "__main__":
    sys.exit(main())
