"""The FAB that ``flwr run .`` builds from this repository: the apps' code, under Flower's limit.

Flower refuses a FAB over 10 MB; the results committed under ``docs/results`` alone weigh
9.8 MB of the file types a FAB packs, so ``[tool.flwr.app] fab-include`` packs fairfl's
code only (every deployment test's ``flwr run`` failed on the size before). The same
pattern must hold in a copy of the app that has only ``pyproject.toml`` and ``fairfl/``
(``fairfl.simulation.staging`` stages such copies for ``flwr run``): Flower refuses a
pattern that matches no file, so exclude patterns naming the docs or tests would fail
there.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fairfl.simulation.staging import stage_app

ROOT = Path(__file__).resolve().parents[2]
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


def test_the_staged_app_builds_the_same_fab(tmp_path: Path, repository_fab: list[str]):
    """What fairfl's engine runner hands ``flwr run`` packs what the repository packs."""
    staged = stage_app(ROOT, tmp_path / "staged" / ROOT.name)
    assert staged != ROOT
    assert not list(staged.rglob("__pycache__"))
    assert sorted(_build(staged, tmp_path / "out")) == sorted(repository_fab)


def _app(folder: Path, flwr_app: str) -> Path:
    folder.mkdir()
    (folder / "pyproject.toml").write_text(f"[tool.flwr.app]\n{flwr_app}\n")
    (folder / "pkg").mkdir()
    (folder / "pkg" / "a.py").write_text("")
    (folder / "pkg" / "notes.txt").write_text("")
    return folder


def test_staging_copies_only_what_the_patterns_name(tmp_path: Path):
    app = _app(tmp_path / "app", 'fab-include = ["pkg/**/*.py"]')
    (app / ".gitignore").write_text("*.pyc\n")
    staged = stage_app(app, tmp_path / "staged")
    files = sorted(str(p.relative_to(staged)) for p in staged.rglob("*") if p.is_file())
    assert files == [".gitignore", "pkg/a.py", "pyproject.toml"]


@pytest.mark.parametrize("flwr_app", ['publisher = "x"', 'fab-include = ["**/*.py"]'])
def test_an_app_without_literal_include_folders_is_not_staged(tmp_path: Path, flwr_app: str):
    # Without fab-include Flower packs by its own rules from the whole app; a pattern
    # starting with a wildcard may match anywhere: only the app itself packs the same.
    app = _app(tmp_path / "app", flwr_app)
    assert stage_app(app, tmp_path / "staged") == app
    assert not (tmp_path / "staged").exists()
