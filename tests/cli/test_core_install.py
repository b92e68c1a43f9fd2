"""`fairfl --help`, `verify` and `rules` work without torch and matplotlib (the core install)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from blocked_extras import core_install_env, fairfl_command

from fairfl.telemetry.ledger import GENESIS, chain, encode_line, line_sha256, seal_summary


def _fairfl(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    return subprocess.run(
        [*fairfl_command(), *args],
        env=core_install_env(hook),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def write_run(folder: Path, rounds: int = 2) -> None:
    """A run's rounds.jsonl and sealed summary.json, chained by hand."""
    folder.mkdir(parents=True)
    previous, lines = GENESIS, []
    for round_ in range(1, rounds + 1):
        line = encode_line(chain({"round": round_}, previous, "c" * 64))
        lines.append(line)
        previous = line_sha256(line)
    (folder / "rounds.jsonl").write_text("".join(f"{line}\n" for line in lines))
    summary = seal_summary({"rounds": rounds, "ledger": {"lines": rounds, "head_sha256": previous}})
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def test_the_hook_blocks_torch_and_matplotlib(tmp_path):
    hook = tmp_path / "hook"
    hook.mkdir()
    result = subprocess.run(
        [*fairfl_command()[:1], "-c", "import torch"],
        env=core_install_env(hook),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1 and "No module named 'torch'" in result.stderr


def test_help_verify_and_rules_work_on_the_core_install(tmp_path):
    result = _fairfl(tmp_path, "--help")
    assert result.returncode == 0, result.stderr
    assert "run" in result.stdout and "verify" in result.stdout and "compare" in result.stdout
    write_run(tmp_path / "run")
    result = _fairfl(tmp_path, "verify", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith("rounds.jsonl: 2 rounds, chain intact\n")
    result = _fairfl(tmp_path, "rules")
    assert result.returncode == 0, result.stderr
    assert "qffl-q=0.1" in result.stdout
    assert "not listed: the client half is not installed" in result.stdout  # no torch


def test_report_names_the_extra_to_install_in_one_line(tmp_path):
    (tmp_path / "cmp").mkdir()
    result = _fairfl(tmp_path, "report", str(tmp_path / "cmp"))
    assert result.returncode == 2
    assert result.stderr == (
        "fairfl report: error: needs the Python module 'matplotlib', which is not "
        'installed: pip install "fairfl[report]"\n'
    )


def test_run_names_the_extra_to_install_in_one_line(tmp_path):
    result = _fairfl(tmp_path, "run", "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert 'pip install "fairfl[client]"' in result.stderr
