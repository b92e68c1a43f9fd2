"""One ``fairfl run`` checks its run once, builds one rule and parses its settings once a side.

Issue #51, item 2: the command line checked the run, then the in-process runner checked
it again (building the rule and cutting the partitions twice), and the ClientApp parsed
``RunSettings`` on every message. The counts wrap the real functions, so the run is the
same as without them.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import fairfl.strategies
from fairfl.cli import main
from fairfl.client import app as client_app
from fairfl.server import preflight
from fairfl.server import run as server_run
from fairfl.settings import RunSettings
from fairfl.simulation.inprocess import InMemoryGrid

CLIENT_APP_FILE = Path(client_app.__file__).resolve()
NUM_CLIENTS = 3


def _side() -> str:
    """``client`` inside a ClientApp call (the in-process runner calls it), else ``server``."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if Path(frame.f_code.co_filename).resolve() == CLIENT_APP_FILE:
            return "client"
        frame = frame.f_back
    return "server"


def _counted(calls: Counter[str], name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return function(*args, **kwargs)

    return wrapper


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts of the checks, rule builds and settings parses, patched where each is looked up."""
    counts: Counter[str] = Counter()
    check_run = _counted(counts, "check_run", preflight.check_run)
    check_partitions = _counted(counts, "check_partitions", preflight.check_partitions)
    for module in (preflight, server_run):  # run.py imported both names at its top
        monkeypatch.setattr(module, "check_run", check_run)
        monkeypatch.setattr(module, "check_partitions", check_partitions)
    monkeypatch.setattr(
        fairfl.strategies,
        "build_strategy",
        _counted(counts, "build_strategy", fairfl.strategies.build_strategy),
    )
    # Every RunSettings construction runs __post_init__'s checks: from_run_config and
    # dataclasses.replace alike, so a re-parse cannot hide behind either.
    validate = RunSettings.__post_init__

    def counted_validate(self: RunSettings) -> None:
        counts[f"settings:{_side()}"] += 1
        validate(self)

    monkeypatch.setattr(RunSettings, "__post_init__", counted_validate)
    deliver = InMemoryGrid._deliver

    def counted_deliver(self: InMemoryGrid, instruction: Any) -> Any:
        counts["messages"] += 1
        return deliver(self, instruction)

    monkeypatch.setattr(InMemoryGrid, "_deliver", counted_deliver)
    return counts


def _run(out: Path) -> int:
    return main(
        [
            "run",
            "--strategy",
            "fedavg",
            "-c",
            "num-server-rounds=2",
            f"num-partitions={NUM_CLIENTS}",
            "local-epochs=1",
            "batch-size=64",
            "--quiet",
            "--out",
            str(out),
        ]
    )


def test_one_run_checks_once_builds_one_rule_and_parses_settings_once_a_side(
    tmp_path: Path, calls: Counter[str]
) -> None:
    assert _run(tmp_path / "a") == 0

    # Each client trained and evaluated twice: a parse per message would show as 4 a client.
    assert calls["messages"] >= 4 * NUM_CLIENTS
    assert calls["check_run"] == 1
    assert calls["build_strategy"] == 1
    assert calls["check_partitions"] == 1
    assert calls["settings:server"] == 1
    # The in-process clients share this process, so one parse serves all of them.
    assert calls["settings:client"] == 1


def test_a_new_run_in_the_same_process_parses_its_own_settings(
    tmp_path: Path, calls: Counter[str]
) -> None:
    # The in-process runner stamps every run with run id 1: the ClientApp must still
    # read the second run's config, not reuse the first's settings.
    assert _run(tmp_path / "a") == 0
    first = calls["settings:client"]
    assert (
        main(
            [
                "run",
                "-c",
                "num-server-rounds=1",
                f"num-partitions={NUM_CLIENTS + 1}",
                "local-epochs=1",
                "batch-size=64",
                "--quiet",
                "--out",
                str(tmp_path / "b"),
            ]
        )
        == 0
    )
    assert calls["settings:client"] == first + 1
    assert calls["check_run"] == 2 and calls["build_strategy"] == 2


def test_the_clientapp_parses_a_run_once_per_run_id_and_keeps_few_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flwr.app import Context, RecordDict

    monkeypatch.setattr(client_app, "_parsed_runs", type(client_app._parsed_runs)())
    parses: list[int] = []
    validate = RunSettings.__post_init__

    def counted_validate(self: RunSettings) -> None:
        parses.append(self.num_partitions)
        validate(self)

    monkeypatch.setattr(RunSettings, "__post_init__", counted_validate)

    def settings(run_id: int, node_config: dict[str, Any], **run_config: Any) -> RunSettings:
        context = Context(run_id, 1, node_config, RecordDict(), run_config)
        return client_app._run_settings(context)[0]

    node = {"partition-id": 0}
    first = settings(1, node, seed=3)
    assert settings(1, node, seed=3) is first and len(parses) == 1
    # Another run id, or the same run id with another config, is parsed anew.
    assert settings(2, node, seed=3) == first and len(parses) == 2
    assert settings(1, node, seed=4).seed == 4 and len(parses) == 3
    # A node config's num-partitions is applied once per run and value.
    five = {"partition-id": 0, "num-partitions": 5}
    assert settings(1, five, seed=4).num_partitions == 5 and parses[-2:] == [20, 5]
    assert settings(1, five, seed=4).num_partitions == 5 and len(parses) == 5
    assert settings(1, node, seed=4).num_partitions == 20 and len(parses) == 5
    # The cache is bounded: old runs make way.
    for run_id in range(3, 3 + 2 * client_app.RUN_SETTINGS_CACHE):
        settings(run_id, node)
    assert len(client_app._parsed_runs) == client_app.RUN_SETTINGS_CACHE
    # A config that fails to parse raises on every message; nothing is kept.
    for _ in range(2):
        with pytest.raises(ValueError, match="run config lr must be > 0"):
            settings(99, node, lr=0.0)
    assert 99 not in client_app._parsed_runs


def test_the_in_process_runner_refuses_a_run_checked_without_its_clients(tmp_path: Path) -> None:
    from fairfl.simulation import run_inprocess

    config = {"num-partitions": NUM_CLIENTS, "out-dir": str(tmp_path / "out")}
    checked = preflight.check_run(config, local_clients=False)
    with pytest.raises(ValueError, match="local_clients=True"):
        run_inprocess(config, checked=checked)
    assert not (tmp_path / "out" / "rounds.jsonl").exists()
