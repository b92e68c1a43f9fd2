"""Dashboard page load with 1,000 clients x 500 rounds (goal: under 2 s), in headless Chromium.

Writes a synthetic ``rounds.jsonl`` shaped like an RC-FL run's (every client's
evaluation, its aggregation weight and its q_i, a dozen scalar diagnostics, one dropped
reply per round), serves it with ``fairfl dashboard``'s server in this process, and
measures:

- catch-up: the follower's first read of the whole file (once per server start, not per
  page load);
- server-side figures: building every figure of the page for the run (best of repeats),
  and those of the first view alone (what a page load builds);
- page load: from ``driver.get`` until the page's first view, the one a reader sees on
  opening it ("Fairness and clients": the fairness curves, the clients x rounds heat map
  with its 1,000 rows, the distribution), has every graph drawn with the server's
  figures and no callback pending. The other views (rule state, participation, config)
  are tabs, built and drawn when first opened, so they are timed apart:
- tab switch: from the click on "Rule state" until its graphs (the 1,000-row weights heat
  map, the diagnostics, the q_i heat map) are drawn.

The first load is cold (a fresh browser: Dash's and plotly.js's scripts not yet cached);
later loads reuse the browser cache, as reopening the page does. The goal is judged on
the cold load. Before each load the browser shows ``about:blank`` for ``--settle``
seconds (default 1), so that a just-started Chromium's own start-up work (about 0.5 s
of CPU on a busy 2-core machine) is not counted as the page's; ``--settle 0`` times it
too. The load average is printed before and after (the numbers move with
it). Needs Chromium and chromedriver (Debian's ``chromium``, ``chromium-driver``) and
Selenium.

    nice .venv/bin/python benchmarks/bench_dashboard.py
    nice .venv/bin/python benchmarks/bench_dashboard.py --clients 100 --rounds 50 --json /tmp/d.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from fairfl.dashboard import DashboardServer, create_app, figures
from fairfl.dashboard.app import CARTESIAN_BUNDLE, cartesian_bundle_matches
from fairfl.dashboard.browser import (
    HEATMAP_ROWS_JS,
    RENDERED_JS,
    chromium,
    find_chromium,
    open_view,
    rows_js,
    wait_until,
)

GOAL_S = 2.0


def write_rounds(path: Path, clients: int, rounds: int, seed: int = 0) -> int:
    """A synthetic RC-FL-like ``rounds.jsonl``; returns its size in bytes."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(5, 200, size=clients)
    skill = rng.uniform(0.2, 0.9, size=clients)
    with path.open("w", encoding="utf-8") as handle:
        for number in range(1, rounds + 1):
            progress = 1 - np.exp(-number / (rounds / 5))
            accuracy = np.clip(skill * progress + rng.normal(0, 0.05, clients), 0, 1)
            weights = sizes / sizes.sum()
            entry = {
                "run_id": "bench",
                "round": number,
                "wall_time": 0.5 * number,
                "clients": [
                    {
                        "node_id": 1001 + i,
                        "partition_id": i,
                        "num_examples": int(sizes[i]),
                        "eval_acc": float(accuracy[i]),
                        "eval_loss": float(2.3 * (1 - accuracy[i])),
                    }
                    for i in range(clients)
                ],
                "metrics": {},
                "sampled": {"train": clients, "evaluate": clients},
                "evaluate_dropped": {},
                "train": {
                    "accepted": clients - 1,
                    "dropped": {str(1001 + number % clients): "metrics['rcfl-eta'] is nan"},
                    "weights": [
                        {"node_id": 1001 + i, "partition_id": i, "weight": float(weights[i])}
                        for i in range(clients)
                    ],
                    "diagnostics": {
                        "lambda-max": float(weights.max()),
                        "lambda-min": float(weights.min()),
                        "lambda-sum": 1.0,
                        "lambda-entropy": float(-(weights * np.log(weights)).sum()),
                        "rcfl-eta-sent": float(2 - progress),
                        "rcfl-eta": float(2 - progress),
                        "rcfl-q": {str(1001 + i): float(1 + accuracy[i]) for i in range(clients)},
                        "rcfl-active": float(progress),
                    },
                    "skipped": None,
                },
            }
            handle.write(json.dumps(entry) + "\n")
    return path.stat().st_size


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU seconds of a process and all its descendants (Linux ``/proc``)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        tree.update(children)
        frontier.extend(children)
    return sum(times.get(pid, 0.0) for pid in tree)


def chromium_version() -> str:
    found = find_chromium()
    if found is None:
        return "not installed"
    done = subprocess.run([found[0], "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "unknown"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3, help="page loads (first is cold)")
    parser.add_argument(
        "--settle",
        type=float,
        default=1.0,
        help="seconds on about:blank before each load, for a fresh browser to finish starting",
    )
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    print(f"load average before: {load_before}", flush=True)
    with tempfile.TemporaryDirectory(prefix="fairfl-bench-dashboard-") as folder:
        run_dir = Path(folder) / "run"
        run_dir.mkdir()
        started = time.perf_counter()
        size = write_rounds(run_dir / "rounds.jsonl", args.clients, args.rounds)
        print(
            f"wrote {args.clients} clients x {args.rounds} rounds: {size / 1e6:.1f} MB "
            f"in {time.perf_counter() - started:.1f} s",
            flush=True,
        )
        app = create_app([run_dir], interval_s=2.0)
        started = time.perf_counter()
        app.registry.refresh(time.monotonic())
        catch_up = time.perf_counter() - started
        (run,) = app.registry.runs().values()
        print(f"catch-up (first read of the file): {catch_up:.2f} s", flush=True)
        build, first_view = [], []
        for _ in range(args.repeats):
            started = time.perf_counter()
            for figure in (
                figures.metrics_figure(app.registry.runs()),
                figures.client_heatmap(run, "client"),
                figures.distribution_figure(run),
            ):
                figure.to_plotly_json()
            first_view.append(time.perf_counter() - started)
            for figure in (
                figures.weights_heatmap(run),
                figures.diagnostics_figure(run),
                figures.per_client_figure(run, "rcfl-q"),
                figures.participation_figure(run),
            ):
                figure.to_plotly_json()
            build.append(time.perf_counter() - started)
        print(
            f"server-side figures: every one best {min(build):.2f} s, "
            f"the first view's best {min(first_view):.2f} s",
            flush=True,
        )
        bundle = CARTESIAN_BUNDLE.name if cartesian_bundle_matches() else "plotly.min.js"
        print(f"plotly.js served: {bundle}", flush=True)
        loads, browser_cpu, server_cpu, switches = [], [], [], []
        driver = chromium(1400, 1000)
        browser_root = driver.service.process.pid
        try:
            with DashboardServer(app, port=0) as server:
                for _ in range(args.repeats):
                    driver.get("about:blank")
                    time.sleep(args.settle)
                    cpu = (tree_cpu_seconds(browser_root), time.process_time())
                    started = time.perf_counter()
                    driver.get(server.url)
                    wait_until(driver, RENDERED_JS, timeout=120, poll=0.05)
                    rows = wait_until(driver, HEATMAP_ROWS_JS, timeout=120, poll=0.05)
                    loads.append(time.perf_counter() - started)
                    browser_cpu.append(tree_cpu_seconds(browser_root) - cpu[0])
                    server_cpu.append(time.process_time() - cpu[1])
                    assert rows == args.clients, rows
                    started = time.perf_counter()
                    open_view(driver, "rule", timeout=120)
                    rows = wait_until(driver, rows_js("weights"), timeout=120, poll=0.05)
                    switches.append(time.perf_counter() - started)
                    assert rows == args.clients, rows
                    print(
                        f"page load: {loads[-1]:.2f} s (CPU: browser {browser_cpu[-1]:.2f} s, "
                        f"server {server_cpu[-1]:.2f} s); then the rule-state tab: "
                        f"{switches[-1]:.2f} s",
                        flush=True,
                    )
        finally:
            driver.quit()
    load_after = os.getloadavg()
    result = {
        "clients": args.clients,
        "rounds": args.rounds,
        "file_mb": round(size / 1e6, 1),
        "catch_up_s": round(catch_up, 3),
        "figures_best_s": round(min(build), 3),
        "first_view_figures_best_s": round(min(first_view), 3),
        "page_load_until": "first view (Fairness and clients tab) drawn, 1,000-row heat map",
        "page_load_cold_s": round(loads[0], 3),
        "page_load_warm_median_s": round(statistics.median(loads[1:]), 3) if loads[1:] else None,
        "page_loads_s": [round(x, 3) for x in loads],
        "browser_cpu_s": [round(x, 2) for x in browser_cpu],
        "server_cpu_s": [round(x, 2) for x in server_cpu],
        "tab_switch_s": [round(x, 3) for x in switches],
        "plotly_js": bundle,
        "settle_s": args.settle,
        "goal_s": GOAL_S,
        "goal_met": loads[0] < GOAL_S,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "cpu_count": os.cpu_count(),
        "machine": f"{platform.system()} {platform.machine()}, Python {platform.python_version()}",
        "browser": chromium_version(),
    }
    print(f"load average after: {load_after}")
    verdict = "met" if result["goal_met"] else "MISSED"
    print(
        f"cold page load {loads[0]:.2f} s against the {GOAL_S} s goal: {verdict}; "
        f"warm median {result['page_load_warm_median_s']} s; first click on the rule-state tab "
        f"{switches[0]:.2f} s"
    )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
