"""The FAB that ``flwr run .`` builds from this repository: the apps' code, under Flower's limit.

Flower refuses a FAB over 10 MB; the results committed under ``docs/results`` alone weigh
9.8 MB of the file types a FAB packs, so ``[tool.flwr.app] fab-exclude`` keeps the docs,
tests and tools out (every deployment test's ``flwr run`` failed on it before).
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Flower's limit (flwr.common.constant.FAB_MAX_SIZE).
FAB_MAX_SIZE = 10 * 1024 * 1024


def test_the_repository_builds_a_fab_with_the_apps_and_nothing_else(tmp_path: Path):
    flwr = Path(sys.executable).with_name("flwr")  # the venv's, beside this interpreter
    command = [str(flwr)] if flwr.is_file() else ["flwr"]
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0"}
    done = subprocess.run(
        [*command, "build", "--app", str(ROOT)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (fab,) = tmp_path.glob("*.fab")
    assert fab.stat().st_size < FAB_MAX_SIZE
    names = zipfile.ZipFile(fab).namelist()
    assert "fairfl/server/app.py" in names and "fairfl/client/app.py" in names
    assert not [n for n in names if n.startswith(("docs/", "tests/", "benchmarks/"))]
