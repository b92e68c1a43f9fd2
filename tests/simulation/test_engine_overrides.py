"""`fairfl.simulation.engine` helpers that need no SuperLink."""

from pathlib import Path

import pytest

from fairfl.simulation.engine import find_app_dir, toml_overrides

ROOT = Path(__file__).resolve().parents[2]


def test_toml_overrides_keeps_types():
    config = {"a": 1, "b": 0.1, "c": "x y", "d": True, "e": 1.0, "f": 1e-5}
    assert toml_overrides(config) == "a=1 b=0.1 c='x y' d=true e=1.0 f=1e-05"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"k": "it's"}, r"run config k must not contain a single quote"),
        ({"k": float("nan")}, r"run config k must be finite, got nan"),
        ({"k": [1]}, r"run config k must be bool, int, float or str, got list"),
    ],
)
def test_toml_overrides_rejects_what_toml_cannot_carry(config, message):
    with pytest.raises(ValueError, match=message):
        toml_overrides(config)


def test_find_app_dir_is_the_checkout():
    assert find_app_dir() == ROOT


def test_find_app_dir_without_flower_app_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no pyproject.toml with \[tool.flwr.app\]"):
        find_app_dir(tmp_path)
