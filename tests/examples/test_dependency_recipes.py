"""Dependency recipes for an app that uses fairfl, through ``flwr run`` (issue 40).

Flower's per-run install (on unless FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1)
unpacks the app under ``$FLWR_HOME/apps/...`` and runs ``uv sync`` there into a fresh
environment. An app that names fairfl by ``[tool.uv.sources]`` path:

- an absolute path works: the ServerApp imports fairfl from the per-run environment;
- a relative path resolves from the unpacked app's folder, not the user's project, and
  the run fails with exit code 608 (COMMON_RUNTIME_DEPENDENCY_INSTALLATION_ERROR).

Offline (``UV_OFFLINE=1``), so the path is a stand-in: fairfl's freshly built wheel with
its ``Requires-Dist`` removed. fairfl's dependencies (numpy, flwr, ...) would come from
the index; here they are this environment's, which the app's processes also see. The
"runtime install off" recipe is what tests/examples/test_quickstart_pytorch.py runs.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.test_packaging import build_wheel

APP = Path(__file__).resolve().parent / "recipe_app"
BIN = Path(sys.executable).parent


def without_requirements(wheel: Path, out_dir: Path) -> Path:
    """A copy of ``wheel`` whose METADATA has no ``Requires-Dist`` (RECORD updated)."""
    out = out_dir / wheel.name
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(out, "w") as target:
        names = source.namelist()
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        record_name = next(n for n in names if n.endswith(".dist-info/RECORD"))
        metadata = b"".join(
            line
            for line in source.read(metadata_name).splitlines(keepends=True)
            if not line.startswith(b"Requires-Dist:")
        )
        digest = base64.urlsafe_b64encode(hashlib.sha256(metadata).digest()).rstrip(b"=")
        record = b"".join(
            f"{metadata_name},sha256={digest.decode()},{len(metadata)}\n".encode()
            if line.startswith(metadata_name.encode() + b",")
            else line
            for line in source.read(record_name).splitlines(keepends=True)
        )
        for name in names:
            data = {metadata_name: metadata, record_name: record}.get(name)
            target.writestr(name, data if data is not None else source.read(name))
    return out


@pytest.fixture(scope="module")
def standin_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    built = build_wheel(tmp_path_factory.mktemp("dist"))
    return without_requirements(built, tmp_path_factory.mktemp("standin"))


@pytest.mark.integration
@pytest.mark.parametrize("recipe", ["absolute path", "relative path"])
def test_a_uv_path_source_under_flowers_per_run_install(
    flower_installing, standin_wheel, tmp_path, recipe
):
    app = tmp_path / "project" / "recipe-app"
    shutil.copytree(APP, app, ignore=shutil.ignore_patterns("__pycache__"))
    path = standin_wheel if recipe == "absolute path" else os.path.relpath(standin_wheel, app)
    with (app / "pyproject.toml").open("a") as pyproject:
        pyproject.write(f'\n[tool.uv.sources]\nfairfl = {{ path = "{path}" }}\n')
    log = tmp_path / "flwr.log"
    with log.open("wb") as out:
        completed = subprocess.run(
            [str(BIN / "flwr"), "run", str(app), "--stream"],
            cwd=app,
            env=flower_installing,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=400,
            check=False,
        )
    text = log.read_text(errors="replace")
    home = flower_installing["FLWR_HOME"]
    if recipe == "absolute path":
        assert completed.returncode == 0, text[-5000:]
        assert "recipe-app: aggregated-rounds=[1]" in text, text[-5000:]
        # fairfl came from the per-run environment under FLWR_HOME, not this checkout.
        assert f"recipe-app: fairfl from {home}" in text, text[-5000:]
    else:
        assert "recipe-app: aggregated-rounds" not in text, text[-5000:]
        # uv looked for the wheel relative to the unpacked app under FLWR_HOME.
        assert "uv sync failed" in text and "Distribution not found at" in text, text[-5000:]
        assert "Exit Code: 608" in text, text[-5000:]
