"""The built docs site (``bash scripts/docs.sh``) that the tests in this folder read.

CI builds it beside its unit tests and runs the tests that read it (those using the
``built_site`` fixture, marked ``docs_site`` here) once it is built; elsewhere a missing
build is made here (HTML only, a few minutes on 2 cores).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "build" / "docs"


def pytest_configure(config: pytest.Config) -> None:
    """Register ``docs_site``: the test reads the built site (``scripts/test.sh`` waits)."""
    config.addinivalue_line("markers", "docs_site: reads the built docs site (built_site)")


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects on the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``docs_site`` every test that uses :func:`built_site`."""
    for item in items:
        if "built_site" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.docs_site)


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
