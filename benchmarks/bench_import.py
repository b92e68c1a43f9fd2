"""Import time of fairfl's strategies against Flower's, each in a fresh interpreter.

A server that aggregates imports ``fairfl.strategies``; its goal is at most 2x the time of
``import flwr.serverapp.strategy`` (which it builds on). ``import fairfl.client`` (torch)
and ``import fairfl.client.app`` (the ClientApp process's import: torch, flwr, fairfl's
data and models; no SciPy, scikit-learn, pandas or strategies) are measured for
information. Each sample is a new ``python -c`` process timing its one
import with ``time.perf_counter`` (interpreter start-up left out); after one untimed round
(bytecode caches, page cache) the targets are interleaved and the best of ``--repeats``
is kept, so drifting load hits all alike. ``--json PATH`` also writes the result. Times
depend on the machine and its load; CI never gates on them.

    nice .venv/bin/python benchmarks/bench_import.py
    nice .venv/bin/python benchmarks/bench_import.py --repeats 10 --json /tmp/import.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "flwr.serverapp.strategy"
TARGETS = (BASELINE, "fairfl.strategies", "fairfl.client", "fairfl.client.app")
GOAL = 2.0  # fairfl.strategies / flwr.serverapp.strategy
ENV = {
    **os.environ,
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
}
PROBE = (
    "import time; started = time.perf_counter(); import {module}; "
    "print(time.perf_counter() - started)"
)


def import_seconds(module: str) -> float:
    """Seconds ``import module`` takes in a fresh interpreter started from the repository."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


def measure(modules: tuple[str, ...], repeats: int) -> dict[str, list[float]]:
    """Every module's samples, one untimed round first, then ``repeats`` interleaved rounds."""
    for module in modules:
        import_seconds(module)
    samples: dict[str, list[float]] = {module: [] for module in modules}
    for _ in range(repeats):
        for module in modules:
            samples[module].append(import_seconds(module))
    return samples


def main(argv: list[str] | None = None) -> dict:
    """Measure; print a table and return (and with ``--json``, write) the result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--json", "--out", dest="out", type=Path, default=None, help="also write the result here"
    )
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    print(f"load average before: {load_before}", flush=True)
    samples = measure(TARGETS, args.repeats)
    load_after = os.getloadavg()
    best = {module: min(values) for module, values in samples.items()}
    ratios = {module: best[module] / best[BASELINE] for module in TARGETS}

    print(f"\nimport time in a fresh interpreter, best of {args.repeats}")
    print("module".ljust(26) + "ms".rjust(9) + f"{'x ' + BASELINE}".rjust(30))
    for module in TARGETS:
        print(module.ljust(26) + f"{best[module] * 1e3:9.1f}" + f"{ratios[module]:30.2f}")
    met = ratios["fairfl.strategies"] <= GOAL
    print(
        f"\nfairfl.strategies: {ratios['fairfl.strategies']:.2f}x (goal <= {GOAL}x: "
        f"{'met' if met else 'missed'})"
    )
    print(f"load average after: {load_after}")

    result = {
        "benchmark": "benchmarks/bench_import.py",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": platform.python_version(),
        "flwr": version("flwr"),
        "torch": version("torch"),
        "cpu_count": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "repeats": args.repeats,
        "baseline": BASELINE,
        "goal_ratio": GOAL,
        "goal_met": met,
        "best_ms": {module: round(value * 1e3, 2) for module, value in best.items()},
        "ratio_to_baseline": {module: round(value, 3) for module, value in ratios.items()},
        "samples_ms": {m: [round(v * 1e3, 2) for v in values] for m, values in samples.items()},
    }
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
