"""A fresh ClientApp process loads only what its round needs.

Flower runs each message in a new process, so every module imported on the way is paid
per message: SciPy and scikit-learn (~1 s, digits used to come from
``sklearn.datasets.load_digits``), pandas and HuggingFace ``datasets`` (partitioning;
cached on disk after the first message), qpsolvers and ``fairfl.strategies`` (server
only) and ``torch._dynamo`` (~0.9 s, imported by creating any ``torch.optim`` optimizer).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY_ROOTS = ("sklearn", "scipy", "pandas", "qpsolvers", "datasets")
HEAVY = ("fairfl.strategies", "torch._dynamo")

CHILD = """
import json, sys
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from fairfl._compat import server_task_identity, set_message_id
from fairfl.client.app import app
from fairfl.models import build_model

config = {"lr": 0.1, "local-epochs": 1, "batch-size": 32, "server-round": 1}
context = Context(run_id=1, node_id=1003, node_config={"partition-id": 2, "num-partitions": 5},
                  state=RecordDict(), run_config={"num-partitions": 5, "dataset": "digits"})
replies = []
for kind in ("train", "evaluate"):
    with server_task_identity(1):
        content = RecordDict({"arrays": ArrayRecord(build_model("mlp", (1, 8, 8), 10).state_dict()),
                              "config": ConfigRecord(config)})
        message = Message(content=content, dst_node_id=1003, message_type=kind)
    set_message_id(message, f"m-{kind}")
    reply = app(message, context)
    replies.append(sorted(reply.content["metrics"].keys()))
print(json.dumps({"replies": replies, "modules": sorted(sys.modules)}))
"""


def run_child(cache_dir: Path) -> dict:
    env = {**os.environ, "FAIRFL_CACHE_DIR": str(cache_dir)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def heavy_modules(modules: list[str]) -> list[str]:
    return sorted(
        {m.split(".")[0] for m in modules if m.split(".")[0] in HEAVY_ROOTS}
        | {m for m in modules if m in HEAVY}
    )


def test_train_and_evaluate_with_a_warm_partition_cache_load_nothing_heavy(tmp_path, monkeypatch):
    from fairfl.data import client_data, load_client_data

    # An earlier message on this "machine" partitioned and filled the file cache.
    monkeypatch.setenv("FAIRFL_CACHE_DIR", str(tmp_path))
    client_data._partition_lists.cache_clear()
    load_client_data(dataset="digits", partitioner="dirichlet", partition_id=2, num_partitions=5)
    client_data._partition_lists.cache_clear()
    assert len(list((tmp_path / "partitions").iterdir())) == 1
    result = run_child(tmp_path)
    assert "train_loss" in result["replies"][0] and "eval_acc" in result["replies"][1]
    assert heavy_modules(result["modules"]) == []
