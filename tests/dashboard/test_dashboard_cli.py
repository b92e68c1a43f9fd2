"""`fairfl compare` prints the dashboard command, or serves the dashboard while it runs."""

from __future__ import annotations

import importlib
import threading

from fairfl import cli

#: The module (fairfl.report re-exports its function compare under the same name).
COMPARE_MODULE = importlib.import_module("fairfl.report.compare")


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
    argv = ["compare", "--rules", "fedavg", "--out", str(tmp_path), "--dashboard", "0"]
    assert cli.main(argv) == 0
    assert len(during[0]) == 1  # served while the comparison ran
    assert dashboard_threads() == []  # and stopped after it
    assert "fairfl compare: live dashboard at http://127.0.0.1:" in capsys.readouterr().err
