"""experiments/dp_tradeoff.py: its runs must have been given exactly the settings it states.

A second ``--set`` to ``fairfl compare`` replaces the first, so an earlier version's digits
DP runs fell back to the defaults (20 clients, 20 rounds) while its no-DP runs had 10 and
10; ``check_settings`` now stops the experiment on such a run.
"""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_experiment():
    name = "dp_tradeoff"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / "dp_tradeoff.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _write_run(folder: Path, given: dict[str, object]) -> None:
    run = folder / "runs" / "ditto" / "seed-0"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"config_given": given}))


def test_same_value_reads_numbers_as_numbers() -> None:
    experiment = _load_experiment()
    assert experiment.same_value(1.0, "1")
    assert experiment.same_value(10, "10")
    assert experiment.same_value("digits", "digits")
    assert not experiment.same_value(20, "10")
    assert not experiment.same_value("none", "central-fixed")


def test_check_settings_passes_a_run_given_every_setting(tmp_path: Path) -> None:
    experiment = _load_experiment()
    _write_run(tmp_path, {"num-partitions": 10, "dp": "central-fixed", "dp-noise-multiplier": 1.0})
    experiment.check_settings(tmp_path, ["num-partitions=10", "dp-noise-multiplier=1"])


def test_check_settings_exits_on_a_run_that_lost_a_setting(tmp_path: Path) -> None:
    experiment = _load_experiment()
    # The old defect: only the DP keys reached the run, num-partitions took its default.
    _write_run(tmp_path, {"dp": "central-fixed", "dp-noise-multiplier": 1.0})
    with pytest.raises(SystemExit, match="num-partitions=None"):
        experiment.check_settings(tmp_path, ["num-partitions=10", "dp=central-fixed"])


def test_committed_runs_hold_the_stated_settings() -> None:
    experiment = _load_experiment()
    out = ROOT / "docs" / "results" / "dp-tradeoff"
    for level in (None, *experiment.DATASETS["digits"]["noise"]):
        folder = out / "digits" / ("no-dp" if level is None else f"z{level}")
        settings = [*experiment.DATASETS["digits"]["settings"]]
        experiment.check_settings(folder, settings + experiment.dp_settings("digits", level))


def test_check_settings_exits_on_a_folder_without_runs(tmp_path: Path) -> None:
    experiment = _load_experiment()
    with pytest.raises(SystemExit, match=r"no run's summary\.json"):
        experiment.check_settings(tmp_path, ["num-partitions=10"])
