"""Start-up time of the ``fairfl`` command against ``python -c "import flwr"``.

``fairfl --help`` (the console script, a fresh process) should cost at most 2x a fresh
``python -c "import flwr"`` (issue 36): the CLI builds its parser from the standard
library alone and each subcommand imports what it needs, so a typo or ``--help`` does
not load torch and matplotlib. Each sample is the wall time of a whole process
(interpreter start-up included, as a user waits for it); after one untimed round (bytecode
and page caches) the two commands are interleaved and the best of ``--repeats`` kept, so
drifting load hits both alike. ``fairfl verify`` on a small run folder is timed too, for
information. Times depend on the machine and its load; CI never gates on them.

    nice .venv/bin/python benchmarks/bench_cli_startup.py --repeats 7 --json /tmp/cli.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without `pip install -e .`

from _report import write_json  # noqa: E402 (after sys.path)

GOAL = 2.0  # fairfl --help / python -c "import flwr"
ENV = {
    **os.environ,
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
}


def fairfl_command() -> list[str]:
    """The ``fairfl`` console script next to this interpreter, else ``python -m fairfl``."""
    script = Path(sys.executable).with_name("fairfl")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "fairfl"]


def small_run(folder: Path) -> Path:
    """A two-round run folder with a valid ledger, for ``fairfl verify``."""
    from fairfl.telemetry.ledger import GENESIS, chain, encode_line, line_sha256, seal_summary

    run = folder / "run"
    run.mkdir()
    previous, lines = GENESIS, []
    for round_ in (1, 2):
        line = encode_line(chain({"round": round_}, previous, "c" * 64))
        lines.append(line)
        previous = line_sha256(line)
    (run / "rounds.jsonl").write_text("".join(f"{line}\n" for line in lines))
    summary = seal_summary({"ledger": {"lines": 2, "head_sha256": previous}})
    (run / "summary.json").write_text(json.dumps(summary))
    return run


def seconds(argv: list[str]) -> float:
    """Wall seconds of one fresh process running ``argv`` (which must exit 0)."""
    started = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, env=ENV, capture_output=True, check=True)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> dict:
    """Measure; print a table and return (and with ``--json``, write) the result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", dest="out", type=Path, default=None, help="write it here")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="fairfl-cli-bench-"))
    try:
        commands = {
            'python -c "import flwr"': [sys.executable, "-c", "import flwr"],
            "fairfl --help": [*fairfl_command(), "--help"],
            "fairfl verify": [*fairfl_command(), "verify", str(small_run(folder))],
        }
        load_before = os.getloadavg()
        for command in commands.values():
            seconds(command)  # untimed: caches
        samples: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.repeats):
            for name, command in commands.items():
                samples[name].append(seconds(command))
        load_after = os.getloadavg()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    best = {name: min(values) for name, values in samples.items()}
    baseline = best['python -c "import flwr"']
    ratios = {name: value / baseline for name, value in best.items()}
    print(f"wall time of a fresh process, best of {args.repeats}")
    for name in commands:
        print(f"{name:28s}{best[name] * 1e3:9.1f} ms{ratios[name]:8.2f}x")
    met = ratios["fairfl --help"] <= GOAL
    print(
        f"fairfl --help: {ratios['fairfl --help']:.2f}x import flwr (goal <= {GOAL}x: "
        f"{'met' if met else 'missed'})"
    )
    result = {
        "benchmark": "benchmarks/bench_cli_startup.py",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": platform.python_version(),
        "flwr": version("flwr"),
        "cpu_count": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "repeats": args.repeats,
        "baseline": 'python -c "import flwr"',
        "goal_ratio": GOAL,
        "goal_met": met,
        "best_ms": {name: round(value * 1e3, 2) for name, value in best.items()},
        "ratio_to_baseline": {name: round(value, 3) for name, value in ratios.items()},
        "samples_ms": {n: [round(v * 1e3, 2) for v in values] for n, values in samples.items()},
    }
    if args.out is not None:
        write_json(args.out, result)
        print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
