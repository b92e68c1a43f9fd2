"""Per-round time and peak server memory at 10 to 10,000 clients, two runtimes.

Synthetic(1, 1) with one device per client, multinomial logistic regression, FedAvg,
full participation, 1 local epoch, ``--rounds`` rounds (2 by default: round 1 includes
warm-up, so round 2 is the steady per-round time). Per-round times come from the
``wall_time`` stamps of ``rounds.jsonl``, which the server writes. The cost per client
(steady round time / clients) and a least-squares line through (clients, round time)
show whether the cost stays linear: ``linearity.per_client_spread`` is the largest over
the smallest cost per client among the sizes of at least 100 clients (1.0: linear).

- ``inprocess``: :func:`fairfl.simulation.run_inprocess` in a fresh Python process per
  size; server and clients share that process, so "server memory" is the process's peak
  RSS (``ru_maxrss``) minus its RSS after imports: everything the run held, clients'
  data and models included.
- ``flwr``: Flower's simulation engine (SuperLink + Ray) through
  :func:`fairfl.simulation.engine.run_simulation`, one CPU per client; the ServerApp
  process's peak RSS (``VmHWM`` of the ``flwr-serverapp`` process, polled from /proc) and
  the peak RSS summed over the whole SuperLink process tree (Ray included).

A size that exceeds ``--timeout`` seconds is reported as such (on 2 shared cores Ray
runs two ClientApps at a time). ``--fairfl-path`` times another checkout's fairfl (in
process only), e.g. the commit before a change.

    nice .venv/bin/python benchmarks/bench_scale.py --json /tmp/scale.json
    nice .venv/bin/python benchmarks/bench_scale.py --runtimes inprocess --clients 10 100
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from _scale import child_run_inprocess, measure_child, round_times, status_kb, synthetic_fedavg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")


def measure_inprocess(
    num_clients: int, rounds: int, timeout: float, work: Path, fairfl_path: Path = ROOT
) -> dict:
    out_dir = work / f"inprocess-{num_clients}"
    command = [
        sys.executable,
        __file__,
        "--child",
        str(num_clients),
        "--rounds",
        str(rounds),
        "--out",
        str(out_dir),
        "--fairfl-path",
        str(fairfl_path),
    ]
    return measure_child(command, out_dir, timeout)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _short_name(cmdline: str) -> str:
    """``flwr-simulation``, ``raylet``, ``ray::ClientAppActor``...: what a process is."""
    parts = cmdline.split()
    if not parts:
        return "?"
    for part in parts[:3]:
        base = Path(part).name
        if base.startswith(("flwr", "flower", "ray", "gcs", "raylet")):
            return base
    return Path(parts[0]).name


def measure_flwr(
    num_clients: int, rounds: int, timeout: float, work: Path, fairfl_path: Path = ROOT
) -> dict:
    from fairfl.simulation.engine import descendants, run_simulation, toml_overrides

    out_dir = work / f"flwr-{num_clients}"
    peaks: dict[str, int] = {"tree_kb": 0}
    by_name: dict[str, int] = {}
    stop = threading.Event()

    def watch(superlink) -> None:
        def poll() -> None:
            while not stop.is_set():
                family = [superlink.pid, *descendants(superlink.pid)]
                peaks["tree_kb"] = max(
                    peaks["tree_kb"], sum(status_kb(p, "VmRSS:") for p in family)
                )
                for pid in family:
                    name = _short_name(_cmdline(pid))
                    by_name[name] = max(by_name.get(name, 0), status_kb(pid, "VmHWM:"))
                time.sleep(0.5)

        threading.Thread(target=poll, daemon=True).start()

    started = time.perf_counter()
    log_path = work / f"flwr-{num_clients}.log"
    try:
        with log_path.open("wb") as log:
            code = run_simulation(
                toml_overrides(synthetic_fedavg(num_clients, rounds, out_dir)),
                num_clients,
                work / f"flwr-home-{num_clients}",
                timeout=timeout,
                output=log,
                superlink_started=watch,
            )
    except subprocess.TimeoutExpired:
        code = None
    finally:
        stop.set()
    result = {
        "total_s": time.perf_counter() - started,
        "round_s": round_times(out_dir),
        # In simulation the ServerApp runs inside the `flwr-simulation` process (with
        # the Ray driver); its peak is the server's.
        "serverapp_peak_mb": max(
            (kb for name, kb in by_name.items() if "simulation" in name or "serverapp" in name),
            default=0,
        )
        / 1024,
        "tree_peak_mb": peaks["tree_kb"] / 1024,
        "peaks_mb": {name: round(kb / 1024) for name, kb in sorted(by_name.items())},
    }
    if code is None:
        result["error"] = f"over {timeout:.0f} s"
    elif code != 0:
        result["error"] = f"flwr run exited with {code}; see {log_path}"
    return result


def linearity(sizes: list[int], seconds: list[float]) -> dict:
    """How linear the steady round time is in the number of clients.

    A least-squares line ``seconds = a + b * clients`` and the cost per client of each
    size; ``per_client_spread`` is the largest over the smallest cost per client among
    the sizes of at least 100 clients (below that, the round's fixed cost dominates):
    1.0 is perfectly linear.
    """
    if len(sizes) < 2:
        return {}
    slope, intercept = (float(v) for v in np.polyfit(sizes, seconds, 1))
    per_client = {n: 1e3 * t / n for n, t in zip(sizes, seconds, strict=True)}
    large = [ms for n, ms in per_client.items() if n >= 100]
    return {
        "per_client_ms_fit": round(slope * 1e3, 4),
        "intercept_s": round(intercept, 4),
        "per_client_ms": {str(n): round(ms, 3) for n, ms in per_client.items()},
        "per_client_spread": round(max(large) / min(large), 3) if len(large) >= 2 else None,
    }


def main(argv: list[str] | None = None) -> dict:
    """Run the sizes; print one line each, write ``--json`` if given, return the result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtimes", nargs="+", default=["inprocess", "flwr"])
    parser.add_argument(
        "--clients",
        nargs="+",
        type=int,
        default=None,
        help="sizes (default: 10 100 1000 10000 in process, 10 100 1000 on Flower)",
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per size")
    parser.add_argument("--work", type=Path, default=None, help="scratch folder")
    parser.add_argument("--json", type=Path, default=None, help="write the result here")
    parser.add_argument("--fairfl-path", type=Path, default=ROOT, help="checkout to time")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        sys.path.insert(0, str(args.fairfl_path.resolve()))
        child_run_inprocess(synthetic_fedavg(args.child, args.rounds, args.out))
        return {}
    work = args.work or Path(tempfile.mkdtemp(prefix="fairfl-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"Synthetic(1,1), logistic regression, FedAvg, {args.rounds} rounds; work dir {work}")
    load_before = os.getloadavg()
    print(f"load average before: {load_before}", flush=True)
    results: dict[str, dict[str, dict]] = {}
    for runtime in args.runtimes:
        results[runtime] = {}
        default = [10, 100, 1000, 10000] if runtime == "inprocess" else [10, 100, 1000]
        for num_clients in args.clients or default:
            measure = measure_inprocess if runtime == "inprocess" else measure_flwr
            result = measure(num_clients, args.rounds, args.timeout, work, args.fairfl_path)
            if result.get("round_s") and len(result["round_s"]) == args.rounds:
                result["steady_round_s"] = result["round_s"][-1]
                result["per_client_ms"] = 1e3 * result["round_s"][-1] / num_clients
            results[runtime][str(num_clients)] = result
            rounds = ", ".join(f"{t:.2f}" for t in result.get("round_s", []))
            memory = (
                f"run {result['run_mb']:.0f} MB (process peak {result['peak_mb']:.0f} MB)"
                if "run_mb" in result
                else f"serverapp peak {result.get('serverapp_peak_mb', 0):.0f} MB, "
                f"process tree peak {result.get('tree_peak_mb', 0):.0f} MB; per process "
                f"{result.get('peaks_mb')}"
            )
            line = (
                f"{runtime:9s} {num_clients:5d} clients: per-round s [{rounds}]"
                + (
                    f", {result['per_client_ms']:.2f} ms/client"
                    if "per_client_ms" in result
                    else ""
                )
                + (f", total {result['total_s']:.1f} s" if "total_s" in result else "")
                + f"; {memory}"
            )
            if "error" in result:
                line += f"; ERROR {result['error']}"
            print(line, flush=True)
    fits = {}
    for runtime, by_size in results.items():
        done = [(int(n), r["steady_round_s"]) for n, r in by_size.items() if "steady_round_s" in r]
        fits[runtime] = linearity([n for n, _ in done], [t for _, t in done])
        if fits[runtime]:
            spread = fits[runtime]["per_client_spread"]
            print(
                f"{runtime}: round s = {fits[runtime]['intercept_s']:.3f} + "
                f"{fits[runtime]['per_client_ms_fit']:.3f} ms x clients; cost per client "
                f"(>= 100 clients) varies by a factor {spread}"
            )
    load_after = os.getloadavg()
    print(f"load average after: {load_after}")
    output = {
        "benchmark": "benchmarks/bench_scale.py",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "fairfl_path": str(args.fairfl_path.resolve()),
        "task": "Synthetic(1,1), logreg, FedAvg, 1 local epoch, full participation",
        "rounds": args.rounds,
        "results": results,
        "linearity": fits,
    }
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(output, indent=2) + "\n")
        print(f"wrote {args.json}")
    return output


if __name__ == "__main__":
    main()
