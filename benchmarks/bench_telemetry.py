"""What all telemetry sinks together add to a round at 100 clients, against none.

Synthetic(1, 1), logistic regression, FedAvg, ``--clients`` clients (100) with full
participation, ``--rounds`` rounds, run in this process by
:func:`fairfl.simulation.run_inprocess` with ``telemetry = ""`` (only ``rounds.jsonl``,
as before) and with ``telemetry = "tensorboard,mlflow,wandb,prometheus"`` (W&B offline,
Prometheus on a free loopback port), in the order none, all, all, none, ... so that
drift in the machine's load falls on both alike. Two figures, both in the same run:

- ``end_to_end``: the median steady round (``wall_time`` differences of rounds 2..R in
  ``rounds.jsonl``; round 1 carries warm-up) with all sinks over the same without.
  On a shared machine this ratio carries the load's noise (a few %).
- ``record``: the time :meth:`RecordStream.record` takes for one 100-client round
  with all sinks minus with ``rounds.jsonl`` only (median of ``--records`` calls on the
  run's last entry), over the steady round without telemetry: the cost the sinks add,
  free of the training's noise.

Opening the sinks (W&B starts its service, MLflow imports) and closing them is once per
run, not per round; it is reported apart (``open_close_s``).

    nice .venv/bin/python benchmarks/bench_telemetry.py --json /tmp/telemetry.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _scale import synthetic_fedavg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("WANDB_SILENT", "true")

ALL_SINKS = "tensorboard,mlflow,wandb,prometheus"


def run_config(num_clients: int, rounds: int, out_dir: Path, telemetry: str) -> dict:
    more = {"telemetry-port": 0, "telemetry-max-clients": num_clients}
    return synthetic_fedavg(
        num_clients, rounds, out_dir, checkpoint=False, telemetry=telemetry, **more
    )


def steady_round_s(out_dir: Path) -> float:
    """Median of the ``wall_time`` differences of rounds 2..R."""
    stamps = [
        json.loads(line)["wall_time"]
        for line in (out_dir / "rounds.jsonl").read_text().splitlines()
    ]
    return statistics.median(b - a for a, b in itertools.pairwise(stamps))


def record_ms(entry: dict, telemetry: str, work: Path, repeats: int) -> tuple[float, float]:
    """Median ms of one ``RecordStream.record`` of ``entry``, and the open + close seconds."""
    from fairfl.telemetry.config import TelemetrySettings
    from fairfl.telemetry.sinks import build_sinks
    from fairfl.telemetry.stream import RecordStream

    settings = TelemetrySettings(
        telemetry=telemetry, telemetry_port=0, telemetry_max_clients=len(entry["clients"])
    )
    base = {k: v for k, v in entry.items() if k not in ("prev_sha256", "config_sha256")}
    started = time.perf_counter()
    stream = RecordStream(
        work / "rounds.jsonl",
        "0" * 64,
        build_sinks(settings, work, run_id="bench", run_config={}),
        max_clients=settings.telemetry_max_clients,
    )
    opened = time.perf_counter() - started
    times = []
    for step in range(1, repeats + 1):
        tick = time.perf_counter()
        stream.record({**base, "round": step})
        times.append(time.perf_counter() - tick)
    tick = time.perf_counter()
    stream.close()
    return 1e3 * statistics.median(times), opened + time.perf_counter() - tick


def main(argv: list[str] | None = None) -> dict:
    """Run the comparison; print it, write ``--json`` if given, return it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2, help="runs per configuration")
    parser.add_argument("--records", type=int, default=20, help="record() calls timed")
    parser.add_argument("--work", type=Path, default=None, help="scratch folder")
    parser.add_argument("--json", type=Path, default=None, help="write the result here")
    args = parser.parse_args(argv)
    from fairfl.simulation import run_inprocess

    work = args.work or Path(tempfile.mkdtemp(prefix="fairfl-telemetry-"))
    load_before = os.getloadavg()
    rounds: dict[str, list[float]] = {"none": [], "all": []}
    order = ["none", "all", "all", "none"] * args.repeats
    order = order[: 2 * args.repeats]
    last_entry: dict = {}
    for index, name in enumerate(order):
        out_dir = work / f"{index}-{name}"
        telemetry = ALL_SINKS if name == "all" else ""
        run_inprocess(run_config(args.clients, args.rounds, out_dir, telemetry))
        rounds[name].append(steady_round_s(out_dir))
        last_entry = json.loads((out_dir / "rounds.jsonl").read_text().splitlines()[-1])
        print(f"run {index + 1}/{len(order)} ({name}): steady round {rounds[name][-1]:.3f} s")
    jsonl_ms, _ = record_ms(last_entry, "", work / "record-jsonl", args.records)
    all_ms, open_close_s = record_ms(last_entry, ALL_SINKS, work / "record-all", args.records)
    none_s = statistics.median(rounds["none"])
    all_s = statistics.median(rounds["all"])
    result = {
        "clients": args.clients,
        "rounds": args.rounds,
        "sinks": ALL_SINKS,
        "steady_round_s": {"none": rounds["none"], "all": rounds["all"]},
        "end_to_end_added_pct": 100.0 * (all_s - none_s) / none_s,
        "record_ms": {"jsonl": jsonl_ms, "all": all_ms},
        "record_added_pct": 100.0 * (all_ms - jsonl_ms) / (1e3 * none_s),
        "open_close_s": open_close_s,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "work": str(work),
    }
    print(
        f"{args.clients} clients, steady round {none_s:.3f} s without telemetry, "
        f"{all_s:.3f} s with {ALL_SINKS}: {result['end_to_end_added_pct']:+.1f}% end to end; "
        f"record() {jsonl_ms:.1f} ms (rounds.jsonl) vs {all_ms:.1f} ms (all sinks): "
        f"{result['record_added_pct']:+.2f}% of a round; sinks open + close "
        f"{open_close_s:.1f} s once per run; load {load_before[0]:.1f} -> "
        f"{result['load_average_after'][0]:.1f}"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
