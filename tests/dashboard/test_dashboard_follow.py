"""The follower: incremental reads, truncated and malformed lines, runs that appear later."""

from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairfl.dashboard.follow import (
    COMPLETED,
    CURVE_METRICS,
    FAILED,
    RUNNING,
    WAITING,
    EntryError,
    Registry,
    RunFollower,
    Source,
    curve_metrics,
    parse_entry,
)
from fairfl.metrics import fairness_metrics


def test_metrics_of_a_round_worked_by_hand(line):
    # accuracies 0.5 and 1.0: mean 0.75, population std 0.25,
    # Jain (0.5 + 1)^2 / (2 (0.25 + 1)) = 2.25 / 2.5 = 0.9; worst 10 % and 20 % of 2
    # clients is the single worst client (floor(0.2 * 2) = 0, at least 1): 0.5.
    parsed = parse_entry(line(1, [0.5, 1.0]))
    assert parsed.metrics["acc-mean"] == pytest.approx(0.75)
    assert parsed.metrics["acc-std"] == pytest.approx(0.25)
    assert parsed.metrics["jain-index"] == pytest.approx(0.9)
    assert parsed.metrics["acc-worst-10"] == pytest.approx(0.5)
    assert parsed.metrics["acc-worst-20"] == pytest.approx(0.5)
    assert parsed.clients.tolist() == [0, 1]
    assert parsed.num_examples.tolist() == [10.0, 10.0]


def test_client_keys_beyond_int64_are_left_out(line):
    entry = line(1, [0.5, 1.0])
    entry["clients"][0]["partition_id"] = 10**30
    entry["clients"][1]["partition_id"] = "7"
    parsed = parse_entry(entry)
    assert parsed.clients.tolist() == [7] and parsed.accuracy.tolist() == [1.0]


def test_unknown_keys_and_odd_values_are_tolerated(line):
    entry = line(
        4,
        [None, 0.25],
        prev_hash="ab" * 32,  # ledger keys of a later version: ignored
        fingerprint={"sha256": "x"},
        train={
            "accepted": 1,
            "dropped": {"1001": "metrics['loss-before-training'] is nan"},
            "weights": [{"node_id": 1002, "partition_id": 1, "weight": 1.0}, "junk"],
            "diagnostics": {
                "qp-status": "optimal",
                "rcfl-eta": 1.5,
                "rcfl-q": {"1002": 2.0, "9999": 3.0},
                "nested": [1, 2],
            },
            "skipped": None,
        },
    )
    parsed = parse_entry(entry)
    assert math.isnan(parsed.accuracy[0]) and parsed.accuracy[1] == 0.25
    assert parsed.weights == {1: 1.0}
    assert parsed.scalars == {"qp-status": "optimal", "rcfl-eta": 1.5}
    # per-client diagnostics are keyed by node id in the file: node 1002 is partition 1;
    # node 9999 is unknown to the round, so it keeps its node id
    assert parsed.per_client == {"rcfl-q": {1: 2.0, 9999: 3.0}}
    assert parsed.train_dropped == {"1001": "metrics['loss-before-training'] is nan"}
    assert parsed.accepted == 1 and parsed.skipped is None


@pytest.mark.parametrize(
    ("entry", "message"),
    [([1, 2], "must be a JSON object, got list"), ({"clients": []}, "'round' must be an integer")],
)
def test_entries_that_cannot_be_shown(entry, message):
    with pytest.raises(EntryError, match=message):
        parse_entry(entry)


def test_reads_only_the_new_bytes_and_waits_for_a_newline(tmp_path, line, lines):
    rounds = tmp_path / "rounds.jsonl"
    first, second = lines(line(1, [0.5, 1.0])), lines(line(2, [1.0, 1.0]))
    assert len(first) > 256  # the second line lies beyond the identity check of the head
    rounds.write_bytes(first + second)
    follower = RunFollower(tmp_path, "run")
    assert follower.refresh() and [r.round for r in follower.rounds] == [1, 2]
    # Corrupt the second line in place: a follower that re-read the file would note it.
    data = bytearray(rounds.read_bytes())
    data[len(first) + 2] = ord("#")
    rounds.write_bytes(bytes(data))
    third = lines(line(3, [0.0, 1.0]))
    with rounds.open("ab") as handle:
        handle.write(third[:40])  # a round being written
    follower.refresh()
    assert [r.round for r in follower.rounds] == [1, 2]
    assert [n.message for n in follower.notes] == []
    assert follower.pending is not None and follower.pending.line == 3
    assert "last line incomplete (40 bytes without a newline)" in follower.pending.message
    with rounds.open("ab") as handle:
        handle.write(third[40:])
    assert follower.refresh()
    assert [r.round for r in follower.rounds] == [1, 2, 3]
    assert follower.pending is None and follower.all_notes() == []
    assert follower.status == RUNNING
    assert not follower.refresh()  # nothing new: nothing changed


def test_malformed_lines_are_skipped_with_a_note(tmp_path, line, lines):
    (tmp_path / "rounds.jsonl").write_bytes(
        lines(line(1, [0.5]))
        + b"{not json\n"
        + b"[1, 2]\n"
        + b"\n"
        + b'{"clients": []}\n'
        + lines(line(2, [0.75]))
    )
    follower = RunFollower(tmp_path, "run")
    follower.refresh()
    assert [r.round for r in follower.rounds] == [1, 2]
    notes = [(n.line, n.message) for n in follower.all_notes()]
    assert notes[0][0] == 2 and notes[0][1].startswith("skipped: not valid JSON")
    assert notes[1] == (3, "skipped: must be a JSON object, got list")
    assert notes[2] == (5, "skipped: 'round' must be an integer, got None")
    assert len(notes) == 3
    assert follower.all_notes()[0].text().startswith(f"{tmp_path / 'rounds.jsonl'}:2: ")


def test_lines_json_cannot_hold_are_skipped_too(tmp_path, line, lines):
    huge = line(2, [0.5])
    huge["train"] = {"diagnostics": {"big": 10**400}}  # beyond float: shown as inf
    (tmp_path / "rounds.jsonl").write_bytes(
        b"[" * 100_000
        + b"]" * 100_000
        + b"\n"  # nested past the parser's recursion limit
        + b'{"round": '
        + b"9" * 5000
        + b"}\n"  # more digits than Python converts
        + lines(huge)
    )
    follower = RunFollower(tmp_path, "run")
    follower.refresh()
    assert [r.round for r in follower.rounds] == [2]
    assert follower.rounds[0].scalars == {"big": math.inf}
    assert [n.line for n in follower.notes] == [1, 2]


def test_a_rewritten_file_is_read_again(tmp_path, line, lines):
    rounds = tmp_path / "rounds.jsonl"
    rounds.write_bytes(lines(line(1, [0.5]), line(2, [0.5]), line(3, [0.5])))
    follower = RunFollower(tmp_path, "run")
    follower.refresh()
    rounds.write_bytes(lines(line(1, [0.25], run_id="run-b")))  # overwrite=true: a new run
    follower.refresh()
    assert [(r.round, r.accuracy.tolist()) for r in follower.rounds] == [(1, [0.25])]


def test_a_resumed_run_replaces_the_rounds_it_writes_again(tmp_path, line, lines):
    rounds = tmp_path / "rounds.jsonl"
    rounds.write_bytes(lines(line(1, [0.5]), line(2, [0.5])))
    follower = RunFollower(tmp_path, "run")
    follower.refresh()
    with rounds.open("ab") as handle:  # round 2 again, then 3
        handle.write(lines(line(2, [0.75]), line(3, [1.0])))
    follower.refresh()
    assert [(r.round, r.accuracy[0]) for r in follower.rounds] == [(1, 0.5), (2, 0.75), (3, 1.0)]


def test_summary_tells_how_the_run_ended(tmp_path, line, lines):
    (tmp_path / "rounds.jsonl").write_bytes(lines(line(1, [0.5])))
    follower = RunFollower(tmp_path, "run", config={"num-server-rounds": 5})
    follower.refresh()
    assert follower.status == RUNNING and follower.config == {"num-server-rounds": 5}
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"run_id": "earlier", "status": "completed"}))
    follower.refresh()
    assert follower.status == RUNNING  # an earlier run's summary is not this run's outcome
    summary.write_text(
        json.dumps({"run_id": "run-a", "status": "failed", "error": "boom", "config": {"a": 1}})
    )
    follower.refresh()
    assert follower.status == FAILED and follower.error == "boom"
    assert follower.config == {"a": 1}


def test_gzipped_rounds_with_a_truncated_tail(tmp_path, line, lines):
    data = lines(line(1, [0.5]), line(2, [1.0])) + b'{"round": 3, "cli'
    (tmp_path / "rounds.jsonl.gz").write_bytes(gzip.compress(data))
    (tmp_path / "summary.json").write_text(json.dumps({"run_id": "run-a", "status": "completed"}))
    follower = RunFollower(tmp_path, "run")
    follower.refresh()
    assert [r.round for r in follower.rounds] == [1, 2] and follower.status == COMPLETED
    assert [(n.line, n.message) for n in follower.all_notes()] == [
        (3, "truncated last line skipped (17 bytes without a newline)")
    ]


def test_a_missing_folder_is_waited_for(tmp_path, line, lines):
    folder = tmp_path / "later"
    source = Source(folder)
    assert not source.refresh() and source.kind == WAITING and source.runs == {}
    folder.mkdir()
    (folder / "rounds.jsonl").write_bytes(lines(line(1, [0.5])))
    assert source.refresh() and source.kind == "run"
    (run,) = source.runs.values()
    assert run.label == "later" and [r.round for r in run.rounds] == [1]


def test_a_comparison_lists_planned_runs_before_they_start(tmp_path, line, lines):
    manifest = {
        "cpu_count": 2,
        "runs": [
            {"dir": "runs/afl/seed-0", "label": "afl", "seed": 0, "config": {"lr": 0.1}},
            {"dir": "runs/fedavg/seed-0", "label": "fedavg", "seed": 0, "config": {}},
        ],
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    source = Source(tmp_path)
    source.refresh()
    runs = {f.label: f for f in source.runs.values()}
    assert list(runs) == ["afl seed 0", "fedavg seed 0"] and source.kind == "comparison"
    assert all(f.status == WAITING for f in runs.values())
    assert runs["afl seed 0"].config == {"lr": 0.1}
    (tmp_path / "runs/afl/seed-0").mkdir(parents=True)
    (tmp_path / "runs/afl/seed-0/rounds.jsonl").write_bytes(lines(line(1, [0.5])))
    source.refresh()
    assert runs["afl seed 0"].status == RUNNING and runs["fedavg seed 0"].status == WAITING


def test_a_folder_of_runs_without_manifest(tmp_path, line, lines):
    for rule in ("afl", "term"):
        run_dir = tmp_path / rule / "seed-1"
        run_dir.mkdir(parents=True)
        (run_dir / "rounds.jsonl").write_bytes(lines(line(1, [0.5])))
    source = Source(tmp_path)
    source.refresh()
    assert sorted(f.label for f in source.runs.values()) == ["afl seed 1", "term seed 1"]
    assert source.kind == "folder"


def test_registry_reads_at_most_every_min_interval(tmp_path, line, lines):
    rounds = tmp_path / "rounds.jsonl"
    rounds.write_bytes(lines(line(1, [0.5])))
    registry = Registry([tmp_path], min_interval=0.5)
    assert registry.refresh(now=10.0) == 1
    with rounds.open("ab") as handle:
        handle.write(lines(line(2, [0.5])))
    assert registry.refresh(now=10.2) == 1  # 0.2 s later: the last read stands
    assert registry.refresh(now=10.6) == 2
    (run,) = registry.runs().values()
    assert len(run.rounds) == 2


def test_registry_names_runs_uniquely(tmp_path, line, lines):
    for parent in ("a", "b"):
        run_dir = tmp_path / parent / "same"
        run_dir.mkdir(parents=True)
        (run_dir / "rounds.jsonl").write_bytes(lines(line(1, [0.5])))
    registry = Registry([tmp_path / "a" / "same", tmp_path / "b" / "same"])
    registry.refresh(now=0.0)
    assert list(registry.runs()) == [f"{tmp_path / p / 'same'}: same" for p in ("a", "b")]


def test_registry_needs_a_folder():
    with pytest.raises(ValueError, match="folders must name at least one out-dir, got none"):
        Registry([])


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=20,
)
KEYS = st.sampled_from(
    [
        "clients",
        "train",
        "weights",
        "diagnostics",
        "sampled",
        "accepted",
        "dropped",
        "evaluate_dropped",
        "wall_time",
        "skipped",
        "partition_id",
        "node_id",
        "eval_acc",
        "num_examples",
        "weight",
        "rcfl-q",
    ]
)
# Entries shaped like rounds.jsonl lines, with any JSON value at any known key.
ENTRY = st.recursive(
    JSON, lambda inner: st.dictionaries(KEYS, inner, max_size=5) | st.lists(inner, max_size=3)
)


@settings(max_examples=40, deadline=None)
@given(body=st.dictionaries(KEYS, ENTRY, max_size=6), number=st.integers(0, 10**6))
def test_parse_entry_takes_any_json_without_raising(body, number):
    parsed = parse_entry({**body, "round": number})
    assert parsed.round == number
    assert parsed.clients.size == parsed.accuracy.size == parsed.num_examples.size


@settings(max_examples=200, deadline=None)
@given(chunks=st.lists(st.binary(max_size=60), max_size=6))
def test_follower_never_raises_on_arbitrary_bytes(tmp_path_factory, chunks):
    folder = tmp_path_factory.mktemp("bytes")
    follower = RunFollower(folder, "run")
    with (folder / "rounds.jsonl").open("ab") as handle:
        for chunk in chunks:
            handle.write(chunk)
            handle.flush()
            follower.refresh()
    assert all(isinstance(r.round, int) for r in follower.rounds)


@settings(max_examples=200, deadline=None)
@given(accuracies=st.lists(st.floats(0, 1, allow_nan=False), min_size=1, max_size=40))
def test_curve_metrics_equal_fairness_metrics(accuracies):
    expected = fairness_metrics(accuracies, [1] * len(accuracies), [0.0] * len(accuracies))
    got = curve_metrics(np.asarray(accuracies))
    assert got == {key: pytest.approx(expected[key], abs=1e-12) for key in CURVE_METRICS}
