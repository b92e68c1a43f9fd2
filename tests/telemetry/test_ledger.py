"""The rounds.jsonl hash chain: fairfl verify names the first tampered, missing or cut round."""

import hashlib
import json

from fairfl.cli import main as fairfl_main
from fairfl.telemetry.ledger import GENESIS, verify_ledger
from fairfl.telemetry.stream import RecordStream

CONFIG = "c" * 64


def _entry(round_: int) -> dict:
    return {
        "run_id": "r",
        "round": round_,
        "clients": [
            {"node_id": 7, "partition_id": 0, "num_examples": 5, "eval_acc": 0.5 + round_ / 100}
        ],
        "metrics": {"acc-mean": 0.5 + round_ / 100},
    }


def _write_run(out_dir, rounds=4, *, summary=True):
    stream = RecordStream(out_dir / "rounds.jsonl", CONFIG)
    for r in range(1, rounds + 1):
        stream.record(_entry(r))
    stream.close()
    if summary:
        (out_dir / "summary.json").write_text(json.dumps({"ledger": stream.ledger_head()}))
    return stream


def test_each_line_names_the_hash_of_the_one_before(tmp_path):
    stream = _write_run(tmp_path, rounds=2)
    first, second = (tmp_path / "rounds.jsonl").read_text().splitlines()
    assert json.loads(first)["prev_sha256"] == GENESIS
    assert json.loads(second)["prev_sha256"] == hashlib.sha256(first.encode()).hexdigest()
    assert json.loads(second)["config_sha256"] == CONFIG
    assert stream.ledger_head()["head_sha256"] == hashlib.sha256(second.encode()).hexdigest()
    report = verify_ledger(tmp_path)
    assert report.ok and report.rounds == 2
    assert fairfl_main(["verify", str(tmp_path)]) == 0


def _flip(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_one_flipped_byte_names_the_tampered_round(tmp_path, capsys):
    _write_run(tmp_path)
    path = tmp_path / "rounds.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    # a digit of round 2's accuracy: "0.52" becomes "0.53"; the JSON stays valid
    offset = len(lines[0]) + lines[1].index('"eval_acc": 0.52') + len('"eval_acc": 0.5')
    _flip(path, offset)
    assert '"eval_acc": 0.53' in path.read_text().splitlines()[1]
    report = verify_ledger(tmp_path)
    assert not report.ok and report.round == 2
    assert "round 2 was tampered with" in report.problem
    assert fairfl_main(["verify", str(tmp_path)]) == 1
    assert "round 2 was tampered with" in capsys.readouterr().err


def test_a_flipped_byte_that_breaks_the_json_names_its_line(tmp_path):
    _write_run(tmp_path)
    path = tmp_path / "rounds.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    _flip(path, len(lines[0]) + len(lines[1]))  # the "{" opening round 3: becomes "z"
    report = verify_ledger(tmp_path)
    assert report.round == 3 and "line 3 (round 3?) is not valid JSON" in report.problem


def test_the_last_line_tampered_is_caught_by_the_summary_head(tmp_path):
    _write_run(tmp_path)
    path = tmp_path / "rounds.jsonl"
    text = path.read_text()
    path.write_text(text[: text.rindex("0.54")] + "0.99" + text[text.rindex("0.54") + 4 :])
    report = verify_ledger(tmp_path)
    assert report.round == 4 and "round 4 was tampered with" in report.problem


def test_truncated_mid_line(tmp_path):
    _write_run(tmp_path)
    path = tmp_path / "rounds.jsonl"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])  # round 4's line loses its end
    report = verify_ledger(tmp_path)
    assert not report.ok and report.round == 4 and report.rounds == 3
    assert "round 4 is truncated" in report.problem
    assert fairfl_main(["verify", str(tmp_path)]) == 1


def test_whole_lines_cut_off_the_end_are_caught_by_the_summary(tmp_path):
    _write_run(tmp_path)
    path = tmp_path / "rounds.jsonl"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:2]))
    report = verify_ledger(tmp_path)
    assert report.round == 3 and "round 3 is missing" in report.problem


def test_a_missing_middle_round_is_named(tmp_path):
    _write_run(tmp_path)
    path = tmp_path / "rounds.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:1] + lines[2:]))
    report = verify_ledger(tmp_path)
    assert report.round == 2 and "round(s) 2 missing before round 3" in report.problem


def test_a_changed_config_fingerprint_is_named(tmp_path):
    stream = RecordStream(tmp_path / "rounds.jsonl", CONFIG)
    stream.record(_entry(1))
    stream.config_sha256 = "d" * 64  # as a resume-force with other settings would write
    stream.record(_entry(2))
    stream.close()
    report = verify_ledger(tmp_path)
    assert report.round == 2 and "differs from the first line's" in report.problem


def test_a_resumed_stream_continues_the_chain(tmp_path):
    _write_run(tmp_path, rounds=2, summary=False)
    restored = [json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    stream = RecordStream(tmp_path / "rounds.jsonl", CONFIG, previous=restored)
    stream.record(_entry(3))
    stream.close()
    assert verify_ledger(tmp_path).ok and verify_ledger(tmp_path).rounds == 3


def test_verify_without_rounds_file_is_a_usage_error(tmp_path):
    assert fairfl_main(["verify", str(tmp_path / "nothing")]) == 2


def test_a_compressed_run_is_verified_from_its_gzipped_file(tmp_path, capsys):
    # fairfl compare --compress-runs keeps the same bytes in rounds.jsonl.gz.
    from fairfl.report.results import compress_rounds

    _write_run(tmp_path, rounds=3)
    compress_rounds(tmp_path)
    assert not (tmp_path / "rounds.jsonl").exists()
    assert verify_ledger(tmp_path).ok
    assert fairfl_main(["verify", str(tmp_path)]) == 0
    assert "rounds.jsonl.gz: 3 rounds, chain intact" in capsys.readouterr().out


def test_a_run_without_summary_is_intact_but_flagged_unfinished(tmp_path):
    # A run stopped mid-way (or whose summary.json was deleted) has no head to check the
    # chain's end against: the report says so instead of "intact" alone.
    _write_run(tmp_path, rounds=3, summary=False)
    report = verify_ledger(tmp_path)
    assert report.ok and report.rounds == 3 and report.summary_missing
    _write_run(tmp_path / "done", rounds=3)
    assert not verify_ledger(tmp_path / "done").summary_missing


def test_verify_exits_3_for_a_run_without_summary(tmp_path, capsys):
    _write_run(tmp_path, rounds=3, summary=False)
    assert fairfl_main(["verify", str(tmp_path)]) == 3
    err = capsys.readouterr().err
    assert "3 rounds, chain intact, but" in err and "summary.json is missing" in err
