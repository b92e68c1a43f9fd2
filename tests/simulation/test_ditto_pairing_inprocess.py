"""Ditto with another global rule, through the in-process runner (spec-ditto §5).

Algorithm 1 leaves the server to the global rule: with TERM there, the global model and
TERM's weights are those of TERM alone for every λ, while every client also reports its
personal model. With q-FedSGD there, the clients send a gradient and train no global
step, and still take the personal one.
"""

import json
import logging

import numpy as np
import pytest

from fairfl.simulation import run_inprocess

pytestmark = pytest.mark.integration

CONFIG = {
    "num-partitions": 3,
    "num-server-rounds": 1,
    "local-epochs": 1,
    "term-alpha": 1.0,
    "seed": 5,
}


def _run(tmp_path, name, **config):
    out = tmp_path / name
    result = run_inprocess({**CONFIG, **config, "out-dir": str(out)})
    lines = [json.loads(x) for x in (out / "rounds.jsonl").read_text().splitlines()]
    return result, lines, json.loads((out / "summary.json").read_text())


def test_ditto_term_aggregates_as_term_and_reports_personal_models(tmp_path):
    paired, lines, summary = _run(
        tmp_path, "ditto-term", strategy="ditto+term", **{"ditto-lambda": 0.1}
    )
    alone, term_lines, _ = _run(tmp_path, "term", strategy="term")
    assert summary["strategy"] == "Ditto+TERM"
    # The server is TERM's: the same weights each round and the same global model.
    for line, term_line in zip(lines, term_lines, strict=True):
        assert line["train"]["weights"] == term_line["train"]["weights"]
        assert [c["eval_acc"] for c in line["clients"]] == [
            c["eval_acc"] for c in term_line["clients"]
        ]
    for key, array in alone.arrays.items():
        np.testing.assert_array_equal(paired.arrays[key].numpy(), array.numpy())
    # And it is not FedAvg's: TERM (α = 1) tilted the weights of round 1 to the clients'
    # losses before training, so they are not those of a FedAvg run.
    _, fedavg_lines, _ = _run(tmp_path, "fedavg", strategy="fedavg")
    tilted = [w["weight"] for w in lines[0]["train"]["weights"]]
    plain = [w["weight"] for w in fedavg_lines[0]["train"]["weights"]]
    assert sum(tilted) == pytest.approx(1.0)
    assert not np.allclose(tilted, plain, atol=1e-6)
    # Ditto's half: every client reports its personal model, and TERM alone does not.
    for line in lines:
        personal = [c["personal_eval_acc"] for c in line["clients"]]
        assert len(personal) == 3
        assert line["personal_metrics"]["acc-mean"] == pytest.approx(np.mean(personal), abs=1e-12)
    assert [c["personal_eval_loss"] for c in lines[-1]["clients"]] != [
        c["eval_loss"] for c in lines[-1]["clients"]
    ]
    assert all("personal_eval_acc" not in c for line in term_lines for c in line["clients"])


def test_ditto_qfedsgd_takes_the_personal_step_beside_the_gradient(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    paired, lines, summary = _run(
        tmp_path, "ditto-qfedsgd", strategy="ditto+qfedsgd", **{"ditto-lambda": 0.1}
    )
    alone, alone_lines, _ = _run(tmp_path, "qfedsgd", strategy="qfedsgd")
    assert summary["strategy"] == "Ditto+q-FedSGD"
    for key, array in alone.arrays.items():  # the server step is q-FedSGD's
        np.testing.assert_array_equal(paired.arrays[key].numpy(), array.numpy())
    clients = lines[-1]["clients"]
    assert [c["eval_loss"] for c in clients] == [c["eval_loss"] for c in alone_lines[-1]["clients"]]
    # The personal models trained (a local epoch from w^t), so they are not w^{t+1}.
    assert all(c["personal_eval_loss"] != c["eval_loss"] for c in clients)
    # The progress lines show both models.
    mean = 100 * lines[-1]["personal_metrics"]["acc-mean"]
    assert f"clients answered | personal models: mean {mean:.2f}" in caplog.text
    assert f"over 3 clients | personal models: mean {mean:.2f}" in caplog.text
