"""The drop-in wrapper on Flower's own FedAvg, run as examples/quickstart-telemetry's apps.

The example's ServerApp and ClientApp run in this process on fairfl's in-memory Grid
(each node calls the example's ClientApp; messages go through Flower's serialisation).
"""

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from flwr.app import ArrayRecord, ConfigRecord, Context, RecordDict
from flwr.proto.node_pb2 import NodeInfo
from flwr.serverapp.strategy import FedAvg

from fairfl._compat import server_task_identity
from fairfl.simulation.inprocess import InMemoryGrid, node_configs_for
from fairfl.telemetry import verify_ledger, with_telemetry

pytest.importorskip("torch")
pytest.importorskip("sklearn")
pytest.importorskip("tensorboard")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "quickstart-telemetry"


@pytest.fixture(scope="module")
def example():
    sys.path.insert(0, str(EXAMPLE))
    try:
        from telemetry_quickstart import client_app, server_app, task

        yield client_app, server_app, task
    finally:
        sys.path.remove(str(EXAMPLE))
        for name in [m for m in sys.modules if m.startswith("telemetry_quickstart")]:
            del sys.modules[name]


def _config(tmp_path, **extra):
    return {
        "num-server-rounds": 2,
        "fraction-train": 1.0,
        "lr": 0.1,
        "local-epochs": 1,
        "out-dir": str(tmp_path),
        "telemetry": "tensorboard",
        **extra,
    }


def _lines(out_dir):
    return [json.loads(x) for x in (out_dir / "rounds.jsonl").read_text().splitlines()]


def test_example_server_app_writes_per_client_records(example, tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    client_app, server_app, _ = example
    config = _config(tmp_path)
    grid = InMemoryGrid(client_app.app, node_configs_for(4), config)
    context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=config)
    with server_task_identity(grid.run_id):
        server_app.main(grid, context)
    printed = capsys.readouterr().out
    lines = _lines(tmp_path)
    assert [line["round"] for line in lines] == [1, 2]
    for line in lines:
        clients = line["clients"]
        assert [c["client_key"] for c in clients] == [f"node-{n}" for n in range(1001, 1005)]
        acc = [c["eval_acc"] for c in clients]
        assert line["metrics"]["acc-mean"] == pytest.approx(np.mean(acc))
        assert line["metrics"]["acc-worst-10"] == pytest.approx(min(acc))  # 4 clients: 1
        assert line["sampled"] == {"train": 4, "evaluate": 4}
        assert line["train"]["accepted"] == 4 and line["evaluate_dropped"] == {}
    # Flower's own aggregate (weighted by num-examples) is the record's weighted mean
    final = round(lines[-1]["metrics"]["acc-weighted-mean"], 4)
    assert f"2: {final}" in printed
    assert verify_ledger(tmp_path).ok
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["strategy"] == "FedAvg"
    (run_dir,) = (tmp_path / "telemetry" / "tensorboard").iterdir()
    events = EventAccumulator(str(run_dir))
    events.Reload()
    assert [e.step for e in events.Scalars("client-acc/node-1003")] == [1, 2]


def _start(strategy, client_app, config, reply_filter=None, grid_class=InMemoryGrid, rounds=2):
    grid = grid_class(client_app, node_configs_for(3), config, reply_filter=reply_filter)
    from telemetry_quickstart.task import Net

    arrays = ArrayRecord(Net().state_dict())
    with server_task_identity(grid.run_id):
        return strategy.start(
            grid=grid,
            initial_arrays=arrays,
            num_rounds=rounds,
            train_config=ConfigRecord({"lr": 0.1}),
        )


def test_wrapped_fedavg_computes_what_fedavg_computes(example, tmp_path):
    client_app, _, task = example
    task.torch.manual_seed(0)
    plain = _start(FedAvg(), client_app.app, _config(tmp_path / "a"))
    task.torch.manual_seed(0)
    config = _config(tmp_path / "b")
    wrapped = _start(with_telemetry(FedAvg(), config), client_app.app, config)
    # Two plain FedAvg runs here already differ by up to 3e-8 (float32 training on
    # several threads), so equality is up to that.
    for key, array in plain.arrays.items():
        np.testing.assert_allclose(array.numpy(), wrapped.arrays[key].numpy(), atol=1e-6)
    for name, value in plain.evaluate_metrics_clientapp[2].items():
        assert wrapped.evaluate_metrics_clientapp[2][name] == pytest.approx(value, abs=1e-6)


def test_drops_errors_and_timeouts_are_recorded(example, tmp_path):
    client_app, _, _ = example

    def faults(instruction, reply):
        node, kind = instruction.metadata.dst_node_id, instruction.metadata.message_type
        if node == 1002 and kind == "evaluate":
            return None  # never answers: Flower's send_and_receive returns without it
        if node == 1003 and kind == "train":
            from flwr.app import Error, Message

            return Message(Error(code=0, reason="out of memory"), reply_to=instruction)
        return reply

    config = _config(tmp_path)
    _start(with_telemetry(FedAvg(), config), client_app.app, config, reply_filter=faults, rounds=1)
    for line in _lines(tmp_path):
        assert line["evaluate_dropped"] == {"1002": "no reply before the round's timeout"}
        assert line["train"]["dropped"] == {"1003": "error reply (code 0): out of memory"}
        assert line["train"]["accepted"] == 2
        assert [c["node_id"] for c in line["clients"]] == [1001, 1003]


class KeyedGrid(InMemoryGrid):
    """fairfl's in-memory Grid answering get_nodes() with Flower's NodeInfo and a key."""

    def get_nodes(self):
        return [
            NodeInfo(node_id=node, public_key=f"public key of {node}".encode())
            for node in self.get_node_ids()
        ]


def test_entries_carry_the_supernodes_public_key_fingerprint(example, tmp_path):
    client_app, _, _ = example
    config = _config(tmp_path, **{"telemetry": "", "telemetry-key": "node-key"})
    _start(with_telemetry(FedAvg(), config), client_app.app, config, grid_class=KeyedGrid, rounds=1)
    line = _lines(tmp_path)[0]
    expected = "sha256:" + hashlib.sha256(b"public key of 1002").hexdigest()
    assert line["node_keys"]["1002"] == expected
    client = next(c for c in line["clients"] if c["node_id"] == 1002)
    assert client["node_key"] == client["client_key"] == expected
