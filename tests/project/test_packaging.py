"""Packaging: one import package, a server on the core dependencies, a complete run config."""

import ast
import importlib.metadata
import os
import subprocess
import sys
import tarfile
import time
import tomllib
import zipfile
from dataclasses import fields
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from fairfl.settings import RunSettings
from fairfl.strategies.registry import STRATEGIES
from tests.project.server_install_probe import HEAVY

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
RUN_CONFIG = PYPROJECT["tool"]["flwr"]["app"]["config"]
FLWR_ENV = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}


def build_wheel(out_dir: Path) -> Path:
    """Build fairfl's wheel into ``out_dir`` (no isolation: hatchling is a dev dependency)."""
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
            str(out_dir),
            str(ROOT),
        ],
        check=True,
    )
    return next(out_dir.glob("fairfl-*.whl"))


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
    wheel = build_wheel(tmp_path / "dist")
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


def test_strategies_load_no_client_data_or_report_package():
    # A server that aggregates imports the rules and the contract: none of the extras.
    probe = (
        "import sys, fairfl.strategies, fairfl.contract; "
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={**os.environ, **FLWR_ENV},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "[]"


def declared(requirements: list[str]) -> set[str]:
    """Canonical distribution names of ``requirements`` (fairfl's own extras left out)."""
    names = {canonicalize_name(Requirement(r).name) for r in requirements}
    return names - {"fairfl"}


def imported_top_level_modules() -> set[str]:
    """Top-level modules that some file under fairfl/ imports (lazy imports included)."""
    found = set()
    for path in (ROOT / "fairfl").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"__future__", "fairfl"}


def test_core_dependencies_leave_out_the_extras():
    project = PYPROJECT["project"]
    extras = project["optional-dependencies"]
    core = declared(project["dependencies"])
    assert not core & {"torch", "torchvision", "scikit-learn", "flwr-datasets", "matplotlib"}
    assert "flwr[simulation]" not in "".join(project["dependencies"])
    assert Requirement(extras["all"][0]).extras == {
        "client",
        "vision",
        "data",
        "report",
        "simulation",
        "telemetry",
        "dashboard",
        "privacy",
    }
    # the trackers' libraries are an extra: a server install stays light
    assert not core & {"tensorboard", "mlflow-skinny", "wandb", "prometheus-client"}


def test_every_imported_package_is_declared():
    project = PYPROJECT["project"]
    union = declared(project["dependencies"])
    for name, requirements in project["optional-dependencies"].items():
        if name != "dev":
            union |= declared(requirements)
    distributions = importlib.metadata.packages_distributions()
    undeclared = {
        module: distributions.get(module)
        for module in imported_top_level_modules()
        if not {canonicalize_name(d) for d in distributions.get(module, [])} & union
    }
    assert not undeclared, f"imported under fairfl/ but in no [project] dependency: {undeclared}"


@pytest.mark.integration
def test_server_install_needs_only_core_dependencies(tmp_path):
    """Wheel and sdist build; the wheel with its core dependencies runs every rule."""
    dist = tmp_path / "dist"
    wheel = build_wheel(dist)
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "sdist", "-d", str(dist)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    sdist = next(dist.glob("fairfl-*.tar.gz"))
    with tarfile.open(sdist) as archive:
        names = set(archive.getnames())
    top = sdist.name.removesuffix(".tar.gz")
    for member in (
        "fairfl/strategies/__init__.py",
        "fairfl/contract/__init__.py",
        "proto/fairfl/v1/contract.proto",
        "pyproject.toml",
        "README.md",
    ):
        assert f"{top}/{member}" in names, member

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    started = time.perf_counter()
    install = subprocess.run(
        [python, "-m", "pip", "install", "-q", str(wheel)], capture_output=True, text=True
    )
    assert install.returncode == 0, install.stdout + install.stderr
    seconds = time.perf_counter() - started
    print(f"pip install of the wheel and its core dependencies: {seconds:.1f} s")
    # -I: neither the checkout nor PYTHONPATH on sys.path, so fairfl comes from the venv.
    done = subprocess.run(
        [python, "-I", str(ROOT / "tests" / "project" / "server_install_probe.py")],
        cwd=tmp_path,
        env={**os.environ, **FLWR_ENV},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"fairfl from {venv}" in done.stdout
    # the fairfl command on the core install (issue 36): help and verify work, report
    # names the extra it needs, exit 2
    fairfl = venv / "bin" / "fairfl"
    env = {**os.environ, **FLWR_ENV}
    shown = subprocess.run([fairfl, "--help"], capture_output=True, text=True, env=env)
    assert shown.returncode == 0 and "verify" in shown.stdout, shown.stderr
    run = ROOT / "docs" / "results" / "digits-table6" / "runs" / "fedavg" / "seed-0"
    verified = subprocess.run([fairfl, "verify", run], capture_output=True, text=True, env=env)
    assert verified.returncode == 0 and "30 rounds, chain intact" in verified.stdout, (
        verified.stdout + verified.stderr
    )
    report = subprocess.run(
        [fairfl, "report", run.parents[2]], capture_output=True, text=True, env=env
    )
    assert report.returncode == 2, report.stdout + report.stderr
    assert 'pip install "fairfl[report]"' in report.stderr, report.stderr
