"""``fairfl run`` checks its run config before anything heavy loads, and needs no matplotlib.

Issue #50, item 1: a typo took as long as importing torch (``fairfl run -c qfl-q=1``
imported torch, flwr and matplotlib before checking the key), and ``fairfl run`` imported
the report package (its plots) although it needs only ``[client,data]``. (matplotlib
itself comes with ``[data]``: flwr-datasets requires it and imports it.)
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from blocked_extras import core_install_env, fairfl_command


def _imported(stderr: str, *, top: bool = True) -> set[str]:
    """Modules named in ``python -X importtime``'s lines (``top``: their top-level package)."""
    names = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*([\w.]+)$", stderr, flags=re.M)
    return {name.split(".")[0] if top else name for name in names}


def test_a_typed_key_is_refused_before_torch_or_matplotlib_load(tmp_path: Path):
    result = subprocess.run(
        [
            *fairfl_command()[:1],
            "-X",
            "importtime",
            *fairfl_command()[1:],
            "run",
            "-c",
            "qfl-q=1",
            "--out",
            str(tmp_path / "out"),
        ],
        env=core_install_env(tmp_path, blocked=()),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 2
    imported = _imported(result.stderr)
    assert "fairfl" in imported and "flwr" in imported  # the rules' keys were read
    assert not imported & {"torch", "torchvision", "matplotlib"}, imported
    error = [line for line in result.stderr.splitlines() if not line.startswith("import time")]
    assert error == [
        "fairfl run: error: run config: unknown key 'qfl-q' (did you mean 'qffl-q'?). Rule "
        "fedavg reads no key of its own; every run reads the keys of [tool.flwr.app.config] "
        "in pyproject.toml."
    ]
    assert not (tmp_path / "out").exists()


def test_run_imports_nothing_of_the_report_or_the_dashboard(tmp_path: Path):
    out = tmp_path / "out"
    result = subprocess.run(
        [
            *fairfl_command()[:1],
            "-X",
            "importtime",
            *fairfl_command()[1:],
            "run",
            "--quiet",
            "--out",
            str(out),
            "-c",
            "num-server-rounds=1",
            "num-partitions=3",
            "model=logreg",
        ],
        env=core_install_env(tmp_path, blocked=()),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "final client accuracy" in result.stdout
    heavy = {
        m
        for m in _imported(result.stderr, top=False)
        if m.startswith(("fairfl.report", "fairfl.sweep", "fairfl.dashboard"))
    }
    assert not heavy, heavy
