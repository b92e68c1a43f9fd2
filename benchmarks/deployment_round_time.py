"""Seconds per deployed round: fairfl's app against a minimal Flower app, same federation.

One federation per size (``deploy/localfed.py``: SuperLink, Fleet proxy and SuperNodes in
network namespaces or on loopback, TLS and SuperNode authentication on) serves both apps,
so both pay the same deployment costs. The rule is FedAvg in both, full participation,
federated evaluation every round (two message waves per round), digits partitioned by
fairfl (Dirichlet 0.3, one partition per SuperNode), ``mlp``, 2 local epochs, batch 32:

- ``fairfl``: this repository's app (``--strategy``, FedAvg by default), or another
  checkout's with ``--fairfl-app`` (e.g. the commit before a change).
- ``flower-minimal``: a Flower app written the way Flower's PyTorch quickstart writes one
  (:data:`MINIMAL_APP`): ``flwr.serverapp.strategy.FedAvg``, the same MLP in plain torch,
  ``torch.optim.SGD``, and each SuperNode's partition read from a ``.npz`` file this
  script writes with fairfl's partitioner, so both train on the same samples.
- ``fairfl-before`` (``--before DIR``): the app of another checkout (``git archive
  <commit> | tar -x -C DIR``), run in the same rounds, for before/after numbers.

A run's per-round time comes from the ServerApp's own stamps (``rounds.jsonl``: round R's
``wall_time`` minus round 1's, over R - 1 rounds; round 1 also holds the app's start and
is left out). After a one-round warm-up run of each app (FAB install, partition cache) the
apps alternate ``--repeats`` times and the median is kept. The same fairfl runs are timed
in process too (``run_inprocess``: same ServerApp logic and ClientApp, no runtime).

The floor: Flower 1.42's ServerApp pulls replies every 3 s (``time.sleep(3)`` in
``HttpGrid.send_and_receive``, ``flwr/superlink/grid/http_grid.py``), an idle SuperNode
asks for work every 3 s (``start_client_internal.py``), and its SuperExec looks for tasks
every ``FLWR_SUPEREXEC_TASK_POLL_INTERVAL`` (1 s). A wave of messages therefore lasts a
whole number of 3 s pulls, at least one: a round with evaluation cannot take less than
2 x 3 s, however fast the apps are. The constants are read from the installed flwr
source, so the report follows a Flower upgrade.

    sudo .venv/bin/python benchmarks/deployment_round_time.py --supernodes 3 10 --json out.json

Prints a table per size; never fails on absolute times.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "deploy"))
sys.path.insert(1, str(REPO))  # fairfl, also when not pip-installed

from localfed import SCRIPTS, SERVER, LocalFederation, app_run_config, toml_value  # noqa: E402

#: The task both apps run; keys of fairfl's run config.
TASK: dict[str, Any] = {
    "dataset": "digits",
    "partitioner": "dirichlet",
    "dirichlet-alpha": 0.3,
    "test-fraction": 0.3,
    "model": "mlp",
    "lr": 0.1,
    "local-epochs": 2,
    "batch-size": 32,
    "seed": 0,
    "fraction-train": 1.0,
    "fraction-evaluate": 1.0,
    "evaluate-every": 1,
}

MINIMAL_PYPROJECT = """\
[project]
name = "minimalapp"
version = "1.0.0"
dependencies = ["flwr>=1.42", "torch", "numpy"]

[tool.flwr.app]
publisher = "bench"

[tool.flwr.app.components]
serverapp = "minimal_app:server"
clientapp = "minimal_app:client"

[tool.flwr.app.config]
num-server-rounds = 4
min-available-nodes = 3
lr = 0.1
local-epochs = 2
batch-size = 32
seed = 0
data-dir = ""
out-dir = ""
"""

MINIMAL_APP = '''\
"""A minimal Flower app: FedAvg, the MLP of fairfl's ``mlp``, torch.optim.SGD."""

import json
import time
from pathlib import Path

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU())
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc(self.body(x))


def partition(context):
    folder = Path(context.run_config["data-dir"])
    return np.load(folder / f"partition-{context.node_config['partition-id']}.npz")


client = ClientApp()


@client.train()
def train(msg: Message, context: Context) -> Message:
    data = partition(context)
    x, y = torch.from_numpy(data["x_train"]), torch.from_numpy(data["y_train"])
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    model.train()
    config = context.run_config
    optimizer = torch.optim.SGD(model.parameters(), lr=float(config["lr"]))
    batch = int(config["batch-size"])
    losses = []
    for _ in range(int(config["local-epochs"])):
        order = torch.randperm(len(y))
        for start in range(0, len(y), batch):
            index = order[start : start + batch]
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x[index]), y[index])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    metrics = MetricRecord({"train_loss": float(np.mean(losses)), "num-examples": len(y)})
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics})
    return Message(content=content, reply_to=msg)


@client.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    data = partition(context)
    x, y = torch.from_numpy(data["x_test"]), torch.from_numpy(data["y_test"])
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    model.eval()
    with torch.no_grad():
        logits = model(x)
        loss = float(nn.functional.cross_entropy(logits, y))
        accuracy = float((logits.argmax(1) == y).float().mean())
    metrics = MetricRecord({"eval_loss": loss, "eval_acc": accuracy, "num-examples": len(y)})
    return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)


server = ServerApp()


@server.main()
def main(grid: Grid, context: Context) -> None:
    config = context.run_config
    out = Path(config["out-dir"])
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(int(config["seed"]))
    started = time.perf_counter()

    def stamp(server_round, arrays):
        if server_round > 0:
            with (out / "rounds.jsonl").open("a") as file:
                line = {"round": server_round, "wall_time": time.perf_counter() - started}
                file.write(json.dumps(line) + "\\n")
        return None

    strategy = FedAvg(
        fraction_train=1.0,
        fraction_evaluate=1.0,
        min_available_nodes=int(config["min-available-nodes"]),
    )
    strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(Net().state_dict()),
        num_rounds=int(config["num-server-rounds"]),
        evaluate_fn=stamp,
    )
'''


def flower_polls() -> dict[str, float | None]:
    """The poll intervals of the installed flwr, read from its source (None: not found)."""
    import flwr

    root = Path(flwr.__file__).parent

    def sleep_after(path: str, marker: str) -> float | None:
        text = (root / path).read_text()
        start = text.find(marker)
        found = re.search(r"time\.sleep\(([\d.]+)\)", text[start:]) if start >= 0 else None
        return float(found.group(1)) if found else None

    superexec = (root / "supercore/superexec/run_superexec.py").read_text()
    task = re.search(r"_DEFAULT_TASK_POLL_INTERVAL_SECONDS\s*=\s*([\d.]+)", superexec)
    return {
        "serverapp_pull_s": sleep_after("superlink/grid/http_grid.py", "def send_and_receive"),
        "supernode_idle_pull_s": sleep_after(
            "supernode/start_client_internal.py", "if run_id is None"
        ),
        "superexec_task_poll_s": float(task.group(1)) if task else None,
    }


def per_round(out_dir: Path) -> float:
    """Mean seconds per round after the first, from the ServerApp's rounds.jsonl."""
    rows = [json.loads(x) for x in (out_dir / "rounds.jsonl").read_text().splitlines() if x]
    times = [r["wall_time"] for r in rows]
    if len(times) < 2:
        raise ValueError("need at least 2 rounds to time rounds after the first")
    return (times[-1] - times[0]) / (len(times) - 1)


def write_minimal_app(folder: Path, supernodes: int) -> Path:
    """The minimal app and one ``.npz`` per partition (fairfl's partitioner, same data)."""
    from fairfl.data import load_client_data

    folder.mkdir(parents=True)
    (folder / "pyproject.toml").write_text(MINIMAL_PYPROJECT)
    (folder / "minimal_app.py").write_text(MINIMAL_APP)
    data_dir = folder.parent / f"minimal-data-{supernodes}"
    data_dir.mkdir()
    for pid in range(supernodes):
        data = load_client_data(
            dataset=TASK["dataset"],
            partitioner=TASK["partitioner"],
            partition_id=pid,
            num_partitions=supernodes,
            seed=TASK["seed"],
            dirichlet_alpha=TASK["dirichlet-alpha"],
            test_fraction=TASK["test-fraction"],
        )
        arrays = {k: getattr(data, k) for k in ("x_train", "y_train", "x_test", "y_test")}
        with (data_dir / f"partition-{pid}.npz").open("wb") as file:
            np.savez(file, **arrays)
    return data_dir


def submit(fed: LocalFederation, app: Path, config: dict[str, Any], name: str) -> Path:
    """Run ``app`` on the federation (``flwr run``); return its ``out-dir``."""
    config = {**config, "out-dir": str(fed.out_root / name)}
    args = [str(SCRIPTS / "submit-run.sh"), "--connection", "tls", "--app", str(app)]
    for key, value in config.items():
        args += ["-c", f"{key}={toml_value(value)}"]
    log = fed.workdir / "logs" / f"flwr-run-{name}.log"
    with open(log, "w") as out:
        done = subprocess.run(
            fed._wrap(SERVER, ["bash", *args]),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=fed._env(SERVER),
            timeout=1800,
            cwd=app,
            start_new_session=True,
        )
    if done.returncode != 0:
        raise RuntimeError(f"run {name} failed ({done.returncode}); see {log}")
    return Path(config["out-dir"])


def inprocess_per_round(config: dict[str, Any], out_dir: Path, supernodes: int) -> float:
    from fairfl.simulation import run_inprocess

    logging.getLogger("flwr").setLevel(logging.WARNING)  # the deployed runs' logs are enough
    nodes = {
        1001 + p: {"partition-id": p, "num-partitions": supernodes, "device": "cpu"}
        for p in range(supernodes)
    }
    run_inprocess(app_run_config({**config, "out-dir": str(out_dir)}), node_configs=nodes)
    return per_round(out_dir)


def measure_size(args: argparse.Namespace, supernodes: int, work: Path) -> dict[str, Any]:
    """Both apps on one federation of ``supernodes`` SuperNodes."""
    fairfl_config = {
        **TASK,
        "strategy": args.strategy,
        "num-server-rounds": args.rounds,
        "num-partitions": supernodes,
        "min-available-nodes": supernodes,
    }
    minimal_app = work / f"minimal-app-{supernodes}"
    data_dir = write_minimal_app(minimal_app, supernodes)
    minimal_config = {
        "num-server-rounds": args.rounds,
        "min-available-nodes": supernodes,
        "lr": TASK["lr"],
        "local-epochs": TASK["local-epochs"],
        "batch-size": TASK["batch-size"],
        "seed": TASK["seed"],
        "data-dir": str(data_dir),
    }
    apps = {
        "fairfl": (args.fairfl_app, fairfl_config),
        "flower-minimal": (minimal_app, minimal_config),
    }
    if args.before is not None:
        apps["fairfl-before"] = (args.before, fairfl_config)
    deployed: dict[str, list[float]] = {name: [] for name in apps}
    started = time.monotonic()
    with LocalFederation(
        work / f"fed-{supernodes}",
        supernodes=supernodes,
        network=args.network,
        isolation=args.isolation,
    ) as fed:
        where = "network namespaces" if fed.mode == "netns" else f"loopback ({fed.fallback_reason})"
        print(
            f"# {supernodes} SuperNodes on {where}, TLS + SuperNode auth, {args.isolation} "
            f"isolation; up in {time.monotonic() - started:.1f} s",
            flush=True,
        )
        for name, (app, config) in apps.items():  # warm-up: FAB install, partition cache
            submit(fed, app, {**config, "num-server-rounds": 1}, f"warmup-{name}")
        for repeat in range(args.repeats):
            for name, (app, config) in apps.items():
                seconds = per_round(submit(fed, app, config, f"{name}-{repeat}"))
                deployed[name].append(seconds)
                print(f"  {name} run {repeat}: {seconds:.2f} s/round", flush=True)
        network = fed.mode
    median = {name: statistics.median(values) for name, values in deployed.items()}
    result: dict[str, Any] = {
        "supernodes": supernodes,
        "apps": {name: str(app) for name, (app, _) in apps.items()},
        "network": network,
        "deployed_s_per_round": {k: round(v, 3) for k, v in median.items()},
        "deployed_samples": {k: [round(v, 3) for v in vs] for k, vs in deployed.items()},
        "ratio_fairfl_to_minimal": round(median["fairfl"] / median["flower-minimal"], 3),
    }
    if not args.skip_inprocess and args.fairfl_app == REPO:
        local = inprocess_per_round(fairfl_config, work / f"inproc-{supernodes}", supernodes)
        result["inprocess_s_per_round"] = round(local, 3)
        result["flower_runtime_overhead_s"] = round(median["fairfl"] - local, 3)
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run every size; print a table, write ``--json`` if given, return the result."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--strategy", default="fedavg", help="fairfl's rule (default FedAvg)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=1, help="runs of each app (alternating)")
    parser.add_argument("--supernodes", type=int, nargs="+", default=[3, 10])
    parser.add_argument("--network", choices=["auto", "netns", "loopback"], default="auto")
    parser.add_argument("--isolation", choices=["subprocess", "process"], default="subprocess")
    parser.add_argument("--fairfl-app", type=Path, default=REPO, help="fairfl checkout to run")
    parser.add_argument(
        "--before",
        type=Path,
        default=None,
        help="also run app 'fairfl-before' from this checkout (e.g. git archive of a commit)",
    )
    parser.add_argument(
        "--before-sizes",
        type=int,
        nargs="+",
        default=None,
        help="SuperNode counts that also run --before (default: all)",
    )
    parser.add_argument("--skip-inprocess", action="store_true", help="no in-process runs")
    parser.add_argument("--json", type=Path, default=None, help="write the result here")
    parser.add_argument("--keep", action="store_true", help="keep logs and results (workdir)")
    args = parser.parse_args(argv)
    args.fairfl_app = args.fairfl_app.resolve()
    before = args.before.resolve() if args.before is not None else None
    if args.rounds < 2:
        parser.error("--rounds must be >= 2 (round 1 is left out of the time per round)")

    work = Path(tempfile.mkdtemp(prefix="fairfl-deploy-bench-"))
    # The SuperNodes inherit this: their partition cache lives (and dies) with the run.
    os.environ["FAIRFL_CACHE_DIR"] = str(work / "cache")
    polls = flower_polls()
    waves = 2  # train and evaluate every round (evaluate-every 1, fraction-evaluate 1)
    floor = waves * polls["serverapp_pull_s"] if polls["serverapp_pull_s"] else None
    load_before = os.getloadavg()
    sizes = []
    try:
        for supernodes in args.supernodes:
            with_before = args.before_sizes is None or supernodes in args.before_sizes
            args.before = before if with_before else None
            sizes.append(measure_size(args, supernodes, work))
    finally:
        if args.keep:
            print(f"# workdir: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()
    for size in sizes:
        dep = size["deployed_s_per_round"]
        if "fairfl-before" in dep:
            size["ratio_before_to_minimal"] = round(dep["fairfl-before"] / dep["flower-minimal"], 3)
        if floor:
            size["fairfl_over_floor"] = round(dep["fairfl"] / floor, 3)
            size["minimal_over_floor"] = round(dep["flower-minimal"] / floor, 3)
    print(f"# {args.rounds} rounds, {args.repeats} run(s) per app; seconds per round after round 1")
    print(f"# Flower's polls (installed flwr source): {polls}; floor {floor} s per round")
    print(
        f"{'SuperNodes':>10} {'fairfl':>8} {'minimal':>8} {'ratio':>6} {'floor':>6} {'in-proc':>8}"
    )
    for size in sizes:
        dep = size["deployed_s_per_round"]
        print(
            f"{size['supernodes']:>10} {dep['fairfl']:>8.2f} {dep['flower-minimal']:>8.2f} "
            f"{size['ratio_fairfl_to_minimal']:>6.2f} {floor or float('nan'):>6.1f} "
            f"{size.get('inprocess_s_per_round', float('nan')):>8.3f}"
            + (f"   before: {dep['fairfl-before']:.2f}" if "fairfl-before" in dep else "")
        )
    result = {
        "benchmark": "benchmarks/deployment_round_time.py",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "fairfl_app": str(args.fairfl_app),
        "before_app": str(before) if before is not None else None,
        "strategy": args.strategy,
        "rounds": args.rounds,
        "repeats": args.repeats,
        "isolation": args.isolation,
        "task": TASK,
        "flower_polls": polls,
        "waves_per_round": waves,
        "floor_s_per_round": floor,
        "sizes": sizes,
    }
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main()
