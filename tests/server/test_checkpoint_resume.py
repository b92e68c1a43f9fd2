"""Crash and resume: a run killed after round k and resumed ends with the same model."""

import json
import random

import numpy as np
import pytest

from fairfl.server.checkpoint import (
    CHECKPOINT_FILE,
    capture_random_state,
    load_checkpoint,
    restore_random_state,
)
from fairfl.simulation import run_inprocess

CONFIG = {"num-partitions": 4, "num-server-rounds": 4, "lr": 0.1, "fraction-train": 0.75}


class ServerCrashError(RuntimeError):
    pass


def crash_in_round(round_number):
    def reply_filter(instruction, reply):
        if int(instruction.content["config"]["server-round"]) == round_number:
            raise ServerCrashError(f"killed in round {round_number}")
        return reply

    return reply_filter


def rounds_of(path):
    return [json.loads(line) for line in (path / "rounds.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("strategy", ["fedavg"])
def test_resumed_run_ends_with_the_uninterrupted_model(tmp_path, strategy):
    # fraction-train 0.75 makes Flower sample nodes with `random`: the resumed run must
    # restore that state too, or it would train other clients in rounds 3 and 4.
    config = {**CONFIG, "strategy": strategy}
    whole = run_inprocess({**config, "out-dir": str(tmp_path / "whole")})

    crashed_dir = tmp_path / "crashed"
    with pytest.raises(ServerCrashError):
        run_inprocess({**config, "out-dir": str(crashed_dir)}, reply_filter=crash_in_round(3))
    assert load_checkpoint(crashed_dir / CHECKPOINT_FILE).server_round == 2
    resumed = run_inprocess(
        {**config, "out-dir": str(crashed_dir), "resume-from": str(crashed_dir / CHECKPOINT_FILE)}
    )
    for key, array in whole.arrays.items():
        np.testing.assert_array_equal(resumed.arrays[key].numpy(), array.numpy())
    assert [r["round"] for r in rounds_of(crashed_dir)] == [1, 2, 3, 4]
    assert [r["metrics"] for r in rounds_of(crashed_dir)] == [
        r["metrics"] for r in rounds_of(tmp_path / "whole")
    ]


def test_random_state_round_trips():
    random.seed(5)
    np.random.seed(6)
    python_state, numpy_state = capture_random_state()
    expected = (random.random(), np.random.rand())
    random.seed(0)
    np.random.seed(0)
    restore_random_state(python_state, numpy_state)
    assert (random.random(), np.random.rand()) == expected


def test_missing_checkpoint_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="resume-from: no checkpoint at"):
        load_checkpoint(tmp_path / "nope.npz")
    np.savez(tmp_path / "other.npz", x=np.zeros(1))
    with pytest.raises(ValueError, match="is not a fairfl checkpoint"):
        load_checkpoint(tmp_path / "other.npz")
