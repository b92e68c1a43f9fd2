"""The command line of ``scripts/flwr_sim.py``: one run on Flower's simulation engine.

Parses the runner's flags (SuperNodes, client resources, a Ray cluster, ``ray.init``
arguments, run config), refuses bad ones with exit 2 before anything starts, runs
:func:`fairfl.simulation.engine.simulate` and exits with its code.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from fairfl.simulation.engine import EXIT_OK, EXIT_USAGE, final_line, simulate
from fairfl.simulation.overrides import (
    federation_config,
    find_app_dir,
    parse_init_args,
    run_out_dir,
)
from fairfl.simulation.ray_probe import (
    CLUSTER_FILE,
    RAY_ADDRESS_ENV,
    check_ray_address,
    record_cluster,
)
from fairfl.simulation.signals import Stopped, stop_on_signals, stopped_message


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point of ``scripts/flwr_sim.py``; exits with the run's code.

    0: this run completed and its summary is printed; 1: the run failed or wrote no
    summary of its own; 2: bad arguments or run config; 124: ``--timeout`` passed;
    130/143: stopped by SIGINT/SIGTERM (everything it started is stopped first).
    """
    parser = argparse.ArgumentParser(
        description="Run fairfl through Flower's simulation engine and clean up after it."
    )
    parser.add_argument("--supernodes", type=int, default=20)
    parser.add_argument("--cpus-per-client", type=float, default=1)
    parser.add_argument(
        "--gpus-per-client",
        type=float,
        default=0.0,
        help="GPUs per ClientApp (fractional: 0.25 puts four clients on a GPU); Ray shows a "
        "ClientApp no GPU at 0",
    )
    parser.add_argument(
        "--ray-address",
        default=os.environ.get(RAY_ADDRESS_ENV) or None,
        help="run on this Ray cluster (host:port of its GCS; default: $RAY_ADDRESS); without "
        "it a private Ray starts and stops with the run",
    )
    parser.add_argument(
        "--init-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a ray.init argument for Flower (init-args-KEY), e.g. logging_level=30; "
        "num_cpus and num_gpus only without --ray-address",
    )
    parser.add_argument("--flwr-home", type=Path, default=None, help="default: <app>/.flwr-home")
    parser.add_argument("-c", "--run-config", default="")
    parser.add_argument(
        "--summary", type=Path, help="where the run writes summary.json (default: in out-dir)"
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds flwr run may take")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the results in out-dir (adds overwrite=true to the run config)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="resume although the checkpoint's run had other settings (adds resume-force=true)",
    )
    args = parser.parse_args(argv)
    if args.overwrite:
        args.run_config = f"{args.run_config} overwrite=true".strip()
    if args.force:
        args.run_config = f"{args.run_config} resume-force=true".strip()
    app = find_app_dir()
    flwr_home = args.flwr_home if args.flwr_home is not None else app / ".flwr-home"
    try:
        out_dir = args.summary.parent if args.summary else run_out_dir(args.run_config, app)
    except ValueError as error:
        print(f"flwr_sim: error: --run-config: {error}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    try:
        init_args = parse_init_args(args.init_arg)
        federation_config(
            args.supernodes,
            args.cpus_per_client,
            args.gpus_per_client,
            init_args,
            attached=args.ray_address is not None,
        )
        if args.ray_address is not None:
            check_ray_address(args.ray_address)
    except ValueError as error:
        print(f"flwr_sim: error: {error}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    try:
        with stop_on_signals():
            result = simulate(
                args.run_config,
                args.supernodes,
                flwr_home,
                args.cpus_per_client,
                args.timeout,
                app_dir=app,
                summary_path=out_dir / "summary.json",
                ray_address=args.ray_address,
                gpus_per_client=args.gpus_per_client,
                init_args=init_args,
            )
        if args.ray_address is not None:
            print(f"flwr_sim: {record_cluster(args.ray_address, out_dir / CLUSTER_FILE)}")
    except Stopped as stop:
        print(f"flwr_sim: {stopped_message(stop, out_dir)}", file=sys.stderr)
        sys.exit(stop.code)
    if result.code == EXIT_OK and result.summary is not None:
        print(final_line(result.summary))
    else:
        print(f"flwr_sim: error: {result.message}", file=sys.stderr)
    sys.exit(result.code)
