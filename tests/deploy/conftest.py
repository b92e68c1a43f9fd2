"""Deployment tests: ``deploy/localfed.py`` importable as ``localfed``; SIGTERM runs teardown."""

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
