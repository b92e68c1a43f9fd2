"""Every sink read back with its own library: TensorBoard, MLflow, W&B (offline), Prometheus.

One RecordStream feeds all sinks with the same three rounds of four clients; each test
reads what its tracker stored and compares it with the numbers put in.
"""

import json
import math
import struct
import urllib.request

import pytest

from fairfl.telemetry.config import TelemetrySettings, is_loopback
from fairfl.telemetry.sinks import (
    MissingExtraError,
    MlflowSink,
    PrometheusSink,
    SinkStartError,
    TensorBoardSink,
    WandbSink,
    _require,
    build_sinks,
)
from fairfl.telemetry.stream import RecordStream

pytest.importorskip("tensorboard")
pytest.importorskip("mlflow")
pytest.importorskip("wandb")
pytest.importorskip("prometheus_client")

ACCURACY = {  # round -> accuracy of partitions 0..3
    1: [0.2, 0.4, 0.6, 0.8],
    2: [0.3, 0.5, 0.7, 0.9],
    3: [0.5, 0.5, 0.5, 0.5],
}
WORST_10 = {1: 0.2, 2: 0.3, 3: 0.5}  # floor(0.1 * 4) = 0 -> the single worst client


def _entry(round_: int) -> dict:
    from fairfl.metrics import fairness_metrics

    acc = ACCURACY[round_]
    return {
        "run_id": "run",
        "round": round_,
        "clients": [
            {"node_id": 100 + p, "partition_id": p, "num_examples": 10, "eval_acc": a}
            for p, a in enumerate(acc)
        ],
        "metrics": fairness_metrics(acc, [10] * 4, [1.0] * 4),
        "sampled": {"train": 5, "evaluate": 5},
        "evaluate_dropped": {"104": "no reply before the round's timeout"},
        "train": {"accepted": 4, "dropped": {"104": "x"}, "weights": [], "diagnostics": {}},
    }


def _feed(tmp_path, sinks, max_clients=100):
    stream = RecordStream(tmp_path / "rounds.jsonl", "f" * 64, sinks, max_clients=max_clients)
    for r in ACCURACY:
        stream.record(_entry(r))
    return stream


def test_tensorboard_event_files_read_back(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _feed(tmp_path, [TensorBoardSink(tmp_path / "tb")]).close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    worst = events.Scalars("fairness/acc-worst-10")
    assert [(e.step, round(e.value, 6)) for e in worst] == [(r, v) for r, v in WORST_10.items()]
    client_2 = events.Scalars("client-acc/2")
    assert [round(e.value, 6) for e in client_2] == [0.6, 0.7, 0.5]
    assert [e.value for e in events.Scalars("clients/sampled-evaluate")] == [5.0] * 3
    assert [e.value for e in events.Scalars("clients/dropped-train")] == [1.0] * 3
    # Gini of round 1 by hand: 0.25 (tests/telemetry/test_fairness_summary.py)
    assert events.Scalars("fairness/gini-index")[0].value == pytest.approx(0.25)


def test_mlflow_file_store_read_back(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = (tmp_path / "mlruns").as_uri()
    sink = MlflowSink(uri, run_name="run", params={"strategy": "fedavg", "lr": 0.1})
    _feed(tmp_path, [sink]).close()
    client = MlflowClient(tracking_uri=uri)
    run = client.search_runs([client.get_experiment_by_name("fairfl").experiment_id])[0]
    assert run.info.status == "FINISHED" and run.data.params == {"lr": "0.1", "strategy": "fedavg"}
    history = client.get_metric_history(run.info.run_id, "fairness/acc-worst-10")
    assert sorted((m.step, round(m.value, 6)) for m in history) == list(WORST_10.items())
    client_0 = client.get_metric_history(run.info.run_id, "client-acc/0")
    assert sorted((m.step, m.value) for m in client_0) == [(1, 0.2), (2, 0.3), (3, 0.5)]


def _wandb_records(path):
    """Records of a W&B transaction log (.wandb), decoded with wandb's own protobuf schema.

    The file is ``:W&B`` + magic 0xBEE1 + version (7 bytes), then LevelDB-log blocks of
    32 KiB whose chunks have a 7-byte header (CRC-32C, length, type: 1 full, 2 first,
    3 middle, 4 last).
    """
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records, pending, pos = [], b"", 7
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 1:
            records.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            records.append(pending + chunk)
        else:
            break
    parsed = []
    for raw in records:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        parsed.append(record)
    return parsed


@pytest.fixture
def wandb_home(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    yield
    import wandb

    wandb.teardown()  # stops the wandb-core service this test started


def test_wandb_is_offline_even_if_the_environment_says_online(tmp_path, monkeypatch, wandb_home):
    monkeypatch.setenv("WANDB_MODE", "online")
    _feed(tmp_path, [WandbSink(tmp_path / "wb", run_name="run", config={"lr": 0.1})]).close()
    import wandb

    wandb.teardown()  # the service writes the log asynchronously: stop it, so all is on disk
    (run_dir,) = (tmp_path / "wb" / "wandb").glob("offline-run-*")
    history = {}
    for record in _wandb_records(next(run_dir.glob("run-*.wandb"))):
        if record.WhichOneof("record_type") == "history":
            items = {
                item.nested_key[0] if not item.key else item.key: json.loads(item.value_json)
                for item in record.history.item
            }
            history[items["_step"]] = items
    assert sorted(history) == [1, 2, 3]
    assert {s: round(h["fairness/acc-worst-10"], 6) for s, h in history.items()} == WORST_10
    assert [history[s]["client-acc/3"] for s in (1, 2, 3)] == [0.8, 0.9, 0.5]


def _scrape(port):
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_prometheus_endpoint_scraped_and_label_cap(tmp_path):
    sink = PrometheusSink("127.0.0.1", 0)
    stream = _feed(tmp_path, [sink], max_clients=3)
    try:
        samples = _scrape(sink.port)
    finally:
        stream.close()
    assert samples[("fairfl_round", ())] == 3
    assert samples[("fairfl_accuracy_mean", ())] == pytest.approx(0.5)
    assert samples[("fairfl_accuracy_worst10", ())] == pytest.approx(0.5)
    assert samples[("fairfl_accuracy_std", ())] == pytest.approx(0.0)
    assert samples[("fairfl_jain_index", ())] == pytest.approx(1.0)
    assert math.isnan(samples[("fairfl_dp_gap", ())])  # no group_counts in these rounds
    assert samples[("fairfl_clients", (("phase", "train"), ("state", "sampled")))] == 5
    assert samples[("fairfl_clients", (("phase", "evaluate"), ("state", "answered")))] == 4
    assert samples[("fairfl_clients", (("phase", "evaluate"), ("state", "dropped")))] == 1
    labelled = {k[1][0][1] for k in samples if k[0] == "fairfl_client_accuracy"}
    assert labelled == {"0", "1", "2"}  # the cap: the first 3 client keys, sorted
    assert samples[("fairfl_clients_unlabelled", ())] == 1
    with pytest.raises(OSError):  # closed: the port no longer answers
        _scrape(sink.port)


def test_settings_choose_the_sinks_and_name_bad_ones(tmp_path):
    settings = TelemetrySettings.from_run_config({"telemetry": "tensorboard, mlflow"})
    sinks = build_sinks(settings, tmp_path, run_id="r", run_config={})
    assert [type(s).__name__ for s in sinks] == ["TensorBoardSink", "MlflowSink"]
    with pytest.raises(ValueError, match="run config telemetry: unknown sink 'grafana'"):
        TelemetrySettings(telemetry="tensorboard,grafana")
    with pytest.raises(ValueError, match="run config telemetry-port must be in"):
        TelemetrySettings(telemetry_port=70000)
    with pytest.raises(MissingExtraError, match=r'pip install "fairfl\[telemetry\]"'):
        _require("fairfl_no_such_tracker", "tensorboard")


def test_trackers_record_the_versions_and_the_machine(tmp_path):
    import importlib.metadata
    import platform

    settings = TelemetrySettings.from_run_config({"telemetry": "mlflow"})
    (sink,) = build_sinks(settings, tmp_path, run_id="r", run_config={"lr": 0.1})
    assert sink.params["lr"] == 0.1
    assert sink.params["version-flwr"] == importlib.metadata.version("flwr")
    assert sink.params["version-numpy"] == importlib.metadata.version("numpy")
    assert sink.params["version-python"] == platform.python_version()
    assert sink.params["machine-machine"] == platform.machine()
    assert {"version-fairfl", "version-torch", "machine-cpu-count"} <= set(sink.params)


# ------------------------------------------------------------------ failing to start
def _busy_port():
    """A socket listening on a loopback port (close it when done)."""
    import socket

    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    return holder, holder.getsockname()[1]


def test_busy_prometheus_port_names_the_key_and_writes_no_rounds_file(tmp_path):
    holder, port = _busy_port()
    tensorboard = TensorBoardSink(tmp_path / "tb")
    try:
        with pytest.raises(
            SinkStartError,
            match=rf"run config telemetry-port: .* 127\.0\.0\.1:{port} .*Address already in use",
        ):
            RecordStream(
                tmp_path / "rounds.jsonl",
                "f" * 64,
                [tensorboard, PrometheusSink("127.0.0.1", port)],
            )
    finally:
        holder.close()
    assert not (tmp_path / "rounds.jsonl").exists()  # trackers start before it is written
    assert tensorboard._writer is None  # the sink opened before the failure was closed


def test_busy_prometheus_port_leaves_the_out_dir_reusable(tmp_path):
    from fairfl.server.checkpoint import RESULT_FILES
    from fairfl.simulation import run_inprocess

    config = {
        "num-partitions": 2,
        "num-server-rounds": 1,
        "local-epochs": 1,
        "out-dir": str(tmp_path),
        "telemetry": "prometheus",
    }
    holder, port = _busy_port()
    try:
        with pytest.raises(SinkStartError, match="run config telemetry-port"):
            run_inprocess({**config, "telemetry-port": port})
    finally:
        holder.close()
    assert [name for name in RESULT_FILES if (tmp_path / name).exists()] == []
    # The same out-dir takes the rerun (no overwrite needed).
    outcome = run_inprocess({**config, "telemetry-port": 0})
    assert outcome.summary["status"] == "completed"


def test_unusable_host_and_telemetry_dir_name_their_keys(tmp_path):
    with pytest.raises(SinkStartError, match=r"run config telemetry-host: .*192\.0\.2\.1:0"):
        PrometheusSink("192.0.2.1", 0).open()  # TEST-NET-1: never a local address
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SinkStartError, match=r"run config telemetry-dir: the TensorBoardSink"):
        RecordStream(tmp_path / "rounds.jsonl", "f" * 64, [TensorBoardSink(blocker / "tb")])
    assert not (tmp_path / "rounds.jsonl").exists()


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1", False),
        ("example.org", False),
    ],
)
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_non_loopback_telemetry_host_warns(caplog):
    for host, warned in (("127.0.0.1", False), ("0.0.0.0", True)):
        caplog.clear()
        sink = PrometheusSink(host, 0)
        with caplog.at_level("WARNING", logger="fairfl.telemetry.sinks"):
            sink.open()
        sink.close()
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        if warned:
            assert len(warnings) == 1
            assert warnings[0].startswith(
                "telemetry-host 0.0.0.0 is not a loopback address: the Prometheus endpoint "
                "(no authentication) serves other machines"
            )
        else:
            assert warnings == []
