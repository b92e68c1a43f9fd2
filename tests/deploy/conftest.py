"""Deployment tests: ``deploy/localfed.py`` importable as ``localfed``; SIGTERM runs
teardown; the soak runs only with ``-m soak``."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
if str(DEPLOY) not in sys.path:
    sys.path.insert(0, str(DEPLOY))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Soak tests run only when asked for (``-m soak``): never in a plain or CI run.

    The 50-round churn soak takes about 15 minutes on an idle machine; the short churn
    test keeps its checks in CI (issue 41).
    """
    if "soak" in (config.getoption("markexpr") or ""):
        return
    soaks = [item for item in items if item.get_closest_marker("soak")]
    if soaks:
        config.hook.pytest_deselected(items=soaks)
        items[:] = [item for item in items if not item.get_closest_marker("soak")]


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="module", autouse=True)
def sigterm_runs_teardown() -> Iterator[None]:
    """SIGTERM ends the session as Ctrl-C does, so fixtures still stop what they started.

    The federations' processes run in sessions of their own and the namespaces outlive
    them; killed outright, pytest would leave both behind. ``scripts/test.sh`` stops this
    phase with SIGTERM when an earlier phase fails, then waits for the teardown. Module
    scope: set up before each module's federation and restored after its teardown, so the
    handler never reaches tests outside ``tests/deploy`` (some check SIGTERM's default).
    """
    previous = signal.signal(signal.SIGTERM, _interrupt)
    yield
    signal.signal(signal.SIGTERM, previous)
