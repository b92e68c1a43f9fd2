"""Ditto's client side: the personal model's step, Context.state, disk and a whole run."""

import json

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict

from fairfl._compat import server_task_identity, set_message_id
from fairfl.client.adapter import fair_evaluate, fair_train
from fairfl.client.app import app
from fairfl.client.ditto import (
    STATE_RECORD,
    DittoSettings,
    ditto_settings,
    load_personal,
    personal_batches_step,
    save_personal,
    state_path,
)
from fairfl.contract import keys
from fairfl.models import build_model
from fairfl.report.results import round_metrics
from fairfl.report.tables import COLUMN_SETS
from fairfl.simulation.inprocess import run_inprocess

RUN_CONFIG = {"num-partitions": 4, "dataset": "digits", "model": "mlp"}
DITTO = {keys.DITTO_LAMBDA: 0.5, keys.DITTO_PERSONAL_EPOCHS: 1, keys.DITTO_PERSONAL_LR_SCALE: 1.0}


def _context(state_dir: str = "", state: RecordDict | None = None) -> Context:
    node_config = {"partition-id": 1, "num-partitions": 4, "ditto-state-dir": state_dir}
    return Context(
        run_id=7,
        node_id=9,
        node_config=node_config,
        state=state if state is not None else RecordDict(),
        run_config=RUN_CONFIG,
    )


def _message(kind: str, model: torch.nn.Module, config: dict) -> Message:
    round_config = {"lr": 0.1, "local-epochs": 1, "batch-size": 32, "server-round": 1, **config}
    with server_task_identity(1):
        content = RecordDict(
            {"arrays": ArrayRecord(model.state_dict()), "config": ConfigRecord(round_config)}
        )
        message = Message(content=content, dst_node_id=9, message_type=kind)
    set_message_id(message, f"m-{kind}")
    return message


def test_the_personal_step_in_torch_is_the_papers_step():
    # One parameter v = 2, F(v) = (v - 1)^2 / 2 on one "batch" (∇F = v - 1 = 1), w^t = 0,
    # λ = 0.5, η = 0.1: v - η(∇F + λ(v - w)) = 2 - 0.1 (1 + 1) = 1.8 (Algorithm 1, line 6).
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(2.0)

    def loss_fn(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return ((outputs - targets) ** 2).mean() / 2

    batches = [(torch.ones(1, 1), torch.ones(1, 1))]
    settings = DittoSettings(lam=0.5, epochs=1, lr=0.1)
    anchor = [torch.zeros(1, 1)]
    personal_batches_step(model, batches, loss_fn, anchor, settings, torch.device("cpu"))
    assert model.weight.item() == pytest.approx(1.8, abs=1e-7)


def test_settings_from_the_config():
    base = {keys.LR: 0.2, keys.LOCAL_EPOCHS: 3}
    assert ditto_settings(base) is None
    assert ditto_settings({**base, keys.DITTO_LAMBDA: 1.0}) == DittoSettings(1.0, 3, 0.2)
    scaled = {**base, **DITTO, keys.DITTO_PERSONAL_LR_SCALE: 0.5}
    assert ditto_settings(scaled) == DittoSettings(0.5, 1, 0.1)
    with pytest.raises(ValueError, match=r"config ditto-lambda must be a finite number >= 0"):
        ditto_settings({**base, keys.DITTO_LAMBDA: -1.0})
    with pytest.raises(ValueError, match=r"'ditto-personal-epochs' must be int, got str"):
        ditto_settings({**base, **DITTO, keys.DITTO_PERSONAL_EPOCHS: "2"})
    with pytest.raises(ValueError, match=r"'ditto-personal-lr-scale' must be float, got bool"):
        ditto_settings({**base, **DITTO, keys.DITTO_PERSONAL_LR_SCALE: True})


def test_personal_model_lives_in_context_state_across_rounds():
    torch.manual_seed(0)
    model = build_model("mlp", (1, 8, 8), 10)
    context = _context()
    app(_message("train", model, DITTO), context)
    first = context.state[STATE_RECORD].to_numpy_ndarrays()
    sent = [v.numpy() for v in model.state_dict().values()]
    assert any(not np.array_equal(a, b) for a, b in zip(first, sent, strict=True))
    app(_message("train", model, DITTO), context)  # round 2 starts from round 1's v_k
    second = context.state[STATE_RECORD].to_numpy_ndarrays()
    assert any(not np.array_equal(a, b) for a, b in zip(first, second, strict=True))
    reply = app(_message("evaluate", model, {keys.DITTO_PERSONAL: True}), context)
    metrics = reply.content[keys.METRICS]
    assert keys.PERSONAL_EVAL_ACC in metrics
    assert metrics[keys.PERSONAL_EVAL_LOSS] != metrics[keys.EVAL_LOSS]


def test_a_client_that_never_trained_reports_the_global_model():
    model = build_model("mlp", (1, 8, 8), 10)
    reply = app(_message("evaluate", model, {keys.DITTO_PERSONAL: True}), _context())
    metrics = reply.content[keys.METRICS]
    assert metrics[keys.PERSONAL_EVAL_ACC] == metrics[keys.EVAL_ACC]
    assert metrics[keys.PERSONAL_EVAL_LOSS] == metrics[keys.EVAL_LOSS]


def test_disk_state_survives_a_restart(tmp_path):
    torch.manual_seed(1)
    model = build_model("mlp", (1, 8, 8), 10)
    before = _context(str(tmp_path))
    app(_message("train", model, DITTO), before)
    path = state_path(tmp_path, 7, 1)
    assert path.exists() and not list(path.parent.glob("*.tmp"))
    # A restarted SuperNode: a fresh Context with empty state, the same node config.
    after = _context(str(tmp_path))
    received = ArrayRecord(model.state_dict())
    restored = load_personal(after, 1, received)
    for a, b in zip(
        restored.to_numpy_ndarrays(),
        before.state[STATE_RECORD].to_numpy_ndarrays(),
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)
    assert STATE_RECORD in after.state
    # Another run id does not inherit it: it starts from the received model.
    other = Context(7 + 1, 9, after.node_config, RecordDict(), RUN_CONFIG)
    assert load_personal(other, 1, received) is received


def test_a_kept_model_of_another_shape_is_refused(tmp_path):
    context = _context(str(tmp_path))
    save_personal(context, 1, ArrayRecord({"w": Array(np.zeros(3, np.float32))}))
    fresh = _context(str(tmp_path))
    with pytest.raises(ValueError, match=r"client 1's .*client-1.npz holds a personal model"):
        load_personal(fresh, 1, ArrayRecord({"w": Array(np.zeros(2, np.float32))}))


def test_ditto_through_the_inprocess_runner(tmp_path):
    run_inprocess(
        {
            "strategy": "ditto",
            "num-partitions": 4,
            "num-server-rounds": 2,
            "local-epochs": 1,
            "ditto-lambda": 0.1,
            "out-dir": str(tmp_path),
        }
    )
    rounds = [json.loads(line) for line in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    assert len(rounds) == 2
    for entry in rounds:
        assert len(entry["clients"]) == 4
        assert all("personal_eval_acc" in c for c in entry["clients"])
        assert entry["personal_metrics"]["num-clients"] == 4
        personal = [c["personal_eval_acc"] for c in entry["clients"]]
        assert entry["personal_metrics"]["acc-mean"] == pytest.approx(np.mean(personal))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["final_personal_metrics"] == rounds[-1]["personal_metrics"]
    # fairfl compare's tables recompute them from the clients ("personal" column set)
    recomputed = round_metrics(rounds[-1])
    for column in COLUMN_SETS["personal"]:
        assert column.metric in recomputed
    assert recomputed["personal-acc-worst-10"] == pytest.approx(
        rounds[-1]["personal_metrics"]["acc-worst-10"], abs=1e-12
    )


def test_fair_train_and_fair_evaluate_run_ditto_on_a_users_model_and_loader(tmp_path, sgd_train_fn):
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
    data = torch.utils.data.TensorDataset(torch.randn(12, 4), torch.randint(0, 3, (12,)))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    loss_fn = torch.nn.CrossEntropyLoss()
    context = _context(str(tmp_path))
    sent = _message("train", model, DITTO)
    reply = fair_train(sent, model, loader, loss_fn, sgd_train_fn, partition_id=1, context=context)
    # model holds the trained global weights w_k again, as the reply does
    for a, b in zip(
        reply[keys.ARRAYS].to_numpy_ndarrays(),
        [v.numpy() for v in model.state_dict().values()],
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)
    personal = context.state[STATE_RECORD].to_numpy_ndarrays()
    assert any(
        not np.array_equal(a, b)
        for a, b in zip(personal, reply[keys.ARRAYS].to_numpy_ndarrays(), strict=True)
    )
    assert state_path(tmp_path, 7, 1).exists()
    asked = _message("evaluate", model, {keys.DITTO_PERSONAL: True})
    metrics = fair_evaluate(asked, model, loader, loss_fn, partition_id=1, context=context)[
        keys.METRICS
    ]
    assert metrics[keys.PERSONAL_EVAL_LOSS] != metrics[keys.EVAL_LOSS]
    plain = fair_evaluate(asked, model, loader, loss_fn, partition_id=1)[keys.METRICS]
    assert keys.PERSONAL_EVAL_ACC not in plain


def test_fair_train_takes_the_personal_step_beside_qfedsgds_gradient(sgd_train_fn):
    # ditto+qfedsgd: the reply is ∇F_k(w^t), no global step; v_k still moves, and the
    # model holds w^t again afterwards.
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
    before = [v.detach().clone().numpy() for v in model.state_dict().values()]
    data = torch.utils.data.TensorDataset(torch.randn(12, 4), torch.randint(0, 3, (12,)))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    context = _context()
    sent = _message("train", model, {**DITTO, keys.FULL_GRADIENT: True})
    reply = fair_train(
        sent,
        model,
        loader,
        torch.nn.CrossEntropyLoss(),
        sgd_train_fn,
        partition_id=1,
        context=context,
    )
    assert keys.GRADIENT in reply and keys.ARRAYS not in reply
    after = [v.numpy() for v in model.state_dict().values()]
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)
    personal = context.state[STATE_RECORD].to_numpy_ndarrays()
    assert all(p.shape == b.shape for p, b in zip(personal, before, strict=True))
    assert any(not np.array_equal(p, b) for p, b in zip(personal, before, strict=True))
