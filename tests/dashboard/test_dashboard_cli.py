"""`fairfl compare` prints the dashboard command, or serves the dashboard while it runs."""

from __future__ import annotations

import importlib
import threading

from fairfl import cli

#: The module (fairfl.sweep re-exports its function compare under the same name).
COMPARE_MODULE = importlib.import_module("fairfl.sweep.compare")


class FakeReport:
    def text(self) -> str:
        return "report"


def dashboard_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "fairfl-dashboard"]


def test_compare_prints_the_dashboard_command(tmp_path, monkeypatch, capsys):
    # compare() calls on_start once its checks pass (the CLI imports it when it runs).
    monkeypatch.setattr(
        COMPARE_MODULE, "compare", lambda **kwargs: kwargs["on_start"]() or FakeReport()
    )
    out = tmp_path / "my results"
    assert cli.main(["compare", "--rules", "fedavg", "--out", str(out)]) == 0
    assert f"watch it live with: fairfl dashboard '{out}'" in capsys.readouterr().err


def test_compare_serves_the_dashboard_while_it_runs(tmp_path, monkeypatch, capsys):
    during = []
    monkeypatch.setattr(
        COMPARE_MODULE,
        "compare",
        lambda **kwargs: kwargs["on_start"]() or during.append(dashboard_threads()) or FakeReport(),
    )
    after = []

    def user_stops_it() -> None:  # the page still answers once the comparison ended
        after.append(dashboard_threads())
        raise KeyboardInterrupt

    monkeypatch.setattr("fairfl.cli.dashboard.wait_for_interrupt", user_stops_it)
    argv = ["compare", "--rules", "fedavg", "--out", str(tmp_path), "--dashboard", "0"]
    assert cli.main(argv) == 0
    assert len(during[0]) == 1  # served while the comparison ran
    assert len(after[0]) == 1  # and after it, until the user stopped it
    assert dashboard_threads() == []  # then stopped
    err = capsys.readouterr().err
    assert "fairfl compare: live dashboard at http://127.0.0.1:" in err
    assert "finished; the dashboard keeps serving the results at http://127.0.0.1:" in err
    assert "until you stop it (Ctrl-C)" in err and "dashboard stopped" in err


def test_the_finished_comparison_is_served_until_sigint(tmp_path):
    """A real comparison with --dashboard: the page answers after it ends; Ctrl-C stops it."""
    import re
    import signal
    import subprocess
    import sys
    import urllib.request

    out = tmp_path / "cmp"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fairfl",
            "compare",
            "--rules",
            "fedavg",
            "--out",
            str(out),
            "--set",
            "num-server-rounds=1",
            "--set",
            "num-partitions=3",
            "--dashboard",
            "0",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        seen = []
        for line in process.stderr:
            seen.append(line)
            if "keeps serving the results at" in line:
                break
        url = re.search(r"at (http://127\.0\.0\.1:\d+/)", seen[-1]).group(1)
        with urllib.request.urlopen(url, timeout=30) as page:
            assert page.status == 200
        assert (out / "report.md").exists() and process.poll() is None
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
        assert "dashboard stopped" in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
