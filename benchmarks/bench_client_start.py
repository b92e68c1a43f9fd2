"""Start-to-reply time of a fresh ClientApp process: fairfl's against a minimal Flower app.

Flower 1.42 runs every message in a new ``flwr-clientapp`` process
(``flwr/supernode/runtime/run_clientapp.py``): it imports Flower's runtime, pulls the
Message and Context, loads the ClientApp, calls it, pushes the reply, then exits. Each
sample here is such a process (``python -c``, the same steps without the network): it
imports ``flwr.supernode.runtime.run_clientapp``, reads one serialised train Message and
Context, imports the app module, calls the ClientApp and writes the serialised reply to
stdout. The time is taken by the parent from just before the process is started to the
moment the reply arrives ("to reply"); the time to the process's exit is kept too.

Apps, all on the same train message (digits, ``mlp``, 2 local epochs, batch 32, lr 0.1,
partition 3 of 20 Dirichlet(0.3)):

- ``fairfl``: ``fairfl.client.app:app``, fairfl's ClientApp (F_k(w^t) pass, then local
  SGD); its partition comes from the file cache, filled by the untimed first round.
- ``flower-minimal``: :data:`app` below, the shortest ClientApp Flower's PyTorch
  quickstart suggests for the same model: the same ``MLP`` layers in plain torch, the same
  train samples (read from a ``.npz`` file written by the parent), ``torch.optim.SGD``.
- ``flower-floor``: the same, with a hand-written SGD step (no ``torch._dynamo`` import
  from ``torch.optim``): nothing left but Flower, torch, the model and the epochs.
- ``fairfl-before`` (with ``--before DIR``): ``fairfl.client.app:app`` of another
  checkout, e.g. ``git archive <commit> fairfl | tar -x -C DIR``, timed in the same
  interleaved rounds.

After an untimed round the apps are interleaved, and the best of ``--repeats`` is kept.
``python -X importtime -c 'import fairfl.client.app'`` is summarised as well (the largest
cumulative imports, and whether SciPy, scikit-learn, pandas, qpsolvers,
``fairfl.strategies`` or ``torch._dynamo`` are loaded). Times depend on the machine and
its load; nothing fails on them.

    nice .venv/bin/python benchmarks/bench_client_start.py --repeats 5 --json /tmp/start.json
    nice .venv/bin/python benchmarks/bench_client_start.py --before /tmp/old --json /tmp/s.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
GOAL = 1.2  # fairfl / flower-minimal, start to reply
APPS = {
    "fairfl": "fairfl.client.app:app",
    "flower-minimal": "bench_client_start:app",
    "flower-floor": "bench_client_start:floor_app",
}
RUN_CONFIG: dict[str, Any] = {
    "dataset": "digits",
    "partitioner": "dirichlet",
    "num-partitions": 20,
    "model": "mlp",
    "local-epochs": 2,
    "batch-size": 32,
    "lr": 0.1,
    "seed": 0,
}
PARTITION_ID = 3
#: Modules a lean client process must not load.
HEAVY = ("sklearn", "scipy", "pandas", "qpsolvers", "fairfl.strategies", "torch._dynamo")

# The child: what flwr-clientapp does between start and push, without the network.
CHILD = """
import sys, time
from pathlib import Path
HEAVY_ROOTS = {"sklearn", "scipy", "pandas", "qpsolvers"}
HEAVY_NAMES = {"fairfl.strategies", "torch._dynamo"}
import flwr.supernode.runtime.run_clientapp  # noqa: F401  (flwr-clientapp's own import)
from flwr.common.serde import context_from_proto, message_from_proto, message_to_proto
from flwr.proto.message_pb2 import Context as ProtoContext, Message as ProtoMessage
from flwr.supercore.task_identity import TaskIdentity
message_proto, context_proto = ProtoMessage(), ProtoContext()
message_proto.ParseFromString(Path(sys.argv[1]).read_bytes())
context_proto.ParseFromString(Path(sys.argv[2]).read_bytes())
context = context_from_proto(context_proto)
TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = context.run_id, context.node_id, 7
message = message_from_proto(message_proto)
module, _, attribute = sys.argv[3].partition(":")
sys.path.insert(0, sys.argv[4])
import importlib
app = getattr(importlib.import_module(module), attribute)
reply = app(message=message, context=context)
data = message_to_proto(reply).SerializeToString()
heavy = sorted({m.split(".")[0] for m in sys.modules if m.split(".")[0] in HEAVY_ROOTS}
               | {m for m in sys.modules if m in HEAVY_NAMES})
sys.stdout.write(f"REPLY {len(data)} {heavy}\\n")
sys.stdout.flush()
"""


class Net(nn.Module):
    """fairfl's ``mlp`` in plain torch (same layers and state-dict keys)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU())
        self.fc = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of a batch of 1x8x8 digits."""
        return self.fc(self.body(x))


def _minimal_train(message: Message, context: Context, *, torch_optimizer: bool) -> Message:
    """The quickstart's train: load weights, SGD epochs, reply weights and n_k."""
    data = np.load(str(context.node_config["data-file"]))
    x, y = torch.from_numpy(data["x_train"]), torch.from_numpy(data["y_train"])
    config = message.content["config"]
    model = Net()
    model.load_state_dict(message.content["arrays"].to_torch_state_dict())
    model.train()
    lr, batch = float(config["lr"]), int(config["batch-size"])
    optimizer = torch.optim.SGD(model.parameters(), lr=lr) if torch_optimizer else None
    generator = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(int(config["local-epochs"])):
        order = torch.randperm(len(y), generator=generator)
        for start in range(0, len(y), batch):
            index = order[start : start + batch]
            model.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(x[index]), y[index])
            loss.backward()
            if optimizer is not None:
                optimizer.step()
            else:
                with torch.no_grad():
                    for p in model.parameters():
                        p.add_(p.grad, alpha=-lr)
            losses.append(float(loss))
    metrics = MetricRecord({"train_loss": float(np.mean(losses)), "num-examples": len(y)})
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics})
    return Message(content=content, reply_to=message)


app = ClientApp()
floor_app = ClientApp()


@app.train()
def minimal_train(message: Message, context: Context) -> Message:
    """Flower quickstart style: ``torch.optim.SGD``."""
    return _minimal_train(message, context, torch_optimizer=True)


@floor_app.train()
def floor_train(message: Message, context: Context) -> Message:
    """The floor: a hand-written SGD step, nothing else."""
    return _minimal_train(message, context, torch_optimizer=False)


def prepare(work: Path, apps: dict[str, str]) -> dict[str, tuple[Path, Path]]:
    """Write the train message and each app's context; return their files per app."""
    sys.path.insert(0, str(ROOT))
    from flwr.common.serde import context_to_proto, message_to_proto

    from fairfl._compat import server_task_identity, set_message_id
    from fairfl.data import load_client_data
    from fairfl.models import build_model

    data = load_client_data(
        dataset="digits",
        partitioner="dirichlet",
        partition_id=PARTITION_ID,
        num_partitions=RUN_CONFIG["num-partitions"],
        seed=RUN_CONFIG["seed"],
    )
    np.savez(work / "data.npz", x_train=data.x_train, y_train=data.y_train)
    model = build_model("mlp", (1, 8, 8), 10, seed=1)
    with server_task_identity(1):
        config = {k: RUN_CONFIG[k] for k in ("lr", "local-epochs", "batch-size")}
        content = RecordDict(
            {
                "arrays": ArrayRecord(model.state_dict()),
                "config": ConfigRecord({**config, "server-round": 1}),
            }
        )
        message = Message(content=content, dst_node_id=1003, message_type="train")
    set_message_id(message, "bench-train-1")
    message_file = work / "message.pb"
    message_file.write_bytes(message_to_proto(message).SerializeToString())
    files = {}
    for name, ref in apps.items():
        node_config = {"partition-id": PARTITION_ID, "num-partitions": RUN_CONFIG["num-partitions"]}
        if not ref.startswith("fairfl"):
            node_config["data-file"] = str(work / "data.npz")
        context = Context(
            run_id=1,
            node_id=1003,
            node_config=node_config,
            state=RecordDict(),
            run_config=dict(RUN_CONFIG),
        )
        context_file = work / f"context-{name}.pb"
        context_file.write_bytes(context_to_proto(context).SerializeToString())
        files[name] = (message_file, context_file)
    return files


def sample(app_ref: str, files: tuple[Path, Path], env: dict[str, str]) -> dict[str, Any]:
    """One fresh process: seconds from start to reply and to exit, and heavy modules."""
    # ``python -c`` puts its working folder first on sys.path: run where fairfl is taken from.
    command = [
        sys.executable,
        "-c",
        CHILD,
        str(files[0]),
        str(files[1]),
        app_ref,
        str(Path(__file__).resolve().parent),
    ]
    with tempfile.TemporaryFile(mode="w+") as errors:  # a file: a full pipe would block
        started = time.perf_counter()
        process = subprocess.Popen(
            command,
            cwd=env["PYTHONPATH"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            replied = time.perf_counter()
            process.communicate(timeout=120)
            exited = time.perf_counter()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        errors.seek(0)
        stderr = errors.read()
    if process.returncode != 0 or not line.startswith("REPLY"):
        raise RuntimeError(f"{app_ref} failed ({process.returncode}): {stderr[-2000:]}")
    heavy = re.search(r"\[(.*)\]", line)
    return {
        "to_reply_s": replied - started,
        "to_exit_s": exited - started,
        "heavy_modules": [m.strip(" '") for m in heavy.group(1).split(",") if m.strip()]
        if heavy
        else [],
    }


def importtime_summary(env: dict[str, str], top: int = 12) -> dict[str, Any]:
    """``python -X importtime -c 'import fairfl.client.app'``: largest imports, heavy ones."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import fairfl.client.app"],
        cwd=env["PYTHONPATH"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    rows = []
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if match:
            rows.append((int(match.group(2)), len(match.group(3)) // 2, match.group(4)))
    total = next((us for us, _, name in rows if name == "fairfl.client.app"), 0)
    packages: dict[str, int] = {}
    for cumulative, _, name in rows:  # a package's outermost entry holds all of it
        root = name.split(".")[0]
        packages[root] = max(packages.get(root, 0), cumulative)
    largest = sorted(packages.items(), key=lambda item: -item[1])[:top]
    own = sorted(
        ((name, us) for us, _, name in rows if name.startswith("fairfl")), key=lambda r: -r[1]
    )[:top]
    return {
        "total_ms": round(total / 1e3, 1),
        "largest_packages_ms": {name: round(us / 1e3, 1) for name, us in largest},
        "largest_fairfl_modules_ms": {name: round(us / 1e3, 1) for name, us in own},
        "heavy_modules_loaded": sorted(
            {name for _, _, name in rows if name in HEAVY or name.split(".")[0] in HEAVY}
        ),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; print a table, write ``--json`` if given, return the result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None, help="write the result here")
    parser.add_argument(
        "--before",
        type=Path,
        default=None,
        help="also time app 'fairfl-before': the fairfl of this checkout (an older version)",
    )
    args = parser.parse_args(argv)
    apps = dict(APPS)
    roots = dict.fromkeys(apps, ROOT)
    if args.before is not None:
        apps["fairfl-before"] = APPS["fairfl"]
        roots["fairfl-before"] = args.before.resolve()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="fairfl-client-start-") as scratch:
        work = Path(scratch)
        envs = {
            name: {
                **os.environ,
                "FLWR_TELEMETRY_ENABLED": "0",
                "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
                "FLWR_DISABLE_UPDATE_CHECK": "1",
                "PYTHONPATH": str(roots[name]),
                "FAIRFL_CACHE_DIR": str(work / "cache"),
            }
            for name in apps
        }
        files = prepare(work, apps)
        # Untimed round; fairfl's run is also the cold-cache sample (partitions computed).
        cold = sample(apps["fairfl"], files["fairfl"], envs["fairfl"])
        for name in apps:
            if name != "fairfl":
                sample(apps[name], files[name], envs[name])
        samples: dict[str, list[dict[str, Any]]] = {name: [] for name in apps}
        for _ in range(args.repeats):
            for name, ref in apps.items():
                samples[name].append(sample(ref, files[name], envs[name]))
        importtime = importtime_summary(envs["fairfl"])
    load_after = os.getloadavg()
    best = {
        name: {
            "to_reply_s": round(min(s["to_reply_s"] for s in runs), 3),
            "to_exit_s": round(min(s["to_exit_s"] for s in runs), 3),
            "heavy_modules": runs[-1]["heavy_modules"],
        }
        for name, runs in samples.items()
    }
    ratio = {
        name: round(best[name]["to_reply_s"] / best["flower-minimal"]["to_reply_s"], 3)
        for name in apps
    }
    result: dict[str, Any] = {
        "benchmark": "benchmarks/bench_client_start.py",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "repeats": args.repeats,
        "before_path": str(roots["fairfl-before"]) if args.before is not None else None,
        "message": {**RUN_CONFIG, "partition-id": PARTITION_ID},
        "best": best,
        "ratio_to_flower_minimal": ratio,
        "ratio_to_flower_floor": round(
            best["fairfl"]["to_reply_s"] / best["flower-floor"]["to_reply_s"], 3
        ),
        "goal_ratio": GOAL,
        "goal_met": ratio["fairfl"] <= GOAL,
        "fairfl_cold_cache_to_reply_s": round(cold["to_reply_s"], 3),
        "samples_to_reply_s": {
            name: [round(s["to_reply_s"], 3) for s in runs] for name, runs in samples.items()
        },
        "importtime_fairfl_client_app": importtime,
    }
    print(f"fresh ClientApp process, one train message, best of {args.repeats} (s)")
    print(f"{'app':<16}{'to reply':>10}{'to exit':>10}{'x minimal':>11}")
    for name in apps:
        print(
            f"{name:<16}{best[name]['to_reply_s']:>10.3f}{best[name]['to_exit_s']:>10.3f}"
            f"{ratio[name]:>11.2f}"
        )
    print(f"fairfl with a cold partition cache: {cold['to_reply_s']:.3f} s to reply")
    print(f"goal fairfl <= {GOAL}x flower-minimal: {'met' if result['goal_met'] else 'missed'}")
    print(f"import fairfl.client.app: {importtime['total_ms']:.0f} ms; largest packages (ms):")
    for name, ms in importtime["largest_packages_ms"].items():
        print(f"  {name:<24}{ms:>8.1f}")
    print(f"heavy modules loaded: {importtime['heavy_modules_loaded'] or 'none'}")
    print(f"load average before {load_before}, after {load_after}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main()
