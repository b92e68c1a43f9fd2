"""Run settings refuse values that would make a run misbehave, naming the key (issue 21)."""

import re

import pytest

from fairfl.settings import RunSettings


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("lr", float("inf")),
        ("round-timeout", float("inf")),
        ("node-wait-timeout", float("inf")),
        ("dirichlet-alpha", float("inf")),
        ("fraction-train", float("nan")),
    ],
)
def test_non_finite_numbers_are_refused(key, value):
    with pytest.raises(ValueError, match=rf"run config {key} must be a finite number, got {value}"):
        RunSettings.from_run_config({key: value})


def test_more_required_nodes_than_partitions_fails_at_start_naming_both_keys():
    with pytest.raises(
        ValueError,
        match=r"run config min-available-nodes \(5\) is larger than num-partitions \(4\)",
    ):
        RunSettings.from_run_config({"min-available-nodes": 5, "num-partitions": 4})


def test_as_many_required_nodes_as_partitions_is_fine():
    settings = RunSettings.from_run_config({"min-available-nodes": 4, "num-partitions": 4})
    assert settings.min_available_nodes == 4


@pytest.mark.parametrize(
    ("key", "value", "bound"),
    [
        ("lr", 0.0, "> 0"),
        ("lr", -0.1, "> 0"),
        # One range in every layer (issue 51): Flower's [0, 1], as the rules' fraction_train.
        ("fraction-train", 1.5, r"in \[0, 1\]"),
        ("round-timeout", 0.0, "> 0"),
        ("max-failed-rounds", -1, r">= 0 \(0: any round that uses no train reply fails the run\)"),
    ],
)
def test_out_of_range_numbers_are_refused_naming_key_and_range(key, value, bound):
    with pytest.raises(ValueError, match=rf"run config {key} must be {bound}, got {value}"):
        RunSettings.from_run_config({key: value})


@pytest.mark.parametrize("partitioner", ["iid", "dirichlet", "shards", "groups"])
@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("group-sizes", "abc", "group-sizes must be comma-separated ints >= 1"),
        ("group-labels", "0-2|x", "group-labels entries must be ints or ranges"),
        ("group-samples-per-class", -1, "group-samples-per-class must be an int >= 0"),
    ],
)
def test_group_keys_are_checked_whatever_the_partitioner(partitioner, key, value, message):
    # Issue 47: group-sizes=abc was accepted unless the partitioner was "groups".
    config = {"partitioner": partitioner, "num-partitions": 10, key: value}
    with pytest.raises(ValueError, match=message):
        RunSettings.from_run_config(config)


def test_group_sizes_must_add_up_only_under_the_groups_partitioner():
    RunSettings.from_run_config({"partitioner": "dirichlet", "num-partitions": 3})  # "4,6"
    with pytest.raises(ValueError, match="adds up to 10 clients, but num-partitions is 3"):
        RunSettings.from_run_config({"partitioner": "groups", "num-partitions": 3})


def test_bounds_on_weights_and_losses_reach_the_strategy() -> None:
    # max-abs-weight / max-loss are run-config keys of fairfl's ServerApp: they bound the
    # replies and the new global model (fairfl.contract.bounds), and are range-checked.
    from fairfl.server.preflight import make_strategy

    settings = RunSettings.from_run_config({"max-abs-weight": 50.0, "max-loss": 7.5})
    strategy = make_strategy(settings, {"strategy": "fedavg"})
    assert strategy.max_abs_weight == 50.0
    assert strategy.max_loss == 7.5
    for key in ("max-abs-weight", "max-loss"):
        with pytest.raises(ValueError, match=f"run config {key} must be > 0, got -1.0"):
            RunSettings.from_run_config({key: -1.0})


# --------------------------------------------------------------------------- unknown keys
def _rule_keys() -> dict:
    from fairfl.strategies.registry import STRATEGIES

    return {name: spec.parameters for name, spec in STRATEGIES.items()}


def _pyproject_run_config() -> dict:
    import tomllib
    from pathlib import Path

    with (Path(__file__).resolve().parents[2] / "pyproject.toml").open("rb") as handle:
        return tomllib.load(handle)["tool"]["flwr"]["app"]["config"]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        # a typo of the rule's own key
        (
            {"strategy": "qffl", "qfl-q": 0.5},
            r"run config: unknown key 'qfl-q' \(did you mean 'qffl-q'\?\)\. "
            r"Rule qffl reads lr, qffl-q, qffl-weighting;",
        ),
        # nothing close
        (
            {"bogus-key": 1},
            r"run config: unknown key 'bogus-key' \(no known key is close\)\. "
            r"Rule fedavg reads no key of its own;",
        ),
        # several: sorted, each with its closest keys (closest first)
        (
            {"strategy": "term", "termalpha": 1.0, "num-rounds": 3},
            r"unknown keys 'num-rounds' "
            r"\(did you mean 'num-server-rounds' or 'num-partitions'\?\), "
            r"'termalpha' \(did you mean 'term-alpha' or 'rcfl-alpha' or 'fedfv-alpha'\?\)\. "
            r"Rule term reads term-alpha;",
        ),
    ],
)
def test_unknown_run_config_key_is_named_with_the_closest_valid_keys(config, message):
    from fairfl.contract.config import UnknownKeyError
    from fairfl.settings import check_run_config_keys

    with pytest.raises(UnknownKeyError, match=message):
        check_run_config_keys(config, _rule_keys())


def test_every_key_a_run_is_given_is_accepted():
    # A deployed run's config is all of [tool.flwr.app.config] (Flower adds no key of
    # its own to it), whatever the rule; the in-process and Flower simulation runners
    # pass a subset of it; and every RunSettings and rule key is accepted too.
    from fairfl.settings import check_run_config_keys

    rules = _rule_keys()
    check_run_config_keys(_pyproject_run_config(), rules)
    every = {key: 0 for key in RunSettings.run_config_keys()}
    every.update({key: 0 for keys_ in rules.values() for key in keys_})
    check_run_config_keys(every, rules)


def test_unknown_key_fails_the_run_before_it_touches_the_grid(tmp_path):
    from unittest.mock import Mock

    from flwr.serverapp import Grid

    from fairfl.server.run import run_federation

    grid = Mock(spec=Grid)
    with pytest.raises(ValueError, match=r"unknown key 'qfl-q' \(did you mean 'qffl-q'\?\)"):
        run_federation(grid, {"strategy": "qffl", "qfl-q": 0.5, "out-dir": str(tmp_path / "o")})
    assert grid.method_calls == []
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------- out-dir
@pytest.mark.parametrize("layout", ["parent-is-a-file", "out-dir-is-a-file"])
def test_out_dir_that_cannot_be_created_fails_before_any_wait_naming_it(tmp_path, layout):
    # Root may write anywhere, so an unwritable folder is made from a regular file
    # where a folder must be.
    from unittest.mock import Mock

    from flwr.serverapp import Grid

    from fairfl.server.preflight import OutDirError
    from fairfl.server.run import run_federation

    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    out_dir = blocker / "run" if layout == "parent-is-a-file" else blocker
    grid = Mock(spec=Grid)
    with pytest.raises(
        OutDirError, match=f"run config out-dir: cannot create or write {re.escape(str(out_dir))}: "
    ):
        run_federation(grid, {"out-dir": str(out_dir)})
    assert grid.method_calls == []  # no wait for SuperNodes, no training
    assert blocker.read_text() == "a file, not a folder"


def test_out_dir_is_created_and_left_without_the_write_check_file(tmp_path):
    from fairfl.server.preflight import prepare_out_dir

    out_dir = tmp_path / "a" / "b"
    prepare_out_dir(out_dir)
    assert out_dir.is_dir() and list(out_dir.iterdir()) == []


# --------------------------------------------------------------------------- defences
def test_loss_defences_reach_the_strategy_and_are_range_checked() -> None:
    from fairfl.server.preflight import make_strategy

    settings = RunSettings.from_run_config({"loss-clip-mad": 3, "max-client-share": 0.25})
    strategy = make_strategy(settings, {"strategy": "term"})
    assert strategy.loss_clip_mad == 3.0 and strategy.max_client_share == 0.25
    defaults = make_strategy(RunSettings(), {})
    assert defaults.loss_clip_mad == 0.0 and defaults.max_client_share == 1.0  # off
    for key, value, bound in [
        ("loss-clip-mad", -1.0, r">= 0 \(0: off\)"),
        ("max-client-share", 0.0, r"in \(0, 1\] \(1: off\)"),
        ("max-client-share", 1.5, r"in \(0, 1\] \(1: off\)"),
    ]:
        with pytest.raises(ValueError, match=rf"run config {key} must be {bound}, got {value}"):
            RunSettings.from_run_config({key: value})
