"""Crash and resume: a run killed after round k and resumed ends with the same model.

Also: per-client state survives new node ids (keyed by partition id), a resume with other
settings is refused (fingerprint), and a run into another run's out-dir is refused.
"""

import json
import logging
import random

import numpy as np
import pytest

from fairfl.server.checkpoint import (
    CHECKPOINT_FILE,
    CheckpointError,
    FingerprintMismatchError,
    OutDirNotEmptyError,
    capture_random_state,
    load_checkpoint,
    restore_random_state,
    run_fingerprint,
)
from fairfl.settings import RunSettings
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


@pytest.mark.parametrize("sampling", ["uniform", "size-proportional"])
def test_resumed_run_ends_with_the_uninterrupted_model(tmp_path, sampling):
    # fraction-train 0.75 makes Flower sample nodes with `random`: the resumed run must
    # restore that state too, or it would train other clients in rounds 3 and 4. With
    # size-proportional sampling it must also keep the learnt n_k: without them round 3
    # would be a census of every node.
    config = {**CONFIG, "strategy": "fedavg", "sampling": sampling}
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
    trained = [r["train"]["accepted"] for r in rounds_of(crashed_dir)]
    # 4 nodes, 3 a round: round 1 is the census (all 4) when sampling by size.
    assert trained == ([4, 3, 3, 3] if sampling == "size-proportional" else [3, 3, 3, 3])


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
    with pytest.raises(CheckpointError, match=r"resume-from: .*other\.npz is not a fairfl"):
        load_checkpoint(tmp_path / "other.npz")


#: Every rule with per-client or cross-round state, in a setting that exercises it.
STATEFUL_RULES = {
    "afl": {"afl-lambda-lr": 0.5},
    "vred": {"vred-beta": 0.5},
    "semivred": {"semivred-beta": 0.5},
    "rcfl": {"rcfl-sampling": "with-replacement", "rcfl-alpha-rule": "uniform-cap"},
    "equitable": {"equitable-scope": "registry", "equitable-num-clusters": 2},
}
SMALL = {"num-partitions": 4, "num-server-rounds": 4, "lr": 0.1, "local-epochs": 1, "seed": 1}


def reversed_node_ids(num_partitions):
    """Node ids in the opposite order of the partitions, none shared with the defaults."""
    return {
        9000 - 7 * p: {"partition-id": p, "num-partitions": num_partitions}
        for p in range(num_partitions)
    }


@pytest.mark.parametrize("rule", sorted(STATEFUL_RULES))
def test_resume_with_new_node_ids_is_bit_identical(tmp_path, rule):
    # Flower's simulation engine gives every run new node ids: state keyed by node id
    # would be lost (AFL's lambda, RC-FL's n_i and draws, Equitable FL's registry) and
    # sums would run in another order. Keyed by partition id, nothing changes.
    config = {**SMALL, **STATEFUL_RULES[rule], "strategy": rule}
    whole = run_inprocess({**config, "out-dir": str(tmp_path / "whole")})
    crashed = tmp_path / "crashed"
    with pytest.raises(ServerCrashError):
        run_inprocess({**config, "out-dir": str(crashed)}, reply_filter=crash_in_round(3))
    resumed = run_inprocess(
        {**config, "out-dir": str(crashed), "resume-from": str(crashed / CHECKPOINT_FILE)},
        node_configs=reversed_node_ids(4),
    )
    for key, array in whole.arrays.items():
        np.testing.assert_array_equal(resumed.arrays[key].numpy(), array.numpy())
    assert resumed.strategy.state_dict() == whole.strategy.state_dict()
    assert [r["metrics"] for r in rounds_of(crashed)] == [
        r["metrics"] for r in rounds_of(tmp_path / "whole")
    ]


def test_rcfl_asks_new_nodes_for_their_key_before_sending_alpha(tmp_path):
    # RC-FL sends each node its own alpha_i before the node replies: after a resume with
    # new node ids it asks them (a client-key QUERY) instead of sending the shared alpha.
    config = {**SMALL, **STATEFUL_RULES["rcfl"], "strategy": "rcfl", "rcfl-sampling": "flower"}
    sent: dict[int, list[float]] = {}

    def record_alpha(instruction, reply):
        if instruction.metadata.message_type == "train":
            config_record = instruction.content["config"]
            partition = reply.content["metrics"]["partition-id"]
            sent.setdefault(int(config_record["server-round"]), []).append(
                (partition, config_record["rcfl-alpha"])
            )
        return reply

    run_inprocess({**config, "out-dir": str(tmp_path / "whole")}, reply_filter=record_alpha)
    whole = dict(sent)
    sent.clear()
    crashed = tmp_path / "crashed"
    with pytest.raises(ServerCrashError):
        run_inprocess({**config, "out-dir": str(crashed)}, reply_filter=crash_in_round(3))
    sent.clear()
    run_inprocess(
        {**config, "out-dir": str(crashed), "resume-from": str(crashed / CHECKPOINT_FILE)},
        node_configs=reversed_node_ids(4),
        reply_filter=record_alpha,
    )
    # uniform-cap: alpha_i = alpha * n * p_i differs per client once n_i is known.
    assert len({alpha for _, alpha in whole[3]}) > 1
    assert sorted(sent[3]) == sorted(whole[3])
    assert sorted(sent[4]) == sorted(whole[4])


def test_fingerprint_keeps_what_defines_the_run():
    settings = RunSettings.from_run_config({"strategy": "afl", "lr": 0.05, "out-dir": "x"})
    fingerprint = run_fingerprint(settings, {"afl-lambda-lr": 1})
    config = fingerprint["config"]
    assert (config["strategy"], config["lr"], config["model"], config["seed"]) == (
        "afl",
        0.05,
        "mlp",
        0,
    )
    assert config["afl-lambda-lr"] == 1.0  # an int and a float of one value are one run
    for operational in ("out-dir", "num-server-rounds", "resume-from", "round-timeout"):
        assert operational not in config
    # A rule key left out takes the rule's default: the same run as one that names it.
    assert run_fingerprint(settings, {})["config"]["afl-lambda-lr"] == 0.1
    assert len(fingerprint["sha256"]) == 64


@pytest.fixture(scope="module")
def crashed_run(tmp_path_factory):
    """A fedavg run killed in round 2 (checkpoint after round 1), shared by the tests."""
    folder = tmp_path_factory.mktemp("crashed")
    config = {**SMALL, "num-server-rounds": 2, "strategy": "fedavg", "out-dir": str(folder)}
    with pytest.raises(ServerCrashError):
        run_inprocess(config, reply_filter=crash_in_round(2))
    return folder, config


@pytest.mark.parametrize(
    ("change", "listed"),
    [
        ({"strategy": "afl"}, "strategy: checkpoint 'fedavg', this run 'afl'"),
        (
            {"seed": 2, "model": "logreg"},
            "model: checkpoint 'mlp', this run 'logreg'; seed: checkpoint 1, this run 2",
        ),
        ({"lr": 0.2}, "lr: checkpoint 0.1, this run 0.2"),
    ],
)
def test_resume_with_other_settings_is_refused(tmp_path, crashed_run, change, listed):
    folder, config = crashed_run
    resume = {**config, "resume-from": str(folder / CHECKPOINT_FILE), "out-dir": str(tmp_path)}
    with pytest.raises(FingerprintMismatchError, match="resume-force=true") as refused:
        run_inprocess({**resume, **change})
    assert listed in str(refused.value)
    assert not (tmp_path / "rounds.jsonl").exists()  # refused before writing anything


def test_resume_force_overrides_the_fingerprint_with_a_warning(tmp_path, crashed_run, caplog):
    folder, config = crashed_run
    resume = {**config, "resume-from": str(folder / CHECKPOINT_FILE), "out-dir": str(tmp_path)}
    with caplog.at_level(logging.WARNING, logger="fairfl"):
        outcome = run_inprocess({**resume, "lr": 0.2, "resume-force": True})
    assert "lr: checkpoint 0.1, this run 0.2" in caplog.text
    assert outcome.summary["rounds"] == 2


def test_checkpoint_without_fingerprint_is_refused_unless_forced(tmp_path, crashed_run):
    folder, config = crashed_run
    data = dict(np.load(folder / CHECKPOINT_FILE, allow_pickle=False))
    meta = json.loads(str(data["__meta__"]))
    del meta["fingerprint"]
    data["__meta__"] = np.array(json.dumps(meta))
    old = tmp_path / "old.npz"
    np.savez(old, **data)
    resume = {**config, "resume-from": str(old), "out-dir": str(tmp_path / "out")}
    with pytest.raises(FingerprintMismatchError, match="has no run fingerprint"):
        run_inprocess(resume)
    assert run_inprocess({**resume, "resume-force": True}).summary["rounds"] == 2


@pytest.mark.parametrize("keep", [0, 10, 0.5, -22])
def test_truncated_checkpoint_names_resume_from_and_the_file(tmp_path, crashed_run, keep):
    # keep: bytes left of the intact file (a fraction of it; negative: all but those),
    # as a copy or a disk that ran out of space leaves it. -22: only the zip's end
    # record lost (22 bytes without a comment).
    folder, config = crashed_run
    whole = (folder / CHECKPOINT_FILE).read_bytes()
    size = int(len(whole) * keep) if isinstance(keep, float) else keep % len(whole)
    cut = tmp_path / "cut.npz"
    cut.write_bytes(whole[:size])
    resume = {**config, "resume-from": str(cut), "out-dir": str(tmp_path / "out")}
    expected = rf"^run config resume-from: {cut} cannot be read as a fairfl checkpoint \("
    with pytest.raises(CheckpointError, match=expected):
        load_checkpoint(cut)
    with pytest.raises(CheckpointError, match=expected):  # refused at start, as a ValueError
        run_inprocess(resume)
    assert not (tmp_path / "out" / "rounds.jsonl").exists()


def test_checkpoint_with_a_corrupt_member_or_field_is_named(tmp_path, crashed_run):
    folder, _ = crashed_run
    whole = bytearray((folder / CHECKPOINT_FILE).read_bytes())
    # Flip a byte inside the stored (uncompressed) metadata, a UTF-32 string in the .npy
    # member: the member's CRC no longer matches.
    at = whole.index("server_round".encode("utf-32-le"))
    whole[at] ^= 0xFF
    flipped = tmp_path / "flipped.npz"
    flipped.write_bytes(bytes(whole))
    with pytest.raises(CheckpointError, match=rf"resume-from: {flipped} .*BadZipFile"):
        load_checkpoint(flipped)
    data = dict(np.load(folder / CHECKPOINT_FILE, allow_pickle=False))
    meta = json.loads(str(data["__meta__"]))
    del meta["server_round"]
    data["__meta__"] = np.array(json.dumps(meta))
    np.savez(tmp_path / "no-round.npz", **data)
    with pytest.raises(CheckpointError, match=r"KeyError: 'server_round'"):
        load_checkpoint(tmp_path / "no-round.npz")


def test_run_into_another_runs_out_dir_is_refused(tmp_path):
    config = {**SMALL, "num-server-rounds": 1, "strategy": "fedavg", "out-dir": str(tmp_path)}
    first = run_inprocess(config)
    with pytest.raises(OutDirNotEmptyError, match="overwrite=true") as refused:
        run_inprocess({**config, "seed": 2})
    assert "rounds.jsonl" in str(refused.value)
    assert json.loads((tmp_path / "summary.json").read_text())["run_id"] == first.summary["run_id"]
    second = run_inprocess({**config, "seed": 2, "overwrite": True})
    assert json.loads((tmp_path / "summary.json").read_text())["run_id"] == second.summary["run_id"]
    assert [r["round"] for r in rounds_of(tmp_path)] == [1]


def test_resume_into_another_non_empty_out_dir_is_refused(tmp_path, crashed_run):
    folder, config = crashed_run
    other = tmp_path / "other"
    run_inprocess({**config, "out-dir": str(other)})
    with pytest.raises(OutDirNotEmptyError, match=str(other)):
        run_inprocess(
            {**config, "resume-from": str(folder / CHECKPOINT_FILE), "out-dir": str(other)}
        )


def test_compare_into_a_used_folder_needs_overwrite_or_skip_existing(tmp_path, capsys):
    from fairfl.cli import main

    command = ["compare", "--rules", "fedavg", "--seeds", "0", "--no-progress"]
    command += ["--set", "num-partitions=3", "num-server-rounds=1", "--out", str(tmp_path)]
    assert main(command) == 0
    first = (tmp_path / "runs" / "fedavg" / "seed-0" / "summary.json").read_text()
    assert main(command) == 2
    assert "pass --skip-existing to keep the finished ones or --overwrite" in (
        capsys.readouterr().err
    )
    assert (tmp_path / "runs" / "fedavg" / "seed-0" / "summary.json").read_text() == first
    assert main([*command, "--overwrite"]) == 0
    again = json.loads((tmp_path / "runs" / "fedavg" / "seed-0" / "summary.json").read_text())
    assert again["run_id"] != json.loads(first)["run_id"]


def test_runner_force_adds_resume_force(monkeypatch, tmp_path):
    from fairfl.simulation import engine, engine_cli

    seen = []

    def simulate(run_config, *args, summary_path, **kwargs):
        seen.append(run_config)
        return engine.SimulationResult(1, "mine", summary_path.parent, None, "stub")

    monkeypatch.setattr(engine_cli, "simulate", simulate)
    with pytest.raises(SystemExit):
        engine_cli.main(["-c", f"out-dir='{tmp_path}'", "--force"])
    assert seen == [f"out-dir='{tmp_path}' resume-force=true"]


@pytest.mark.parametrize("rule", ["ditto", "ditto+qffl"])
def test_a_resumed_ditto_run_keeps_the_personal_models(tmp_path, rule):
    # Issue 47: the personal models v_k live in each client's Context.state; a resume
    # that did not bring them back started every client's v_k again from the global
    # model, and every later round's personal metrics differed.
    config = {**SMALL, "strategy": rule}
    run_inprocess({**config, "out-dir": str(tmp_path / "whole")})
    crashed = tmp_path / "crashed"
    with pytest.raises(ServerCrashError):
        run_inprocess({**config, "out-dir": str(crashed)}, reply_filter=crash_in_round(3))
    assert load_checkpoint(crashed / CHECKPOINT_FILE).server_round == 2
    run_inprocess(
        {**config, "out-dir": str(crashed), "resume-from": str(crashed / CHECKPOINT_FILE)},
        node_configs=reversed_node_ids(4),  # kept by partition id, not node id
    )
    whole_rounds, resumed_rounds = rounds_of(tmp_path / "whole"), rounds_of(crashed)
    assert [r["round"] for r in resumed_rounds] == [1, 2, 3, 4]
    # The personal models differ from the global one, so the check can fail.
    assert whole_rounds[3]["personal_metrics"] != whole_rounds[3]["metrics"]
    assert [r["personal_metrics"] for r in resumed_rounds] == [
        r["personal_metrics"] for r in whole_rounds
    ]
    assert [r["metrics"] for r in resumed_rounds] == [r["metrics"] for r in whole_rounds]
