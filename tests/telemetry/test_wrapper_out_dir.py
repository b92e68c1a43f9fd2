"""with_telemetry's folder: named in its first log line, never overwritten silently, and
the weights λ_i of fairfl's own rules in each round's record (issue 40).

Runs examples/quickstart-telemetry's ClientApp (Flower's quickstart client) in this
process on fairfl's in-memory Grid.
"""

import json
import logging
import sys
from pathlib import Path

import pytest
from flwr.app import ArrayRecord, ConfigRecord
from flwr.serverapp.strategy import FedAvg

from fairfl._compat import server_task_identity
from fairfl.simulation.inprocess import InMemoryGrid, node_configs_for
from fairfl.strategies import AFL
from fairfl.strategies.core.base import TrainRoundRecord
from fairfl.telemetry import with_telemetry
from fairfl.telemetry.wrapper import RoundRecorder

pytest.importorskip("torch")
pytest.importorskip("sklearn")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "quickstart-telemetry"
CONFIG = {"lr": 0.1, "local-epochs": 1, "fraction-train": 1.0}


@pytest.fixture(scope="module")
def client_app():
    sys.path.insert(0, str(EXAMPLE))
    try:
        from telemetry_quickstart import client_app, task

        yield client_app.app, task
    finally:
        sys.path.remove(str(EXAMPLE))
        for name in [m for m in sys.modules if m.startswith("telemetry_quickstart")]:
            del sys.modules[name]


def run(client_app, strategy, out_dir, **options):
    app, task = client_app
    config = {**CONFIG, "out-dir": str(out_dir)}
    grid = InMemoryGrid(app, node_configs_for(3), config)
    wrapped = with_telemetry(strategy, config, **options)
    with server_task_identity(grid.run_id):
        wrapped.start(
            grid,
            ArrayRecord(task.Net().state_dict()),
            num_rounds=1,
            train_config=ConfigRecord({"lr": 0.1}),
        )
    return [json.loads(x) for x in (out_dir / "rounds.jsonl").read_text().splitlines()]


def test_the_folder_is_named_and_a_second_run_is_refused_unless_told(
    client_app, tmp_path, monkeypatch, caplog
):
    monkeypatch.chdir(tmp_path)  # a relative out-dir lands under the ServerApp's cwd
    with caplog.at_level(logging.INFO, logger="fairfl"):
        run(client_app, FedAvg(), Path("runs/a"))
    first = next(r.getMessage() for r in caplog.records if r.name.startswith("fairfl"))
    assert first == f"telemetry: FedAvg's per-client records go to {tmp_path / 'runs' / 'a'}"
    before = (tmp_path / "runs/a/rounds.jsonl").read_text()
    with pytest.raises(FileExistsError, match=r"runs/a already holds a run's records \(rounds"):
        run(client_app, FedAvg(), Path("runs/a"))
    assert (tmp_path / "runs/a/rounds.jsonl").read_text() == before  # untouched
    lines = run(client_app, FedAvg(), Path("runs/a"), overwrite=True)
    assert [line["round"] for line in lines] == [1]  # replaced, not appended
    assert lines[0]["run_id"] != json.loads(before)["run_id"]


def test_a_fairfl_rules_weights_are_recorded(client_app, tmp_path):
    # AFL on Flower's quickstart client (its train_loss is the loss AFL reads here).
    lines = run(client_app, AFL(train_loss_key="train_loss", min_available_nodes=3), tmp_path)
    weights = lines[0]["train"]["weights"]
    assert len(weights) == 3
    assert sum(w["weight"] for w in weights) == pytest.approx(1.0)  # λ on the simplex
    assert lines[0]["train"]["diagnostics"]["lambda-sum"] == pytest.approx(1.0)


def test_a_rule_record_fills_the_train_entry_and_others_leave_it_empty():
    recorder = RoundRecorder("run", "eval_acc", "eval_loss", "num-examples")
    recorder.trained = True
    record = TrainRoundRecord(
        accepted=[7, 9],
        partition_ids={7: 0},
        weights={7: 0.25, 9: 0.75},
        diagnostics={"lambda-max": 0.75},
    )
    train = recorder.entry(1, record)["train"]
    assert train["weights"] == [
        {"node_id": 7, "partition_id": 0, "weight": 0.25},
        {"node_id": 9, "partition_id": None, "weight": 0.75},
    ]
    assert train["diagnostics"] == {"lambda-max": 0.75} and train["skipped"] is None
    recorder.trained = True
    assert recorder.entry(2)["train"]["weights"] == []
