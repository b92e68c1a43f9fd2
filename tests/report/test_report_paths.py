"""`fairfl report` reads only inside its folder and bounds decompression (issue 35, item 5).

A comparison folder may come from elsewhere (a download, a colleague's copy): its
``manifest.json`` names run folders and its runs hold files that could point anywhere,
and a ``rounds.jsonl.gz`` of a few kilobytes can expand to gigabytes.
"""

import gzip
import json
from pathlib import Path

import pytest

from fairfl.cli import main
from fairfl.report.results import (
    MAX_ROUNDS_BYTES,
    OutsideFolderError,
    load_runs,
    read_rounds,
)

LINE = {"round": 1, "clients": [{"node_id": 7, "partition_id": 0, "eval_acc": 0.5}]}


def _run(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "rounds.jsonl").write_text(json.dumps(LINE) + "\n")
    return folder


def _manifest(folder: Path, run_dir: str) -> None:
    runs = [{"dir": run_dir, "label": "fedavg", "rule": "fedavg", "seed": 0}]
    (folder / "manifest.json").write_text(json.dumps({"runs": runs}))


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A run folder beside the comparison, which the comparison must not reach."""
    return _run(tmp_path / "elsewhere" / "secret-run")


@pytest.fixture
def comparison(tmp_path: Path) -> Path:
    folder = tmp_path / "comparison"
    _run(folder / "runs" / "fedavg" / "seed-0")
    return folder


def test_manifest_runs_inside_the_folder_are_read(comparison):
    _manifest(comparison, "runs/fedavg/seed-0")
    (run,) = load_runs(comparison)
    assert run.final_accuracies() == {0: 0.5}


@pytest.mark.parametrize("escape", ["dotdot", "absolute", "symlinked-dir"])
def test_manifest_run_outside_the_folder_is_refused(comparison, outside, escape):
    if escape == "dotdot":
        run_dir = "../elsewhere/secret-run"
    elif escape == "absolute":
        run_dir = str(outside)
    else:
        (comparison / "runs" / "link").symlink_to(outside, target_is_directory=True)
        run_dir = "runs/link"
    _manifest(comparison, run_dir)
    with pytest.raises(
        OutsideFolderError,
        match=rf"^manifest.json runs\[0\].dir .* resolves to {outside}, outside "
        rf"{comparison}: results are read only from inside the folder reported on$",
    ):
        load_runs(comparison)


def test_symlinked_files_out_of_a_run_are_refused(comparison, outside):
    run = comparison / "runs" / "fedavg" / "seed-0"
    (run / "rounds.jsonl").unlink()
    (run / "rounds.jsonl").symlink_to(outside / "rounds.jsonl")
    with pytest.raises(OutsideFolderError, match=r"^results file .* outside"):
        load_runs(comparison)  # found by walking the folder
    _manifest(comparison, "runs/fedavg/seed-0")
    with pytest.raises(OutsideFolderError, match=r"^run file .*rounds.jsonl resolves to"):
        load_runs(comparison)  # named by the manifest
    (comparison / "manifest.json").unlink()
    (comparison / "manifest.json").symlink_to(outside / "rounds.jsonl")
    with pytest.raises(OutsideFolderError, match=r"^manifest.json .* outside"):
        load_runs(comparison)


def test_symlinked_summary_out_of_a_run_is_refused(comparison, outside):
    (outside / "summary.json").write_text(json.dumps({"config": {"seed": 3}}))
    run = comparison / "runs" / "fedavg" / "seed-0"
    (run / "summary.json").symlink_to(outside / "summary.json")
    with pytest.raises(OutsideFolderError, match=r"^run file .*summary.json resolves to"):
        load_runs(comparison)


def test_report_command_names_the_escape(comparison, outside, capsys):
    _manifest(comparison, "../elsewhere/secret-run")
    assert main(["report", str(comparison)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fairfl report: error: manifest.json runs[0].dir ")
    assert "outside" in err


def _gzip_of_size(path: Path, size: int) -> Path:
    """A ``rounds.jsonl.gz`` whose content is ``size`` bytes (one JSON line, blank padded)."""
    line = json.dumps(LINE).encode()
    path.write_bytes(gzip.compress(line + b"\n" * (size - len(line)), mtime=0))
    return path


def test_gzip_within_the_cap_is_read(tmp_path):
    path = _gzip_of_size(tmp_path / "rounds.jsonl.gz", 4096)
    assert read_rounds(path, max_bytes=4096) == [LINE]


def test_gzip_beyond_the_cap_stops_with_a_clear_error(tmp_path):
    path = _gzip_of_size(tmp_path / "rounds.jsonl.gz", 4097)
    with pytest.raises(ValueError, match=r"decompresses to more than 4096 bytes, the limit"):
        read_rounds(path, max_bytes=4096)


def test_a_bomb_is_read_only_up_to_the_cap(tmp_path, monkeypatch):
    """64 MiB of zeros (64 KiB compressed) under a 1 MiB cap: at most 2 MiB decompressed."""
    path = tmp_path / "rounds.jsonl.gz"
    with gzip.open(path, "wb") as handle:
        for _ in range(64):
            handle.write(b"\0" * (1 << 20))
    assert path.stat().st_size < 1 << 17
    read = 0
    real_read = gzip.GzipFile.read

    def counting_read(self, size=-1):
        nonlocal read
        data = real_read(self, size)
        read += len(data)
        return data

    monkeypatch.setattr(gzip.GzipFile, "read", counting_read)
    with pytest.raises(ValueError, match=r"more than 1048576 bytes"):
        read_rounds(path, max_bytes=1 << 20)
    assert 1 << 20 < read <= 2 << 20  # stopped at the first chunk past the cap
    assert MAX_ROUNDS_BYTES == 1 << 30  # the default, as documented


def test_corrupt_gzip_is_named(tmp_path):
    path = tmp_path / "rounds.jsonl.gz"
    path.write_bytes(gzip.compress(b"{}\n")[:-6])  # cut inside the trailer
    with pytest.raises(ValueError, match=r"rounds.jsonl.gz is not a readable gzip file"):
        read_rounds(path)


def test_verify_and_the_dashboard_bound_decompression_too(tmp_path, monkeypatch):
    """The same 1 GiB cap as fairfl report (here lowered), with a clear reason each."""
    import gzip

    import fairfl._gzip as bounded
    from fairfl.dashboard.follow import RunFollower
    from fairfl.telemetry.ledger import verify_ledger

    (tmp_path / "rounds.jsonl.gz").write_bytes(gzip.compress(b"{}\n" * 1000))
    real = bounded.gunzip_bounded
    monkeypatch.setattr(bounded, "MAX_ROUNDS_BYTES", 100)
    monkeypatch.setattr(
        bounded, "gunzip_bounded", lambda path, max_bytes=100: real(path, max_bytes)
    )
    import fairfl.dashboard.follow as follow
    import fairfl.telemetry.ledger as ledger

    monkeypatch.setattr(ledger, "gunzip_bounded", bounded.gunzip_bounded)
    monkeypatch.setattr(follow, "gunzip_bounded", bounded.gunzip_bounded)
    report = verify_ledger(tmp_path)
    assert not report.ok and "decompresses to more than 100 bytes" in report.problem
    run = RunFollower(tmp_path, "bomb")
    run.refresh()
    assert run.rounds == []
    assert any("decompresses to more than 100 bytes" in n.text() for n in run.all_notes())
