"""Shared by the simulation tests: scripts/flwr_sim.py run as a user runs it."""

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def flwr_sim(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``scripts/flwr_sim.py`` with ``-c overrides``; fail the test if it fails."""

    def run(overrides: str, supernodes: int, timeout: float) -> subprocess.CompletedProcess[str]:
        completed = subprocess.run(
            [
                sys.executable,
                str(ROOT / "scripts" / "flwr_sim.py"),
                "--supernodes",
                str(supernodes),
                "--flwr-home",
                str(tmp_path / "flwr-home"),
                # One ClientApp actor: another would be one more process importing torch
                # (~4.5 CPU-s a run); these small runs do not need two at a time.
                "--init-arg",
                "num_cpus=1",
                "-c",
                overrides,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
        return completed

    return run
