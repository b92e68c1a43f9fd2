"""The in-process runner: a real federation in one process, results files, faults."""

import json

import numpy as np
import pytest

from fairfl.simulation import run_inprocess

SMALL = {"num-partitions": 5, "num-server-rounds": 3, "lr": 0.1, "local-epochs": 2}


def test_three_rounds_improve_accuracy_and_write_results(tmp_path):
    out = run_inprocess({**SMALL, "out-dir": str(tmp_path)})
    lines = [json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    assert [line["round"] for line in lines] == [1, 2, 3]
    first, last = lines[0]["metrics"]["acc-mean"], lines[-1]["metrics"]["acc-mean"]
    assert last > first + 0.10, (first, last)  # fractions: 10 accuracy points
    clients = lines[-1]["clients"]
    assert sorted(c["partition_id"] for c in clients) == [0, 1, 2, 3, 4]
    assert all(c["num_examples"] > 0 and 0 <= c["eval_acc"] <= 1 for c in clients)
    weights = lines[-1]["train"]["weights"]
    assert sum(w["weight"] for w in weights) == pytest.approx(1.0)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["rounds"] == 3 and summary["strategy"] == "FedAvg"
    # Self-describing results: each round line names its rule, the summary the source.
    assert {line["strategy"] for line in lines} == {"FedAvg"}
    revision = summary["environment"]["revision"]  # the tests run from a git checkout
    assert len(revision["commit"]) == 40 and isinstance(revision["modified"], bool)
    assert summary["final_metrics"]["acc-mean"] == pytest.approx(last)
    assert set(summary["test_samples_per_client"]) == {"0", "1", "2", "3", "4"}
    saved = np.load(tmp_path / "final_model.npz")
    for key, array in out.arrays.items():
        np.testing.assert_array_equal(saved[key], array.numpy())


def test_same_seed_same_model(tmp_path):
    a = run_inprocess({**SMALL, "num-server-rounds": 2, "out-dir": str(tmp_path / "a")})
    b = run_inprocess({**SMALL, "num-server-rounds": 2, "out-dir": str(tmp_path / "b")})
    for key, array in a.arrays.items():
        np.testing.assert_array_equal(array.numpy(), b.arrays[key].numpy())


def test_silent_and_broken_clients_do_not_stop_the_round(tmp_path):
    def faults(instruction, reply):
        node = instruction.metadata.dst_node_id
        if node == 1001:
            return None  # dropout: no reply at all
        if node == 1002 and instruction.metadata.message_type == "train":
            arrays = reply.content["arrays"]
            first = next(iter(arrays))
            poisoned = arrays[first].numpy().copy()
            poisoned.flat[0] = np.nan
            from flwr.app import Array

            arrays[first] = Array(poisoned)
        return reply

    out = run_inprocess({**SMALL, "out-dir": str(tmp_path)}, reply_filter=faults)
    lines = [json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    for line in lines:
        assert line["train"]["accepted"] == 3
        assert "1002" in line["train"]["dropped"]
        assert "contains nan" in line["train"]["dropped"]["1002"]
        assert len(line["clients"]) == 4
        assert line["sampled"] == {"train": 5, "evaluate": 5}
        assert line["metrics"]["num-clients"] == 4
    assert all(np.isfinite(a.numpy()).all() for a in out.arrays.values())


def test_invalid_run_config_names_the_key_and_choices(tmp_path):
    with pytest.raises(
        ValueError, match=r"run config strategy must be one of \(.*'fedavg'.*\), got 'nope'"
    ):
        run_inprocess({"strategy": "nope", "out-dir": str(tmp_path)})
    with pytest.raises(ValueError, match=r"run config lr must be > 0, got -1\.0"):
        run_inprocess({"lr": -1.0, "out-dir": str(tmp_path)})
    with pytest.raises(ValueError, match=r"run config dataset must be one of"):
        run_inprocess({"dataset": "imagenet", "out-dir": str(tmp_path)})


def test_evaluate_every_skips_rounds_but_always_evaluates_the_last(tmp_path):
    run_inprocess({**SMALL, "num-server-rounds": 5, "evaluate-every": 2, "out-dir": str(tmp_path)})
    lines = [json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    evaluated = [line["round"] for line in lines if line["metrics"]["num-clients"]]
    assert evaluated == [2, 4, 5]
    assert [line["sampled"]["evaluate"] for line in lines] == [0, 5, 0, 5, 5]
    assert all(line["train"]["accepted"] == 5 for line in lines)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["final_metrics"]["num-clients"] == 5


def test_evaluate_every_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="evaluate-every"):
        run_inprocess({**SMALL, "evaluate-every": 0, "out-dir": str(tmp_path)})


def test_skipped_evaluations_do_not_warn(tmp_path, caplog):
    run_inprocess({**SMALL, "num-server-rounds": 3, "evaluate-every": 3, "out-dir": str(tmp_path)})
    assert "has no usable reply" not in caplog.text


@pytest.mark.parametrize("strategy", ["fedavg", "qfedsgd", "equitable", "rcfl", "propfair"])
def test_reusing_one_model_per_worker_matches_a_fresh_copy_per_message(
    tmp_path, monkeypatch, strategy
):
    # The ClientApp loads every message into one module per worker thread; the old path
    # deep-copied a template per message. Same seed, same messages: bit-identical runs.
    import copy

    from fairfl.client import app as client_app
    from fairfl.models import build_model

    config = {**SMALL, "num-server-rounds": 2, "strategy": strategy}
    reused = run_inprocess({**config, "out-dir": str(tmp_path / "reused")})
    templates: dict[tuple, object] = {}

    def fresh_copy(name, input_shape, num_classes, device):
        key = (name, input_shape, num_classes)
        if key not in templates:
            templates[key] = build_model(name, input_shape, num_classes, seed=0)
        return copy.deepcopy(templates[key]).to(device)

    monkeypatch.setattr(client_app, "_worker_model", fresh_copy)
    copied = run_inprocess({**config, "out-dir": str(tmp_path / "copied")})
    assert reused.arrays.keys() == copied.arrays.keys()
    for key, array in reused.arrays.items():
        np.testing.assert_array_equal(array.numpy(), copied.arrays[key].numpy(), err_msg=key)
    rounds = [
        [
            json.loads(x)["clients"]
            for x in (tmp_path / run / "rounds.jsonl").read_text().splitlines()
        ]
        for run in ("reused", "copied")
    ]
    assert rounds[0] == rounds[1]  # every client's eval loss and accuracy, every round
