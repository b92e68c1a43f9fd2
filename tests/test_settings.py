"""Run settings refuse values that would make a run misbehave, naming the key (issue 21)."""

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
        ("fraction-train", 1.5, r"in \(0, 1\]"),
        ("round-timeout", 0.0, "> 0"),
    ],
)
def test_out_of_range_numbers_are_refused_naming_key_and_range(key, value, bound):
    with pytest.raises(ValueError, match=rf"run config {key} must be {bound}, got {value}"):
        RunSettings.from_run_config({key: value})


def test_bounds_on_weights_and_losses_reach_the_strategy() -> None:
    # max-abs-weight / max-loss are run-config keys of fairfl's ServerApp: they bound the
    # replies and the new global model (fairfl.contract.bounds), and are range-checked.
    from fairfl.server.run import make_strategy

    settings = RunSettings.from_run_config({"max-abs-weight": 50.0, "max-loss": 7.5})
    strategy = make_strategy(settings, {"strategy": "fedavg"})
    assert strategy.max_abs_weight == 50.0
    assert strategy.max_loss == 7.5
    for key in ("max-abs-weight", "max-loss"):
        with pytest.raises(ValueError, match=f"run config {key} must be > 0, got -1.0"):
            RunSettings.from_run_config({key: -1.0})
