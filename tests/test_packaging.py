"""Packaging: the wheel holds one import package, and the run config is complete."""

import subprocess
import sys
import tomllib
import zipfile
from dataclasses import fields
from pathlib import Path

import pytest

from fairfl.settings import RunSettings
from fairfl.strategies.registry import STRATEGIES

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
RUN_CONFIG = PYPROJECT["tool"]["flwr"]["app"]["config"]


def test_run_settings_defaults_match_pyproject():
    for item in fields(RunSettings):
        key = item.name.replace("_", "-")
        assert key in RUN_CONFIG, f"{key} missing from [tool.flwr.app.config]"
        assert RUN_CONFIG[key] == item.default, key


def test_every_rule_hyperparameter_is_declared_with_its_default():
    for spec in STRATEGIES.values():
        for key, default in spec.defaults().items():
            if key in {f.name.replace("_", "-") for f in fields(RunSettings)}:
                continue  # shared keys such as lr
            assert key in RUN_CONFIG, f"{spec.name}: {key} missing from [tool.flwr.app.config]"
            assert RUN_CONFIG[key] == default, f"{spec.name}: {key}"


def test_default_strategy_is_registered():
    assert RUN_CONFIG["strategy"] in STRATEGIES


@pytest.mark.integration
def test_wheel_installs_only_the_fairfl_package(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(ROOT),
        ],
        check=True,
    )
    wheel = next((tmp_path / "dist").glob("fairfl-*.whl"))
    top_level = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {t for t in top_level if not t.endswith(".dist-info")} == {"fairfl"}
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
    )
    probe = "import fairfl, fairfl.strategies, fairfl.server, fairfl.client;print(fairfl.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env={"PYTHONPATH": str(target)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip().startswith(str(target))
    for generic in ("server", "client", "strategies"):
        assert not (target / generic).exists()


def test_apps_do_not_import_torchvision():
    # Flower starts a fresh ClientApp process per message: torchvision would cost seconds
    # each time (and a CPU torch wheel with PyPI's torchvision does not even import).
    probe = "import sys, fairfl.client.app, fairfl.server.app; print('torchvision' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "False"
