"""experiments/dp_tradeoff.py: its runs must have been given exactly the settings it states.

A second ``--set`` to ``fairfl compare`` replaces the first, so an earlier version's digits
DP runs fell back to the defaults (20 clients, 20 rounds) while its no-DP runs had 10 and
10; ``check_settings`` now stops the experiment on such a run.
"""

import gzip
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


@pytest.mark.parametrize("dataset", ["digits", "adult"])
def test_committed_runs_hold_the_stated_settings(dataset: str) -> None:
    experiment = _load_experiment()
    out = ROOT / "docs" / "results" / "dp-tradeoff"
    for level in (None, *experiment.DATASETS[dataset]["noise"]):
        folder = out / dataset / ("no-dp" if level is None else f"z{level}")
        settings = [*experiment.DATASETS[dataset]["settings"]]
        experiment.check_settings(folder, settings + experiment.dp_settings(dataset, level))


def test_adult_has_more_than_two_clients_and_its_own_runs_without_dp() -> None:
    # Client-level DP over Adult's two PhD / rest clients would be all noise (the docstring).
    adult = _load_experiment().DATASETS["adult"]
    assert "num-partitions=20" in adult["settings"]
    assert "partitioner=dirichlet" in adult["settings"]
    assert "baseline" not in adult


def test_a_missing_seed_is_named_in_the_seeds_column() -> None:
    experiment = _load_experiment()
    # digits states seeds 0..4; runs finished for 0, 2 and 4.
    assert experiment.missing_seeds("digits", ["0", "2", "4"]) == ["1", "3"]
    assert experiment.seeds_cell({"seeds": 3, "missing-seeds": "1 3"}) == "3 (missing: 1, 3)"
    assert experiment.seeds_cell({"seeds": 5, "missing-seeds": ""}) == "5"


def test_a_rule_without_a_finished_run_is_listed(tmp_path: Path) -> None:
    experiment = _load_experiment()
    (tmp_path / "runs.csv").write_text(
        "label,seed,status\nfedavg,0,ok\nqffl,0,failed\nterm,0,ok\nditto,0,ok\n"
    )
    assert experiment.unfinished(tmp_path, "adult", "1") == [
        f"- adult, z = 1: no finished run of qffl (`{tmp_path.name}`)."
    ]
    # No runs.csv at all: every rule is listed.
    assert len(experiment.unfinished(tmp_path / "absent", "adult", None)) == 4


def test_check_settings_exits_on_a_folder_without_runs(tmp_path: Path) -> None:
    experiment = _load_experiment()
    with pytest.raises(SystemExit, match=r"no run's summary\.json"):
        experiment.check_settings(tmp_path, ["num-partitions=10"])


def test_the_privacy_howto_shows_the_committed_table_with_adult() -> None:
    # docs/site/_ext/generate_results.py renders the include; the how-to includes it.
    sys.path.insert(0, str(ROOT / "docs" / "site" / "_ext"))
    try:
        import generate_results
    finally:
        sys.path.remove(str(ROOT / "docs" / "site" / "_ext"))
    table = generate_results.dp_tradeoff_table()
    assert not table.startswith("# ")  # the how-to's own heading stands above it
    assert "| adult | fedavg | none |" in table
    image = table.split("](", 1)[1].split(")", 1)[0]
    generated = ROOT / "docs" / "site" / "_generated"
    assert (generated / image).resolve() == (
        ROOT / "docs" / "results" / "dp-tradeoff" / "worst-vs-epsilon.png"
    )
    howto = (ROOT / "docs" / "site" / "howto" / "differential-privacy.md").read_text()
    assert "```{include} ../_generated/dp-tradeoff-table.md\n:relative-images:\n```" in howto


def test_noise_weight_is_sigma_over_z_times_c(tmp_path: Path) -> None:
    experiment = _load_experiment()
    run = tmp_path / "runs" / "qffl" / "seed-0"
    run.mkdir(parents=True)
    with gzip.open(run / "rounds.jsonl.gz", "wt") as handle:
        for std in (0.5, 1.5):  # z = 2, C = 0.25: weights 0.5 / 0.5 = 1 and 1.5 / 0.5 = 3
            handle.write(json.dumps({"train": {"diagnostics": {"dp-noise-std": std}}}) + "\n")
    assert experiment.noise_weight(tmp_path, "qffl", "2", 0.25) == pytest.approx(2.0)
    assert experiment.noise_weight(tmp_path, "term", "2", 0.25) is None
