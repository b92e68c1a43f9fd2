"""``fairfl run``: one federation, in this process or on Flower's simulation engine.

Its parser (every run-config key as ``-c key=value``), the run config it builds from the
flags, the up-front checks, and the two runners: in-process, or through Flower's
simulation engine with one SuperNode per partition.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fairfl.cli.common import DASHBOARD_PORT, EXIT_FAILED, EXIT_OK, RUN_ENGINES
from fairfl.cli.dashboard import _live_dashboard

if TYPE_CHECKING:
    from fairfl.server.preflight import CheckedRun


def add_parser(commands: Any) -> None:
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
        action="extend",
        default=[],
        dest="overrides",
        metavar="KEY=VALUE",
        help="run-config values; each takes the type of the key's default",
    )
    run.add_argument(
        "--out",
        type=Path,
        help="results folder (shorthand for -c out-dir=DIR; default a new "
        "outputs/<time>-<rule> per run, with outputs/latest pointing at the newest)",
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
    run.add_argument(
        "--strict",
        action="store_true",
        help="refuse a -c key the rule does not read (another rule's key), instead of "
        "warning and ignoring it",
    )


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
    fresh = "out-dir" not in config
    if fresh:  # a folder of its own, so a second run is never refused for the first's
        config["out-dir"] = str(per_run_out_dir(str(config.get("strategy", RunSettings.strategy))))
    if args.engine == "flower":
        require_modules({"ray": "--engine flower (Flower's simulation engine)"})
    try:
        checked = check_run(config, local_clients=True)  # the clients run on this machine
    except BaseException:
        if fresh:  # leave no empty folder behind a refused run
            with contextlib.suppress(OSError):
                Path(config["out-dir"]).rmdir()
        raise
    if fresh:
        point_latest(Path(config["out-dir"]))
    _unread_keys(checked.settings.strategy, args.overrides, strict=args.strict)
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


def per_run_out_dir(rule: str, root: Path = Path("outputs")) -> Path:
    """``outputs/<YYYYmmdd-HHMMSS>-<rule>`` (absolute), with ``-2``, ``-3`` ... if taken."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = "".join(c if c.isalnum() or c in "-_+." else "_" for c in rule) or "run"
    base = root.absolute() / f"{stamp}-{name}"
    candidate, count = base, 1
    while candidate.exists():
        count += 1
        candidate = base.with_name(f"{base.name}-{count}")
    return candidate


def point_latest(out_dir: Path) -> None:
    """Point ``<out_dir's parent>/latest`` at ``out_dir`` (a relative symlink, replaced atomically).

    A ``latest`` that is a real folder (results of an older fairfl's default) is left
    alone, with one line saying so.
    """
    link = out_dir.parent / "latest"
    if link.exists() and not link.is_symlink():
        print(f"fairfl run: {link} is a folder, not a link: left as it is", file=sys.stderr)
        return
    staging = link.with_name(f".latest-{os.getpid()}")
    staging.unlink(missing_ok=True)
    staging.symlink_to(out_dir.name)
    os.replace(staging, link)


def _unread_keys(rule: str, overrides: list[str], *, strict: bool) -> None:
    """Warn (``--strict``: refuse) about ``-c`` keys of another rule that ``rule`` ignores.

    Raises
    ------
    ValueError
        With ``strict``, naming the keys and the rule.
    """
    from fairfl.server.config_values import keys_not_read

    typed = [item.partition("=")[0].strip() for item in overrides]
    ignored = keys_not_read(rule, typed)
    if not ignored:
        return
    message = (
        f"{rule} does not read {', '.join(ignored)} (another rule's "
        f"key{'s' if len(ignored) > 1 else ''}: `fairfl rules` lists each rule's keys)"
    )
    if strict:
        raise ValueError(message)
    print(f"fairfl run: warning: {message}; ignored", file=sys.stderr, flush=True)


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
