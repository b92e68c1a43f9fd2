"""Ditto's server side: the personal step's math, its parameters, config and metrics."""

import numpy as np
import pytest
from flwr.app import MetricRecord

from fairfl.contract import keys
from fairfl.contract.replies import ReplyError, read_evaluate_reply, write_evaluate_reply
from fairfl.strategies import STRATEGIES, Ditto, build_strategy
from fairfl.strategies.ditto import DittoParameters, personal_step
from fairfl.telemetry.sinks import RoundRecord
from tests.conftest import make_reply


# ------------------------------------------------------------------ the personal step
@pytest.mark.parametrize(
    ("v", "g", "w", "lam", "lr", "expected"),
    [
        # v - η(g + λ(v - w)) = [1, -2] - 0.1([0.5, 1] + 0.5[1, -2]) = [0.9, -2.0]
        ([1.0, -2.0], [0.5, 1.0], [0.0, 0.0], 0.5, 0.1, [0.9, -2.0]),
        # λ = 0 is plain SGD on F_k: [1, -2] - 0.1[0.5, 1] = [0.95, -2.1]
        ([1.0, -2.0], [0.5, 1.0], [0.0, 0.0], 0.0, 0.1, [0.95, -2.1]),
        # At a stationary point of F_k the pull is toward w: 1 - 0.25 * 2 (1 - 3) = 2
        ([1.0], [0.0], [3.0], 2.0, 0.25, [2.0]),
        # v = w: the proximal term's gradient is 0, the step is SGD's: 3 - 0.5 * 4 = 1
        ([3.0], [4.0], [3.0], 100.0, 0.5, [1.0]),
    ],
)
def test_personal_step_by_hand(v, g, w, lam, lr, expected):
    v, g, w = (np.array(a, dtype=np.float64) for a in (v, g, w))
    copies = (v.copy(), g.copy(), w.copy())
    out = personal_step(v, g, w, lam=lam, lr=lr)
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-15)
    for before, after in zip(copies, (v, g, w), strict=True):
        np.testing.assert_array_equal(before, after)  # inputs unchanged


def test_personal_step_with_lambda_lr_one_jumps_to_the_global_model():
    # η λ = 1 and ∇F_k = 0: v - (v - w) = w, one step lands on the global model.
    v, w = np.array([5.0, -1.0]), np.array([2.0, 4.0])
    np.testing.assert_allclose(personal_step(v, np.zeros(2), w, lam=2.0, lr=0.5), w)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lam": -0.1, "lr": 0.1}, r"lam must be >= 0, got -0.1"),
        ({"lam": 1.0, "lr": 0.0}, r"lr must be > 0, got 0.0"),
    ],
)
def test_personal_step_refuses_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        personal_step(np.zeros(2), np.zeros(2), np.zeros(2), **kwargs)


def test_personal_step_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match=r"must have one shape, got \(2,\), \(3,\) and \(2,\)"):
        personal_step(np.zeros(2), np.zeros(3), np.zeros(2), lam=1.0, lr=0.1)


# ------------------------------------------------------------------ the rule's declaration
def test_parameters_defaults_grid_and_keys():
    specs = DittoParameters.specs()
    assert DittoParameters.defaults() == {
        "ditto-lambda": 1.0,
        "ditto-personal-epochs": 0,
        "ditto-personal-lr-scale": 1.0,
    }
    # The paper's Appendix C: {0.05, 0.1, 0.2} under strong attacks, {0.1, 1, 2} otherwise.
    assert specs["lam"].grid == (0.05, 0.1, 0.2, 1.0, 2.0)
    assert STRATEGIES["ditto"].strategy is Ditto
    assert STRATEGIES["ditto"].parameters == {
        "ditto-lambda": "lam",
        "ditto-personal-epochs": "personal_epochs",
        "ditto-personal-lr-scale": "personal_lr_scale",
    }


@pytest.mark.parametrize(
    ("run_config", "message"),
    [
        ({"ditto-lambda": -1.0}, r"run config ditto-lambda \(rule ditto\): lam must be >= 0"),
        (
            {"ditto-personal-epochs": -1},
            r"run config ditto-personal-epochs \(rule ditto\): personal_epochs must be an int",
        ),
        (
            {"ditto-personal-lr-scale": 0.0},
            r"run config ditto-personal-lr-scale \(rule ditto\): personal_lr_scale must be > 0",
        ),
    ],
)
def test_bad_run_config_names_the_key(run_config, message):
    with pytest.raises(ValueError, match=message):
        build_strategy("ditto", run_config)


def test_train_config_sends_the_personal_settings():
    strategy = build_strategy(
        "ditto", {"ditto-lambda": 0.1, "ditto-personal-epochs": 3, "ditto-personal-lr-scale": 0.5}
    )
    assert strategy.train_config(1) == {
        keys.DITTO_LAMBDA: 0.1,
        keys.DITTO_PERSONAL_EPOCHS: 3,
        keys.DITTO_PERSONAL_LR_SCALE: 0.5,
    }


# ------------------------------------------------------------------ personal metrics
def _evaluate_reply(node, acc, loss, personal, n=10):
    content = write_evaluate_reply(
        num_examples=n, eval_loss=loss, eval_acc=acc, partition_id=node, personal=personal
    )
    return make_reply(node, None, dict(content[keys.METRICS]))


def test_aggregate_evaluate_reports_personal_fairness_metrics():
    strategy = Ditto(min_available_nodes=0)
    replies = [
        _evaluate_reply(1, 0.5, 1.0, (0.4, 0.9), n=10),
        _evaluate_reply(2, 0.7, 0.8, (0.2, 0.6), n=30),
    ]
    metrics = strategy.aggregate_evaluate(1, replies)
    assert isinstance(metrics, MetricRecord)
    # Weighted by test samples: (10 * 0.9 + 30 * 0.6) / 40 = 0.675; loss (4 + 6) / 40 = 0.25
    assert metrics[keys.PERSONAL_EVAL_ACC] == pytest.approx(0.675, abs=1e-15)
    assert metrics[keys.PERSONAL_EVAL_LOSS] == pytest.approx(0.25, abs=1e-15)
    # Unweighted mean (0.9 + 0.6) / 2 = 0.75; worst client 0.6; the global model's 0.6.
    assert metrics["personal-acc-mean"] == pytest.approx(0.75, abs=1e-15)
    assert metrics["personal-acc-worst"] == pytest.approx(0.6, abs=1e-15)
    assert metrics["acc-mean"] == pytest.approx(0.6, abs=1e-15)
    kept = strategy.evaluations[1]
    assert [(r.personal_eval_acc, r.personal_eval_loss) for r in kept] == [(0.9, 0.4), (0.6, 0.2)]


def test_a_reply_with_half_the_personal_pair_is_refused():
    metrics = {keys.NUM_EXAMPLES: 4, keys.EVAL_LOSS: 0.3, keys.EVAL_ACC: 0.5}
    with pytest.raises(
        ReplyError, match=r"node 3.*metrics\['personal-eval_loss'\] is missing while "
    ):
        read_evaluate_reply(make_reply(3, None, {**metrics, keys.PERSONAL_EVAL_ACC: 0.5}))
    with pytest.raises(ReplyError, match=r"metrics\['personal-eval_acc'\] must be <= 1"):
        read_evaluate_reply(
            make_reply(
                3, None, {**metrics, keys.PERSONAL_EVAL_ACC: 1.5, keys.PERSONAL_EVAL_LOSS: 0.1}
            )
        )


def test_telemetry_scalars_carry_the_personal_metrics():
    entry = {
        "round": 1,
        "metrics": {"acc-mean": 0.5},
        "personal_metrics": {"acc-mean": 0.75, "acc-worst-10": 0.6},
    }
    scalars = RoundRecord(entry, {}, 0).scalars()
    assert scalars["fairness/acc-mean"] == 0.5
    assert scalars["fairness/personal-acc-mean"] == 0.75
    assert scalars["fairness/personal-acc-worst-10"] == 0.6
