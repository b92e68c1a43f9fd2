"""``local-steps``: a round's budget in minibatch steps instead of epochs (FLamby's)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fairfl.client.training import train_local
from fairfl.models import build_model
from fairfl.settings import RunSettings


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(10, 13)).astype(np.float32), rng.integers(0, 2, 10).astype(np.int64)


def _train(**budget: int) -> tuple[int, dict[str, torch.Tensor]]:
    x, y = _data()
    model = build_model("binary-logreg", (13,), 2, seed=0)
    calls: list[int] = []

    def counted(loss: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return loss

    train_local(
        model,
        x,
        y,
        batch_size=4,
        lr=0.1,
        device=torch.device("cpu"),
        seed=5,
        batch_objective=counted,
        **budget,
    )
    return len(calls), model.state_dict()


@pytest.mark.parametrize(("steps", "expected"), [(1, 1), (3, 3), (7, 7), (100, 100)])
def test_steps_take_exactly_that_many_minibatch_steps(steps, expected):
    # 10 samples in batches of 4: a pass is 3 steps (4, 4, 2); 7 steps cross two passes.
    assert _train(epochs=1, steps=steps)[0] == expected


def test_no_steps_keeps_the_epochs():
    assert _train(epochs=2)[0] == 6  # 2 passes of 3 batches


def test_steps_of_one_pass_are_that_epoch_bit_for_bit():
    _, by_steps = _train(epochs=1, steps=3)
    _, by_epoch = _train(epochs=1)
    for key in by_epoch:
        assert torch.equal(by_steps[key], by_epoch[key]), key


def test_negative_steps_and_steps_on_no_data_are_refused():
    x, y = _data()
    model = build_model("binary-logreg", (13,), 2)
    common = {"epochs": 1, "batch_size": 4, "lr": 0.1, "device": torch.device("cpu"), "seed": 0}
    with pytest.raises(ValueError, match="steps >= 0"):
        train_local(model, x, y, steps=-1, **common)
    with pytest.raises(ValueError, match="cannot take 2 local steps on an empty training split"):
        train_local(model, x[:0], y[:0], steps=2, **common)


def test_the_run_config_key_is_checked():
    assert RunSettings.from_run_config({"local-steps": 100}).local_steps == 100
    with pytest.raises(ValueError, match="run config local-steps must be >= 0"):
        RunSettings.from_run_config({"local-steps": -1})
