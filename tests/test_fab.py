"""The FAB that ``flwr run .`` builds from this repository: the apps' code, under Flower's limit.

Flower refuses a FAB over 10 MB; the results committed under ``docs/results`` alone weigh
9.8 MB of the file types a FAB packs, so ``[tool.flwr.app] fab-include`` packs fairfl's
code only (every deployment test's ``flwr run`` failed on the size before). The same
pattern must hold in a copy of the app that has only ``pyproject.toml`` and ``fairfl/``
(``fairfl.simulation.engine`` runs such copies): Flower refuses a pattern that matches no
file, so exclude patterns naming the docs or tests would fail there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Flower's limit (flwr.common.constant.FAB_MAX_SIZE).
FAB_MAX_SIZE = 10 * 1024 * 1024


def _build(app: Path, out: Path) -> list[str]:
    """``flwr build --app app`` in ``out``; the FAB's file names."""
    flwr = Path(sys.executable).with_name("flwr")  # the venv's, beside this interpreter
    command = [str(flwr)] if flwr.is_file() else ["flwr"]
    out.mkdir()
    done = subprocess.run(
        [*command, "build", "--app", str(app)],
        cwd=out,
        env={**os.environ, "FLWR_TELEMETRY_ENABLED": "0"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (fab,) = out.glob("*.fab")
    assert fab.stat().st_size < FAB_MAX_SIZE
    return zipfile.ZipFile(fab).namelist()


@pytest.fixture(scope="module")
def repository_fab(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The repository's FAB's file names, built once for both tests (~30 s a build)."""
    return _build(ROOT, tmp_path_factory.mktemp("repo") / "out")


def test_the_repository_builds_a_fab_with_the_apps_and_nothing_else(repository_fab: list[str]):
    names = repository_fab
    assert "fairfl/server/app.py" in names and "fairfl/client/app.py" in names
    assert not [n for n in names if n.startswith(("docs/", "tests/", "benchmarks/"))]


def test_a_copy_with_only_the_app_builds_the_same_fab(tmp_path: Path, repository_fab: list[str]):
    app = tmp_path / "app"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "fairfl", app / "fairfl", ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", app)
    assert sorted(_build(app, tmp_path / "out")) == sorted(repository_fab)
