"""Run every benchmark and write their results to ``docs/results/benchmarks.json``.

Each benchmark runs as its own process (``python benchmarks/<script> ... --json <tmp>``),
one after the other, so that none shares a process, a thread pool or the cores with
another; its JSON result is stored with the exact command, the wall time and the
1-minute load average before and after. ``--only`` reruns some of them and keeps the
others' stored results. The README's benchmark tables are generated from this file
(``benchmarks/readme_tables.py --write``), and ``tests/readme/test_readme_benchmarks.py``
fails when the two drift apart. CI never runs this: times depend on the machine and its
load, and only the ratios measured inside one benchmark run mean anything.

    nice .venv/bin/python benchmarks/run_all.py                 # everything (~40 min)
    nice .venv/bin/python benchmarks/run_all.py --only fedmgda aggregate_loss_rules
    nice .venv/bin/python benchmarks/run_all.py --list
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without `pip install -e .`

from _report import load_1min, machine  # noqa: E402 (after sys.path)

RESULTS = ROOT / "docs" / "results" / "benchmarks.json"

#: ``bench_aggregate_loss_rules.py`` and its arguments.
LOSS_RULES = ["benchmarks/bench_aggregate_loss_rules.py", "--repeats", "7"]
#: name -> the script and its arguments (``--json PATH`` is appended).
BENCHMARKS: dict[str, list[str]] = {
    # The same harness three times: the environments differ (ENVIRONMENTS).
    "aggregate_loss_rules": LOSS_RULES,
    "aggregate_loss_rules_numpy_gram": LOSS_RULES,
    "aggregate_loss_rules_numpy_gram_openblas_haswell": LOSS_RULES,
    "fedmgda": ["benchmarks/bench_fedmgda.py", "--repeats", "7"],
    "gram_kernel": ["benchmarks/bench_gram_kernel.py", "--repeats", "7"],
    "aggregate_all_rules": ["benchmarks/bench_aggregate_all_rules.py", "--repeats", "3"],
    "client_epoch": ["benchmarks/bench_client_epoch.py"],
    "import_time": ["benchmarks/bench_import.py", "--repeats", "5"],
    "cli_startup": ["benchmarks/bench_cli_startup.py", "--repeats", "7"],
    "run_vs_compare": ["benchmarks/bench_run_vs_compare.py", "--repeats", "3"],
    "client_start": ["benchmarks/bench_client_start.py", "--repeats", "5"],
    "scale": ["benchmarks/bench_scale.py", "--runtimes", "inprocess"],
    "telemetry": ["benchmarks/bench_telemetry.py"],
    "dashboard": ["benchmarks/bench_dashboard.py"],
    "deployment_round_time": [
        "benchmarks/deployment_round_time.py",
        *("--supernodes", "3", "10", "--rounds", "3", "--repeats", "2", "--before-sizes", "3"),
    ],
}

#: The code issue #17 ("Speed at the floor") measured: the commit before its first change
#: (b425437, one pass over the replies). It came before the lean ClientApp (e406281),
#: whose own parent does not import (``fairfl.settings`` needs a module added after it).
BEFORE_COMMIT = "9244a23"
#: Benchmarks that also time that commit's app (``--before DIR``, a ``git archive`` of it).
WITH_BEFORE = ("client_start", "deployment_round_time")

#: Variables each entry's name selects (suffix -> variable and value), added to its
#: process's environment: ``_numpy_gram`` forms FedMGDA+'s Gram with numpy instead of the
#: compiled kernel (``fairfl/strategies/_ops/gram_kernel.py``), as where no C compiler is
#: found; ``_openblas_haswell`` runs OpenBLAS's Haswell (AVX2) kernels, which the README
#: advises for numpy's Gram on AMD Zen 4 (``fairfl/strategies/_ops/blas.py``; OpenBLAS
#: reads the variable when it loads, so it is set on the benchmark's process).
NAME_VARIABLES: dict[str, tuple[str, str]] = {
    "_numpy_gram": ("FAIRFL_GRAM_KERNEL", "numpy"),
    "_openblas_haswell": ("OPENBLAS_CORETYPE", "Haswell"),
}
#: The variables an entry's name sets or, when it does not, leaves unset.
CHOSEN_BY_NAME = frozenset(variable for variable, _ in NAME_VARIABLES.values())
#: name -> variables added to the benchmark process's environment.
ENVIRONMENTS: dict[str, dict[str, str]] = {
    name: dict(value for part, value in NAME_VARIABLES.items() if part in name)
    for name in BENCHMARKS
    if any(part in name for part in NAME_VARIABLES)
}


def command(name: str) -> str:
    """The shell command that runs benchmark ``name``: its environment first, and for the
    :data:`WITH_BEFORE` ones the checkout of :data:`BEFORE_COMMIT` they compare against."""
    environment = ENVIRONMENTS.get(name, {})
    prefix = "".join(f"{key}={shlex.quote(value)} " for key, value in environment.items())
    line = prefix + "nice .venv/bin/python " + shlex.join(BENCHMARKS[name])
    if name in WITH_BEFORE:
        checkout = f'BEFORE=$(mktemp -d) && git archive {BEFORE_COMMIT} | tar -x -C "$BEFORE" && '
        line = checkout + line + ' --before "$BEFORE"'
    return line


def checkout_before(folder: Path) -> Path:
    """Extract :data:`BEFORE_COMMIT`'s tree into ``folder/before``; return that path."""
    target = folder / "before"
    target.mkdir()
    archive = subprocess.run(
        ["git", "archive", BEFORE_COMMIT], cwd=ROOT, check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def run_one(name: str, timeout: float) -> dict[str, Any]:
    """Run benchmark ``name`` in its own process; its result with how it was run."""
    with tempfile.TemporaryDirectory(prefix=f"fairfl-bench-{name}-") as folder:
        out = Path(folder) / "result.json"
        argv = [*BENCHMARKS[name], "--json", str(out)]
        if name in WITH_BEFORE:
            argv += ["--before", str(checkout_before(Path(folder)))]
        environment = ENVIRONMENTS.get(name, {})
        shell = command(name)
        print(f"=== {name}: {shell}", flush=True)
        load_before = load_1min()
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, *argv],
            cwd=ROOT,
            timeout=timeout,
            check=False,
            # A default entry runs with OpenBLAS's own kernel choice and fairfl's default
            # Gram path, whatever the caller set.
            env={
                **{k: v for k, v in os.environ.items() if k not in CHOSEN_BY_NAME},
                **environment,
            },
        )
        wall = time.perf_counter() - started
        if done.returncode != 0 or not out.is_file():
            raise RuntimeError(f"benchmark {name} failed (exit {done.returncode}): {shell}")
        result = json.loads(out.read_text(encoding="utf-8"))
    print(f"=== {name}: {wall:.0f} s", flush=True)
    return {
        "command": shell,
        "environment": environment,
        **({"before_commit": BEFORE_COMMIT} if name in WITH_BEFORE else {}),
        "machine": machine(),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "wall_s": round(wall, 1),
        "load_1min_before": load_before,
        "load_1min_after": load_1min(),
        "result": result,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmarks asked for; merge them into the results file and return it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=sorted(BENCHMARKS), default=None)
    parser.add_argument("--out", type=Path, default=RESULTS, help="the results file")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per benchmark")
    parser.add_argument("--list", action="store_true", help="print the benchmarks and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name in BENCHMARKS:
            print(f"{name:38s} {command(name)}")
        return {}
    stored: dict[str, Any] = (
        json.loads(args.out.read_text(encoding="utf-8")) if args.out.is_file() else {}
    )
    # Entries of benchmarks that run_all no longer has are dropped, not kept stale.
    benchmarks = {k: v for k, v in stored.get("benchmarks", {}).items() if k in BENCHMARKS}
    for name in args.only or list(BENCHMARKS):
        benchmarks[name] = run_one(name, args.timeout)
        # Written after each one: a long run that fails later keeps what it measured.
        results = {"machine": machine(), "benchmarks": benchmarks}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return {"machine": machine(), "benchmarks": benchmarks}


if __name__ == "__main__":
    main(sys.argv[1:])
