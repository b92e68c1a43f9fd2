"""The built docs site (``bash scripts/docs.sh``) that the tests in this folder read.

CI builds it in its docs phase, before these tests run; elsewhere a missing build is
made here (HTML only, a few minutes on 2 cores).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "build" / "docs"


@pytest.fixture(scope="session")
def built_site() -> Path:
    """The folder of the built site (its ``index.html``)."""
    if not (SITE / "index.html").exists():
        env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0"}
        subprocess.run(
            [
                sys.executable,
                "-m",
                "sphinx",
                "-b",
                "html",
                "-W",
                "--keep-going",
                "-n",
                "-q",
                "-d",
                str(ROOT / "build" / "docs-doctrees"),
                str(ROOT / "docs" / "site"),
                str(SITE),
            ],
            cwd=ROOT,
            env=env,
            check=True,
        )
    return SITE
