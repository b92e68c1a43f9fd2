"""The package's layers (DESIGN.md), enforced by import-linter's contracts in .importlinter."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    # PYTHONPATH: the tree in cwd, not the editable install, is the one analysed.
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(cwd)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_layer_contracts_are_kept():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 kept, 0 broken" in result.stdout


def test_a_strategy_importing_the_client_breaks_the_contracts(tmp_path):
    shutil.copytree(
        ROOT / "fairfl", tmp_path / "fairfl", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / ".importlinter", tmp_path)
    fedavg = tmp_path / "fairfl" / "strategies" / "fedavg.py"
    fedavg.write_text(fedavg.read_text() + "\nfrom fairfl.client import training  # noqa\n")

    result = lint_imports(tmp_path)

    assert result.returncode != 0
    assert "fairfl.strategies.fedavg -> fairfl.client.training" in result.stdout
    assert "Strategies import only the contract" in result.stdout
