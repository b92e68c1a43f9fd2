"""Cross-device scale: Flower's simulation engine at 1,000 to 10,000 SuperNodes.

One federation, run on each size through Flower's simulation engine (``flwr run`` on a
local simulation SuperLink with ``num-supernodes`` = N, via
:func:`fairfl.simulation.engine.simulate`) and through fairfl's in-process runner
(:func:`fairfl.simulation.run_inprocess`, a fresh Python process per size):
Synthetic(1, 1), natural partition (device k is node k), multinomial logistic
regression, FedAvg, ``--sampled`` nodes (100) trained and evaluated per round
(``fraction-train`` = ``fraction-evaluate`` = 100 / N), 1 local epoch, ``--rounds``
rounds (3). Per-round seconds come from the ``wall_time`` stamps of ``rounds.jsonl``
(round 1 includes Ray's actors starting); "steady" is the mean of the later rounds.

Memory, polled every second from ``/proc`` (``VmHWM``, the peak RSS of each process):
the server is ``flower-superlink`` plus ``flwr-simulation`` (in simulation the ServerApp
runs as a thread of that process, beside the engine that holds every simulated node's
context and the in-memory link state); the clients are Ray's ClientApp actors; Ray's own
daemons are listed apart. In process, server and clients share one process: its peak
RSS (``ru_maxrss``).

``--profile`` samples every thread of ``flwr-simulation`` (``_thread_sampler.py``,
loaded through a generated ``sitecustomize.py``): CPU seconds per thread and the code
each thread was found running, so the result file says where the server's time goes.

The result (machine, versions, load average, command, wall time) goes to ``--json``;
``--render FILE`` prints the Markdown the docs site shows (Results > engine-scale,
``docs/site/_ext/generate_results.py``). Not part of CI: each size starts a SuperLink and
Ray, and 10,000 nodes take minutes.

    nice .venv/bin/python benchmarks/bench_engine_scale.py --profile \\
        --json docs/results/engine-scale.json
    .venv/bin/python benchmarks/bench_engine_scale.py --render docs/results/engine-scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _scale import child_run_inprocess, measure_child, round_times, status_kb, synthetic_fedavg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

#: Environment variable naming the folder the thread sampler writes to.
PROFILE_ENV = "FAIRFL_BENCH_PROFILE_DIR"
#: Seconds between two looks at the processes' memory.
POLL_S = 1.0


def run_config(nodes: int, sampled: int, rounds: int, out_dir: Path) -> dict[str, Any]:
    """The federation: ``sampled`` of ``nodes`` Synthetic(1, 1) devices per round."""
    fraction = sampled / nodes
    if int(nodes * fraction) != sampled:  # Flower samples int(connected * fraction)
        fraction = (sampled + 0.5) / nodes
    more = {"fraction-train": fraction, "fraction-evaluate": fraction, "node-wait-timeout": 1800.0}
    return synthetic_fedavg(nodes, rounds, out_dir, **more)


def sampled_per_round(out_dir: Path) -> list[dict[str, int]]:
    """How many nodes each round trained and evaluated (from ``rounds.jsonl``)."""
    path = out_dir / "rounds.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line).get("sampled", {}) for line in path.read_text().splitlines() if line]


def steady(rounds: list[float]) -> float | None:
    """Mean seconds of the rounds after the first (the first includes warm-up)."""
    later = rounds[1:]
    return sum(later) / len(later) if later else None


# ------------------------------------------------------------------ in process
def measure_inprocess(config: dict[str, Any], timeout: float) -> dict[str, Any]:
    """The in-process runner on ``config`` in a child process."""
    command = [sys.executable, __file__, "--child", json.dumps(config)]
    out_dir = Path(config["out-dir"])
    result = measure_child(command, out_dir, timeout)
    if "total_s" in result:
        result["sampled"] = sampled_per_round(out_dir)
    return result


# ------------------------------------------------------------------ Flower's engine
def role(pid: int) -> str:
    """What a process of the run is: superlink, superexec, simulation, client or ray."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "gone"
    names = [Path(a.decode(errors="replace")).name for a in argv[:3]]
    text = " ".join(names)
    if "flower-superlink" in names:
        return "superlink"
    if "flower-superexec" in names:
        return "superexec"
    if "flwr-simulation" in names:
        return "simulation"
    if "ClientAppActor" in text:
        return "client"
    return "ray"


class MemoryWatch:
    """Polls the run's processes every :data:`POLL_S` s: peak RSS per role and in all.

    The processes are the SuperLink's tree and every process carrying the run's
    ``FAIRFL_RUN_ID`` (Ray's daemons leave the tree).
    """

    def __init__(self) -> None:
        self.peak_kb: dict[str, int] = {}
        self.count: dict[str, int] = {}
        self.server_peak_kb = 0
        self.stop = threading.Event()
        self.first_seen: dict[str, float] = {}
        self.started = time.perf_counter()

    def watch(self, superlink: subprocess.Popen[bytes]) -> None:
        """The ``superlink_started`` callback of :func:`~fairfl.simulation.engine.simulate`."""
        threading.Thread(target=self._poll, args=(superlink.pid,), daemon=True).start()

    def _poll(self, superlink: int) -> None:
        from fairfl.simulation.engine import descendants, processes_of_run
        from fairfl.telemetry.stream import RUN_ID_ENV

        environ = Path(f"/proc/{superlink}/environ").read_bytes().split(b"\0")
        prefix = f"{RUN_ID_ENV}=".encode()
        run_id = next((e[len(prefix) :].decode() for e in environ if e.startswith(prefix)), "")
        while not self.stop.is_set():
            pids = {superlink, *descendants(superlink), *processes_of_run(run_id)}
            server_kb = 0
            counts: dict[str, int] = {}
            for pid in pids:
                kind = role(pid)
                if kind == "gone":
                    continue
                counts[kind] = counts.get(kind, 0) + 1
                self.first_seen.setdefault(kind, time.perf_counter() - self.started)
                self.peak_kb[kind] = max(self.peak_kb.get(kind, 0), status_kb(pid, "VmHWM:"))
                if kind in ("superlink", "simulation"):
                    server_kb += status_kb(pid, "VmRSS:")
            self.server_peak_kb = max(self.server_peak_kb, server_kb)
            for kind, count in counts.items():
                self.count[kind] = max(self.count.get(kind, 0), count)
            self.stop.wait(POLL_S)


def measure_flwr(
    config: dict[str, Any], nodes: int, timeout: float, work: Path, profile: bool
) -> dict[str, Any]:
    """Flower's simulation engine on ``config`` with ``nodes`` SuperNodes."""
    from fairfl.simulation.engine import simulate, toml_overrides

    out_dir = Path(config["out-dir"])
    watch = MemoryWatch()
    profile_dir = work / f"profile-{nodes}"
    saved = {key: os.environ.get(key) for key in ("PYTHONPATH", PROFILE_ENV)}
    if profile:
        from _thread_sampler import sitecustomize_source

        profile_dir.mkdir(parents=True, exist_ok=True)
        (profile_dir / "sitecustomize.py").write_text(
            sitecustomize_source("flwr-simulation", PROFILE_ENV), encoding="utf-8"
        )
        os.environ[PROFILE_ENV] = str(profile_dir)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(profile_dir), saved["PYTHONPATH"]])
        )
    log_path = work / f"flwr-{nodes}.log"
    started = time.perf_counter()
    try:
        with log_path.open("wb") as log:
            outcome = simulate(
                toml_overrides(config),
                nodes,
                work / f"flwr-home-{nodes}",
                timeout=timeout,
                output=log,
                superlink_started=watch.watch,
                summary_path=out_dir / "summary.json",
            )
    finally:
        watch.stop.set()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    total = time.perf_counter() - started
    mb = {kind: round(kb / 1024, 1) for kind, kb in sorted(watch.peak_kb.items())}
    result: dict[str, Any] = {
        "total_s": total,
        "round_s": round_times(out_dir),
        "sampled": sampled_per_round(out_dir),
        "server_peak_mb": round(watch.server_peak_kb / 1024, 1),
        "peak_mb_by_role": mb,
        "processes_by_role": dict(sorted(watch.count.items())),
        "first_seen_s": {k: round(v, 1) for k, v in sorted(watch.first_seen.items())},
        "log": str(log_path),
    }
    if outcome.code != 0:
        result["error"] = f"exit {outcome.code}: {outcome.message}; see {log_path}"
    if profile:
        samples = sorted(profile_dir.glob("flwr-simulation-*.json"))
        if samples:
            result["profile"] = json.loads(samples[-1].read_text(encoding="utf-8"))
    return result


# ------------------------------------------------------------------ server start-up
def measure_startup(config: dict[str, Any], nodes: int) -> dict[str, Any]:
    """What the server does once per node before round 1, timed apart (in a child).

    - fairfl's partition check (:func:`fairfl.server.preflight.check_partitions`) as it
      is, and the draw of every device's size it made before it checked only the
      arguments of a synthetic federation (:func:`fairfl.data.partition_sizes`);
    - Flower's simulation engine, per SuperNode, reads and parses the app's
      ``pyproject.toml`` into that node's context (``DeprecatedRunInfoStore
      .register_context`` calls ``get_fused_config_from_dir``): its seconds and
      traced memory per node, over ``min(nodes, 200)`` calls.
    """
    command = [sys.executable, __file__, "--child-startup", json.dumps(config)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": (done.stderr or done.stdout)[-500:]}
    return {**json.loads(lines[-1]), "nodes": nodes}


def child_startup(config: dict[str, Any]) -> None:
    """Run in a fresh process: print one JSON line of :func:`measure_startup`'s timings."""
    import tracemalloc

    from flwr.common.config import get_fused_config_from_dir

    from fairfl.data import partition_sizes
    from fairfl.server.preflight import check_partitions
    from fairfl.settings import RunSettings

    settings = RunSettings.from_run_config(config)
    started = time.perf_counter()
    check_partitions(settings)
    check_s = time.perf_counter() - started
    started = time.perf_counter()
    partition_sizes(**settings.data_kwargs())
    every_device_s = time.perf_counter() - started
    calls = min(settings.num_partitions, 200)
    started, cpu_started = time.perf_counter(), time.process_time()
    contexts = [get_fused_config_from_dir(ROOT, {}) for _ in range(calls)]
    per_node_s = (time.perf_counter() - started) / calls
    per_node_cpu_s = (time.process_time() - cpu_started) / calls
    del contexts[1:]
    tracemalloc.start()  # apart from the timing: tracing slows every allocation
    kept = [get_fused_config_from_dir(ROOT, {}) for _ in range(calls)]
    per_node_kib = tracemalloc.get_traced_memory()[0] / len(kept) / 1024
    tracemalloc.stop()
    print(
        json.dumps(
            {
                "check_partitions_s": check_s,
                "every_device_size_s": every_device_s,
                "flower_node_config_ms": 1e3 * per_node_s,
                "flower_node_config_cpu_ms": 1e3 * per_node_cpu_s,
                "flower_node_config_kib": per_node_kib,
                "run_config_keys": len(contexts[0]),
            }
        )
    )


# ------------------------------------------------------------------ report
def _s(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _slope(points: list[tuple[int, float]]) -> float | None:
    """Least-squares slope of ``(nodes, value)`` per 1,000 nodes (None below 2 sizes)."""
    if len(points) < 2:
        return None
    mean_n = sum(n for n, _ in points) / len(points)
    mean_v = sum(v for _, v in points) / len(points)
    covariance = sum((n - mean_n) * (v - mean_v) for n, v in points)
    return 1000 * covariance / sum((n - mean_n) ** 2 for n, _ in points)


def _server_mb(run: dict[str, Any]) -> float | None:
    """Peak RSS of ``flower-superlink`` plus that of ``flwr-simulation`` (each its VmHWM).

    Not the polled sum of their RSS (``server_peak_mb``): a child that
    ``flwr-simulation`` forks shows its parent's command line and shared pages until it
    execs, and one such poll counted them twice.
    """
    peaks = run.get("peak_mb_by_role", {})
    if "simulation" not in peaks:
        return None
    return float(peaks.get("superlink", 0.0) + peaks["simulation"])


def _thread_cpu(run: dict[str, Any], prefix: str) -> float | None:
    threads = run.get("profile", {}).get("threads", {})
    found = [t["cpu_s"] for name, t in threads.items() if prefix in name]
    return sum(found) if found else None


def _runs(result: dict[str, Any]) -> list[str]:
    lines = [
        f"Measured {result['finished']} (fairfl {result.get('fairfl_commit', 'as committed')}"
        f"), load average {result['load_average_before'][0]:.1f} before and "
        f"{result['load_average_after'][0]:.1f} after, {result['wall_s'] / 60:.1f} min:",
        "",
        "```bash",
        result["command"],
        "```",
    ]
    for run in result.get("later_runs", []):
        measured = ", ".join(f"{n}: {' '.join(r)}" for n, r in run["measured"].items())
        lines += [
            "",
            f"Added {run['finished']} (fairfl {run['fairfl_commit']}; {measured}), load "
            f"average {run['load_average_before'][0]:.1f} before and "
            f"{run['load_average_after'][0]:.1f} after, {run['wall_s'] / 60:.1f} min:",
            "",
            "```bash",
            run["command"],
            "```",
        ]
    return lines


def render(result: dict[str, Any]) -> str:
    """The Markdown of a result file: the table, the ratios, where the time goes."""
    machine = result["machine"]
    by_size = {int(n): entry for n, entry in result["results"].items()}
    lines = [
        "# Cross-device scale: Flower's simulation engine against the in-process runner",
        "",
        f"{result['task']}; {machine['cpu']} ({machine['cores']} cores, shared with other "
        f"work: see the load averages), flwr {result['flwr']}, Ray {result['ray']}, torch "
        f"{result['torch']}, Python {machine['python']}. Each size ran once. "
        "`fairfl <commit>+` means the checkout had uncommitted work of others in `fairfl/`.",
        "",
        *_runs(result),
        "",
        "Seconds per round from the server's `rounds.jsonl` stamps: round 1 includes "
        "warm-up (Ray's actors start), *steady* is the mean of the later rounds; *simulation "
        "starts* is when the `flwr-simulation` process appeared, after the SuperLink started "
        "(`flwr run` builds and submits the app; this varies with the load, not the nodes). "
        "Server RSS: peak RSS (VmHWM) of `flower-superlink` plus that of "
        "`flwr-simulation` (the ServerApp is a thread of `flwr-simulation`, beside the "
        "engine holding every simulated node and Ray's driver); client: peak of one Ray "
        "ClientApp actor. In process, one process holds server and clients: its peak RSS.",
        "",
        "| SuperNodes | engine: simulation starts s | engine: round 1 s | engine: steady "
        "s/round | engine: server peak MB | engine: one client MB | in process: round 1 s "
        "| in process: steady s/round | in process: total s | in process: peak MB | steady "
        "round: engine / in process |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for nodes, entry in sorted(by_size.items()):
        flwr, local = entry.get("flwr", {}), entry.get("inprocess", {})
        if not flwr and not local:
            continue
        ratio = (
            f"{flwr['steady_s'] / local['steady_s']:.1f}x"
            if flwr.get("steady_s") and local.get("steady_s")
            else "–"
        )
        rounds_f, rounds_l = flwr.get("round_s") or [None], local.get("round_s") or [None]
        lines.append(
            f"| {nodes:,} | {_s(flwr.get('first_seen_s', {}).get('simulation'))} | "
            f"{_s(rounds_f[0])} | {_s(flwr.get('steady_s'))} | "
            f"{_server_mb(flwr) or 0:.0f} | "
            f"{flwr.get('peak_mb_by_role', {}).get('client', 0):.0f} | {_s(rounds_l[0])} | "
            f"{_s(local.get('steady_s'))} | {_s(local.get('total_s'))} | "
            f"{local.get('peak_mb', 0):.0f} | {ratio} |"
        )
    errors = [
        f"- {nodes:,} nodes, {runtime}: {entry[runtime]['error']}"
        for nodes, entry in sorted(by_size.items())
        for runtime in ("flwr", "inprocess", "startup")
        if "error" in entry.get(runtime, {})
    ]
    if errors:
        lines += ["", "Failed or cut short:", "", *errors]
    lines += _growth(by_size)
    lines += _startup(by_size)
    lines += _profile(by_size)
    return "\n".join(lines) + "\n"


def _growth(by_size: dict[int, dict[str, Any]]) -> list[str]:
    """Least-squares growth per 1,000 SuperNodes of what the table measures."""

    def engine(key: str) -> list[tuple[int, float]]:
        return [(n, e["flwr"][key]) for n, e in by_size.items() if e.get("flwr", {}).get(key)]

    def thread(prefix: str) -> list[tuple[int, float]]:
        return [
            (n, v)
            for n, e in by_size.items()
            if (v := _thread_cpu(e.get("flwr", {}), prefix)) is not None
        ]

    series = {
        "engine: server peak MB": [
            (n, v) for n, e in by_size.items() if (v := _server_mb(e.get("flwr", {})))
        ],
        "engine: round 1 s (Ray's actors start; the SuperNodes' contexts are built)": [
            (n, e["flwr"]["round_s"][0])
            for n, e in by_size.items()
            if e.get("flwr", {}).get("round_s")
        ],
        "engine: steady s/round": engine("steady_s"),
        "engine: CPU s of Flower's main thread (registers nodes, builds their contexts)": thread(
            "MainThread"
        ),
        "engine: CPU s of Flower's message loop (add_messages_to_queue)": thread(
            "add_messages_to_queue"
        ),
        "engine: CPU s of fairfl's ServerApp thread": thread("server_th_with_start_checks"),
        "in process: steady s/round": [
            (n, e["inprocess"]["steady_s"])
            for n, e in by_size.items()
            if e.get("inprocess", {}).get("steady_s")
        ],
        "in process: peak MB": [
            (n, e["inprocess"]["peak_mb"])
            for n, e in by_size.items()
            if "peak_mb" in e.get("inprocess", {})
        ],
    }

    def change(points: list[tuple[int, float]]) -> str:
        (_, first), (_, last) = min(points), max(points)
        return f"{first:.1f} → {last:.1f}"

    sizes = sorted(by_size)
    summary = (
        [
            "",
            f"From {sizes[0]:,} to {sizes[-1]:,} SuperNodes the engine's server peak RSS went "
            f"{change(series['engine: server peak MB'])} MB and its round 1 "
            f"{change(next(v for k, v in series.items() if k.startswith('engine: round 1')))} s; "
            "of `flwr-simulation`'s CPU seconds, Flower's main thread went "
            f"{change(thread('MainThread'))}, Flower's message loop "
            f"{change(thread('add_messages_to_queue'))} and fairfl's ServerApp thread "
            f"{change(thread('server_th_with_start_checks'))}. Per SuperNode, Flower's engine "
            "parses the app's `pyproject.toml` into a context of its own, held for the whole "
            "run (next section), and its message loop asks the link state for that node's "
            "messages every 0.1 s, in the process that runs the ServerApp and hands the "
            "messages to Ray. The sampled clients' work is the same at every size (the "
            "in-process column); where the engine's steady round grows with the nodes, it "
            "grows with that loop's CPU seconds.",
        ]
        if len(sizes) > 1
        and all(series[k] for k in ("engine: server peak MB", "engine: steady s/round"))
        and thread("MainThread")
        else []
    )
    rows = [
        f"| {name} | {', '.join(f'{v:.1f}' for _, v in sorted(points))} | {slope:+.2f} |"
        for name, points in series.items()
        if (slope := _slope(points)) is not None
    ]
    if not rows:
        return []
    return [
        "",
        "## What grows with the node count",
        "",
        "Least-squares slope over the sizes measured (one run each on a loaded machine: "
        "read the sign and the order of magnitude, not the digits).",
        "",
        "| measure | by size (ascending) | per 1,000 SuperNodes |",
        "| --- | --- | --- |",
        *rows,
        *summary,
    ]


def _startup(by_size: dict[int, dict[str, Any]]) -> list[str]:
    rows = [
        f"| {n:,} | {e['startup']['check_partitions_s']:.3f} | "
        f"{e['startup']['every_device_size_s']:.2f} | "
        f"{e['startup']['flower_node_config_cpu_ms']:.2f} | "
        f"{e['startup']['flower_node_config_cpu_ms'] * n / 1000:.1f} | "
        f"{e['startup']['flower_node_config_kib']:.1f} | "
        f"{e['startup']['flower_node_config_kib'] * n / 1024:.0f} |"
        for n, e in sorted(by_size.items())
        if "flower_node_config_cpu_ms" in e.get("startup", {})
    ]
    if not rows:
        return []
    keys = next(e["startup"]["run_config_keys"] for e in by_size.values() if "startup" in e)
    return [
        "",
        "## Per-node work before round 1",
        "",
        "fairfl's partition check as it is now (arguments only for a synthetic federation) "
        "and the draw of every device's size it made before; Flower's engine parsing the "
        f"app's `pyproject.toml` into each SuperNode's context ({keys} run-config keys), "
        "in CPU time per node (over up to 200 calls) and multiplied by the nodes (in a child "
        "process, not inside the engine).",
        "",
        "| SuperNodes | fairfl check s | before: every device's size s | Flower: CPU ms "
        "per node | Flower: CPU s for all nodes | Flower: KiB per node | Flower: MB for all "
        "nodes |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *rows,
    ]


def _profile(by_size: dict[int, dict[str, Any]]) -> list[str]:
    profiled = [
        (n, e["flwr"]["profile"])
        for n, e in sorted(by_size.items())
        if "profile" in e.get("flwr", {})
    ]
    if not profiled:
        return []
    lines = [
        "",
        "## Where the server's time goes",
        "",
        "CPU seconds of each thread of `flwr-simulation` over the whole run (from "
        "`/proc/self/task/*/stat`), and the code it was most often found running (sampled "
        f"every {profiled[0][1]['interval_s'] * 1000:.0f} ms by "
        "`benchmarks/_thread_sampler.py`; *site* is the innermost frame in Flower's, "
        "Ray's, torch's or fairfl's code). `add_messages_to_queue` is Flower's loop that, "
        "every 0.1 s, asks the link state for each SuperNode's next message, and each ask "
        "scans every stored message; `server_th_with_start_checks` runs fairfl's ServerApp; "
        "`MainThread` starts the engine, registers the SuperNodes and builds their contexts; "
        "the rest are Ray's and Flower's helper threads (the engine's workers wait on Ray).",
        "",
        "| SuperNodes | flwr-simulation CPU s | Flower's message loop | Flower's main thread "
        "| fairfl's ServerApp thread | the rest |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for nodes, profile in profiled:
        cpu = {name: thread["cpu_s"] for name, thread in profile["threads"].items()}
        total = sum(cpu.values())
        parts = [
            sum(v for name, v in cpu.items() if key in name)
            for key in ("add_messages_to_queue", "MainThread", "server_th_with_start_checks")
        ]
        shares = [*parts, total - sum(parts)]
        lines.append(
            f"| {nodes:,} | {total:.1f} | "
            + " | ".join(f"{v:.1f} s ({100 * v / total:.0f} %)" for v in shares)
            + " |"
        )
    lines += [
        "",
        "The busiest threads and the code each was most often found running:",
        "",
        "| SuperNodes | thread | CPU s | running samples | most often running (samples) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for nodes, profile in profiled:
        for name, thread in list(profile["threads"].items())[:4]:
            site = ", ".join(
                f"`{where}` ({count})" for where, count in list(thread["site"].items())[:3]
            )
            lines.append(
                f"| {nodes:,} | {name} | {thread['cpu_s']:.1f} | "
                f"{thread['running_samples']} | {site} |"
            )
    return lines


def _commit() -> str:
    """The checkout's commit, ``+`` if its working tree differs (other work in progress)."""
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "diff", "--quiet", "HEAD", "--", "fairfl"], check=False
        ).returncode
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+" if dirty else "")


def merged(earlier: dict[str, Any], later: dict[str, Any]) -> dict[str, Any]:
    """``earlier`` with ``later``'s measurements added (same task), its run listed."""
    if (earlier["sampled"], earlier["rounds"]) != (later["sampled"], later["rounds"]):
        raise ValueError("--merge: the files measure different federations")
    result = {**earlier, "results": {k: dict(v) for k, v in earlier["results"].items()}}
    for nodes, by_runtime in later["results"].items():
        result["results"].setdefault(nodes, {}).update(by_runtime)
    run = {
        key: later[key]
        for key in ("command", "fairfl_commit", "finished", "load_average_before", "wall_s")
    }
    run["load_average_after"] = later["load_average_after"]
    run["measured"] = {nodes: sorted(r) for nodes, r in later["results"].items()}
    result["later_runs"] = [*earlier.get("later_runs", []), run]
    return result


def _versions() -> dict[str, str]:
    import flwr
    import ray
    import torch

    return {"flwr": flwr.__version__, "ray": ray.__version__, "torch": torch.__version__}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the sizes; print one line each and the table; write ``--json`` if given."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", nargs="+", type=int, default=[1000, 5000, 10000])
    parser.add_argument("--sampled", type=int, default=100, help="nodes per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runtimes", nargs="+", default=["inprocess", "flwr"])
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    parser.add_argument("--profile", action="store_true", help="sample flwr-simulation's threads")
    parser.add_argument("--work", type=Path, default=None, help="scratch folder")
    parser.add_argument("--json", type=Path, default=None, help="write the result here")
    parser.add_argument("--render", type=Path, default=None, help="print a result file's table")
    parser.add_argument(
        "--merge",
        type=Path,
        default=None,
        help="add this run's sizes and runtimes to an earlier result file (its commands kept)",
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-startup", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        child_run_inprocess(json.loads(args.child))
        return {}
    if args.child_startup is not None:
        child_startup(json.loads(args.child_startup))
        return {}
    if args.render is not None:
        print(render(json.loads(args.render.read_text(encoding="utf-8"))), end="")
        return {}
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _report import machine

    work = args.work or Path(tempfile.mkdtemp(prefix="fairfl-engine-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    load_before = os.getloadavg()
    print(f"work dir {work}; load average before {load_before}", flush=True)
    results: dict[str, dict[str, Any]] = {}
    for nodes in args.nodes:
        results[str(nodes)] = {}
        for runtime in args.runtimes:
            config = run_config(nodes, args.sampled, args.rounds, work / f"{runtime}-{nodes}")
            load = os.getloadavg()[0]
            if runtime == "startup":
                result = measure_startup(config, nodes)
                results[str(nodes)][runtime] = result
                print(f"startup   {nodes:6d} nodes: {result}", flush=True)
                continue
            if runtime == "flwr":
                result = measure_flwr(config, nodes, args.timeout, work, args.profile)
            else:
                result = measure_inprocess(config, args.timeout)
            result["load_1min_before"] = load
            result["steady_s"] = steady(result.get("round_s", []))
            results[str(nodes)][runtime] = result
            memory = (
                f"server peak {result.get('server_peak_mb', 0):.0f} MB, per role "
                f"{result.get('peak_mb_by_role')}"
                if runtime == "flwr"
                else f"process peak {result.get('peak_mb', 0):.0f} MB"
            )
            rounds = ", ".join(f"{t:.2f}" for t in result.get("round_s", []))
            print(
                f"{runtime:9s} {nodes:6d} nodes: rounds s [{rounds}], total "
                f"{result.get('total_s', 0):.1f} s; {memory}"
                + (f"; ERROR {result['error']}" if "error" in result else ""),
                flush=True,
            )
    output: dict[str, Any] = {
        "benchmark": "benchmarks/bench_engine_scale.py",
        "command": "nice .venv/bin/python benchmarks/bench_engine_scale.py "
        + shlex.join(argv if argv is not None else sys.argv[1:]),
        "fairfl_commit": _commit(),
        "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
        "platform": platform.platform(),
        **_versions(),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "wall_s": time.perf_counter() - started,
        "task": (
            f"Synthetic(1, 1), natural partition, logistic regression, FedAvg, {args.sampled} "
            f"nodes trained and evaluated per round, 1 local epoch, {args.rounds} rounds"
        ),
        "sampled": args.sampled,
        "rounds": args.rounds,
        "results": results,
    }
    if args.merge is not None:
        output = merged(json.loads(args.merge.read_text(encoding="utf-8")), output)
    print(render(output), end="")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(output, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return output


if __name__ == "__main__":
    main()
