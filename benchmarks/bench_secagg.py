"""The cost of one round under SecAgg+ against the clear round, at 10, 50 and 100 clients.

One FedAvg training round through fairfl's strategy and the in-memory Grid, with and
without ``secure-aggregation = "secagg+"`` (its default settings: 3 shares, threshold 2,
C = 8, Q = 2^22, a_max = 1000). The clients do no training: each returns the global
model plus a fixed random update of ``--params`` float32 values, so the times are the
protocol's, not a model's. Measured per round, best of ``--repeats``:

* server time: the round's wall time less the time spent inside the ClientApp calls
  (configure, the stages' bookkeeping, unmasking, aggregation);
* client time: the mean over clients of the time inside their ClientApp calls (all
  stages: key generation, Shamir shares, encryption, quantisation and masks);
* bytes: the serialised size (Flower's protobuf) of every message sent to the clients,
  and of every reply, summed over the round; per client, their sum divided by n.

    nice .venv/bin/python benchmarks/bench_secagg.py --json docs/results/secagg-cost.json

writes the JSON and, beside it, the Markdown table (``secagg-cost.md``), both with the
command and the machine. The ratio to the clear round is the figure to watch; absolute
times depend on the machine and its load (recorded).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.serde import recorddict_to_proto

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _report import load_1min, machine, write_json  # noqa: E402 (after sys.path)

from fairfl._compat import server_task_identity  # noqa: E402
from fairfl.secagg import SecAggSettings, secaggplus_mod  # noqa: E402
from fairfl.simulation.inprocess import InMemoryGrid  # noqa: E402
from fairfl.strategies import FedAvg  # noqa: E402
from fairfl.strategies.secure import SecureRounds  # noqa: E402

COMMAND = "nice .venv/bin/python benchmarks/bench_secagg.py --json docs/results/secagg-cost.json"


class TimedApp:
    """A ClientApp whose calls are timed: every stage of every client, summed."""

    def __init__(self, app: ClientApp) -> None:
        self.app = app
        self.seconds = 0.0

    def __call__(self, message: Message, context: Context) -> Message:
        start = time.perf_counter()
        try:
            return self.app(message, context)
        finally:
            self.seconds += time.perf_counter() - start


class CountingGrid(InMemoryGrid):
    """The in-memory Grid, counting the serialised bytes each way."""

    sent = 0
    received = 0

    def push_messages(self, messages):
        messages = list(messages)
        self.sent += sum(recorddict_to_proto(m.content).ByteSize() for m in messages)
        return super().push_messages(messages)

    def pull_messages(self, message_ids):
        replies = list(super().pull_messages(message_ids))
        self.received += sum(
            recorddict_to_proto(r.content).ByteSize() for r in replies if not r.has_error()
        )
        return replies


def client_app(params: int, secure: bool) -> ClientApp:
    """Node k answers w^t + a fixed update drawn from its id, n_k = 10 + k mod 90."""

    def train(message: Message, context: Context) -> Message:
        arrays = message.content.array_records["arrays"]
        rng = np.random.default_rng(context.node_id)
        trained = {
            key: Array(arrays[key].numpy() + rng.normal(0, 0.01, params).astype(np.float32))
            for key in arrays
        }
        metrics = {
            "num-examples": 10 + context.node_id % 90,
            "loss-before-training": 1.0,
            "partition-id": context.node_id - 1001,
        }
        content = RecordDict({"arrays": ArrayRecord(trained), "metrics": MetricRecord(metrics)})
        return Message(content, reply_to=message)

    app = ClientApp(mods=[secaggplus_mod] if secure else [])
    app.train()(train)
    return app


def one_round(clients: int, params: int, secure: bool) -> dict[str, float]:
    """One FedAvg training round: server and mean client seconds, bytes each way."""
    timed = TimedApp(client_app(params, secure))
    nodes = {1001 + k: {"partition-id": k} for k in range(clients)}
    grid = CountingGrid(timed, nodes, {})  # type: ignore[arg-type]
    strategy = FedAvg(min_available_nodes=clients)
    strategy.sample_timeout = 10.0
    run_grid = grid
    if secure:
        settings = SecAggSettings(secure_aggregation="secagg+")
        run_grid = SecureRounds(strategy, settings).wrap(grid)
    arrays = ArrayRecord({"w": Array(np.zeros(params, np.float32))})
    with server_task_identity(1):
        start = time.perf_counter()
        messages = list(strategy.configure_train(1, arrays, ConfigRecord({"lr": 0.1}), run_grid))
        replies = run_grid.send_and_receive(messages, timeout=60.0)
        new, _ = strategy.aggregate_train(1, replies)
        wall = time.perf_counter() - start
    if new is None:
        raise RuntimeError(f"the {'secure' if secure else 'clear'} round made no model")
    summed = strategy.train_records[1].diagnostics.get("secagg-clients", clients)
    if summed != clients:  # a lost client would make the round cheaper, not comparable
        raise RuntimeError(f"the secure round summed {summed} of {clients} clients")
    return {
        "server_s": wall - timed.seconds,
        "client_s": timed.seconds / clients,
        "bytes_to_clients": grid.sent,
        "bytes_from_clients": grid.received,
        "bytes_per_client": (grid.sent + grid.received) / clients,
    }


def measure(clients: int, params: int, repeats: int) -> dict[str, Any]:
    """Best of ``repeats`` clear and secure rounds, and their ratios."""
    row: dict[str, Any] = {"clients": clients}
    for name, secure in (("clear", False), ("secagg+", True)):
        runs = [one_round(clients, params, secure) for _ in range(repeats)]
        row[name] = {
            key: min(run[key] for run in runs) if key.endswith("_s") else runs[0][key]
            for key in runs[0]
        }
    clear, secure = row["clear"], row["secagg+"]
    row["ratio"] = {key: secure[key] / clear[key] for key in clear}
    return row


def table(result: dict[str, Any]) -> str:
    """The Markdown table of a run, with its command and machine."""
    lines = [
        "# Cost of a round under SecAgg+ (bench_secagg.py)",
        "",
        f"`{result['command']}`, {result['params']} float32 parameters, FedAvg, "
        f"SecAgg+ at its defaults; best of {result['repeats']}. Machine: "
        f"{result['machine']['cpu']}, {result['machine']['cores']} cores, load "
        f"{result['load_1min_before']:.1f} before, {result['load_1min_after']:.1f} after.",
        "",
        "| clients | server s (clear → secagg+) | ratio | client s (clear → secagg+) | ratio "
        "| bytes per client (clear → secagg+) | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        c, s, r = row["clear"], row["secagg+"], row["ratio"]
        lines.append(
            f"| {row['clients']} | {c['server_s']:.3f} → {s['server_s']:.3f} | "
            f"{r['server_s']:.1f}× | {c['client_s']:.4f} → {s['client_s']:.4f} | "
            f"{r['client_s']:.1f}× | {c['bytes_per_client']:,.0f} → "
            f"{s['bytes_per_client']:,.0f} | {r['bytes_per_client']:.2f}× |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; print the table; write ``--json`` and its ``.md`` if asked."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 50, 100])
    parser.add_argument("--params", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    load_before = load_1min()
    rows = [measure(n, args.params, args.repeats) for n in args.clients]
    result = {
        "command": COMMAND,
        "params": args.params,
        "repeats": args.repeats,
        "secagg": {"num_shares": 3, "threshold": 2, "clipping_range": 8.0, "q": 2**22},
        "machine": machine(),
        "load_1min_before": load_before,
        "load_1min_after": load_1min(),
        "rows": rows,
    }
    print(table(result))
    if args.json is not None:
        write_json(args.json, result)
        args.json.with_suffix(".md").write_text(table(result), encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
