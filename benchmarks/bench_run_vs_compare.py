"""Per-round time of ``fairfl run`` against the same run inside ``fairfl compare``.

Issue #50 measured ``fairfl run`` about 10x slower per round than the same run inside
``fairfl compare`` on a busy 2-core machine: compare's worker sets torch to one thread,
run left torch's default (one thread per core, contending with the machine's other work).
``fairfl run --torch-threads`` now defaults to compare's 1. This benchmark runs one
federation both ways (fresh processes, same run config, in-process engine) and compares
the mean ``wall_time`` of their rounds (``rounds.jsonl``: the round's own time, without
process start-up or imports); the goal is run / compare <= 1.2. ``fairfl run
--torch-threads 0`` (torch's default, the old behaviour) is timed too, for information.
Repeats alternate the commands, so drifting load hits all alike; the best of the repeats
is kept. CI never runs this: times depend on the machine and its load.

    nice .venv/bin/python benchmarks/bench_run_vs_compare.py --repeats 3 --json /tmp/r.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without `pip install -e .`

from _report import load_1min, machine, write_json  # noqa: E402 (after sys.path)

GOAL = 1.2  # fairfl run / fairfl compare, per round
#: The run of issue #50: 3 rounds of 20 clients on digits (fairfl's defaults otherwise).
SETTINGS = {"strategy": "fedavg", "num-server-rounds": "3", "num-partitions": "20", "seed": "0"}
ENV = {
    **os.environ,
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
}


def fairfl() -> list[str]:
    """The ``fairfl`` console script next to this interpreter, else ``python -m fairfl``."""
    script = Path(sys.executable).with_name("fairfl")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "fairfl"]


def mean_round_seconds(rounds_file: Path) -> float:
    """Mean ``wall_time`` of the rounds in a ``rounds.jsonl``."""
    times = [json.loads(line)["wall_time"] for line in rounds_file.read_text().splitlines()]
    return sum(times) / len(times)


def time_run(folder: Path, threads: int) -> float:
    """Mean round time of ``fairfl run --torch-threads threads``."""
    items = [f"{k}={v}" for k, v in SETTINGS.items() if k != "strategy"]
    argv = [*fairfl(), "run", "--strategy", SETTINGS["strategy"], "--quiet"]
    argv += ["--torch-threads", str(threads), "--out", str(folder), "-c", *items]
    subprocess.run(argv, cwd=ROOT, env=ENV, check=True, capture_output=True)
    return mean_round_seconds(folder / "rounds.jsonl")


def time_compare(folder: Path) -> float:
    """Mean round time of the same run inside ``fairfl compare`` (one worker)."""
    sets = [f"{k}={v}" for k, v in SETTINGS.items() if k not in ("strategy", "seed")]
    argv = [*fairfl(), "compare", "--rules", SETTINGS["strategy"], "--seeds", SETTINGS["seed"]]
    argv += ["--workers", "1", "--out", str(folder), "--set", *sets]
    subprocess.run(argv, cwd=ROOT, env=ENV, check=True, capture_output=True)
    (rounds_file,) = folder.glob("runs/*/seed-*/rounds.jsonl")
    return mean_round_seconds(rounds_file)


def main(argv: list[str] | None = None) -> dict:
    """Measure; print the ratios and return (and with ``--json``, write) the result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", dest="out", type=Path, default=None, help="write it here")
    args = parser.parse_args(argv)
    samples: dict[str, list[float]] = {"run": [], "run_torch_default": [], "compare": []}
    load_before = load_1min()
    with tempfile.TemporaryDirectory(prefix="fairfl-run-bench-") as scratch:
        for repeat in range(args.repeats):
            base = Path(scratch) / str(repeat)
            samples["compare"].append(time_compare(base / "compare"))
            samples["run"].append(time_run(base / "run", threads=1))
            samples["run_torch_default"].append(time_run(base / "run-default", threads=0))
    best = {name: min(values) for name, values in samples.items()}
    result = {
        "machine": machine(),
        "load_1min_before": load_before,
        "load_1min_after": load_1min(),
        "settings": SETTINGS,
        "repeats": args.repeats,
        "round_seconds": samples,
        "best_round_seconds": best,
        "ratio_run_to_compare": best["run"] / best["compare"],
        "ratio_run_torch_default_to_compare": best["run_torch_default"] / best["compare"],
        "goal": GOAL,
    }
    print(
        f"per round: compare {best['compare']:.3f} s, run {best['run']:.3f} s "
        f"({result['ratio_run_to_compare']:.2f}x, goal <= {GOAL}), run with torch's "
        f"default threads {best['run_torch_default']:.3f} s "
        f"({result['ratio_run_torch_default_to_compare']:.2f}x)"
    )
    if args.out is not None:
        write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
