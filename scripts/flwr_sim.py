"""Run fairfl through Flower's simulation engine (`flwr run .`) and clean up after it.

Starts its own simulation SuperLink on free loopback ports with a project-local
FLWR_HOME, submits the app with `flwr run . --stream`, waits for the results files, and
stops the SuperLink it started by PID (Flower's managed local SuperLink would otherwise
stay alive in the background). The logic lives in `fairfl.simulation.engine`, its
command line in `fairfl.simulation.engine_cli`.

Usage: python scripts/flwr_sim.py --supernodes 20 -c "num-server-rounds=20 out-dir='...'"
On a running Ray cluster: add --ray-address HOST:PORT (default: $RAY_ADDRESS); the
cluster is recorded in the out-dir's cluster.json (docs/site/howto/run-on-a-ray-cluster.md).

Exit codes: 0 the run completed (its own summary is printed, with its run id); 1 it
failed or wrote no summary of its own; 2 bad arguments; 124 --timeout passed; 130/143
stopped by SIGINT/SIGTERM (the SuperLink, SuperNodes and Ray stopped by PID first).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT))

from fairfl.simulation.engine import (  # noqa: E402
    descendants,
    flower_env,
    free_port,
    run_simulation,
    stop,
    wait_for_port,
)
from fairfl.simulation.engine_cli import main  # noqa: E402

__all__ = [
    "ROOT",
    "descendants",
    "flower_env",
    "free_port",
    "main",
    "run_simulation",
    "stop",
    "wait_for_port",
]

if __name__ == "__main__":
    main()
