"""The ``dp-*`` keys are declared once, with the settings kit (issue #51)."""

import math
from dataclasses import fields

import pytest

from fairfl.fields import ParameterError
from fairfl.privacy.config import CALIBRATIONS, MODES, PrivacySettings
from fairfl.settings import RunSettings


def test_every_key_is_declared_with_its_default_and_the_run_settings_share_them():
    declared = PrivacySettings.run_config_keys()
    assert declared == {item.name.replace("_", "-"): item.name for item in fields(PrivacySettings)}
    assert PrivacySettings.defaults() == {
        "dp": "none",
        "dp-clipping-norm": 1.0,
        "dp-noise-multiplier": 1.0,
        "dp-delta": 1e-5,
        "dp-weight-cap": 1.0,
        "dp-calibration": "max-weight",
        "dp-loss-noise-multiplier": 0.0,
        "dp-accuracy-noise-multiplier": 0.0,
        "dp-loss-bound": 5.0,
        "dp-target-quantile": 0.5,
        "dp-clip-lr": 0.2,
        "dp-clipped-count-stddev": 0.0,
        "dp-dropout-tolerance": 0.0,
    }
    run = RunSettings()
    assert {key: getattr(run, name) for key, name in declared.items()} == (
        PrivacySettings.defaults()
    )
    assert PrivacySettings.specs()["dp"].options == MODES
    assert PrivacySettings.specs()["dp_calibration"].options == CALIBRATIONS


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("dp", "gauss", r"run config dp must be one of \('none', .*\), got 'gauss'"),
        ("dp_noise_multiplier", 0, "run config dp-noise-multiplier must be > 0, got 0"),
        ("dp_delta", 0.0, r"run config dp-delta must be in \(0, 1\), got 0.0"),
        ("dp_accuracy_noise_multiplier", -0.5, "dp-accuracy-noise-multiplier must be >= 0"),
        ("dp_loss_bound", math.inf, "run config dp-loss-bound must be a finite number, got inf"),
        ("dp_target_quantile", -0.1, r"run config dp-target-quantile must be in \[0, 1\]"),
        ("dp_calibration", True, "run config dp-calibration must be one of"),
    ],
)
def test_a_bad_value_names_its_key(name, value, message):
    with pytest.raises(ParameterError, match=message) as refused:
        PrivacySettings(**{name: value})
    assert refused.value.name == name
    assert refused.value.key == name.replace("_", "-")


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"dp": "central-adaptive", "dp_clipped_count_stddev": 0.5}, "dp-clipped-count-stddev"),
        ({"dp_loss_noise_multiplier": 1.0}, "dp-loss-noise-multiplier"),
        ({"dp_accuracy_noise_multiplier": 1.0}, "dp-accuracy-noise-multiplier"),
        ({"dp": "distributed", "dp_calibration": "cap"}, "dp-calibration"),
    ],
)
def test_a_refused_combination_names_the_key_it_refuses(values, key):
    with pytest.raises(ParameterError, match=f"run config {key}") as refused:
        PrivacySettings(**values)
    assert refused.value.key == key


def test_an_int_is_stored_as_a_float_and_the_edges_of_each_range_are_kept():
    settings = PrivacySettings(
        dp="central-adaptive",
        dp_clipping_norm=2,
        dp_weight_cap=1,  # κ >= 1: the edge is allowed
        dp_target_quantile=1,  # [0, 1]: both edges allowed
        dp_clipped_count_stddev=0.5000001,  # just above z / 2 = 0.5
    )
    assert settings.dp_clipping_norm == 2.0 and isinstance(settings.dp_clipping_norm, float)
    assert settings.dp_weight_cap == 1.0 and settings.dp_target_quantile == 1.0
