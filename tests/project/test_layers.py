"""The layers of docs/specs/design.md, enforced by import-linter's contracts (.importlinter)."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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
    assert "8 kept, 0 broken" in result.stdout


def test_every_top_level_module_sits_in_a_layer():
    import configparser

    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    listed = {
        name.strip().removeprefix("fairfl.")
        for line in config["importlinter:contract:layers"]["layers"].split("\n")
        for name in line.split("|")
        if name.strip()
    }
    top = {
        path.stem if path.suffix == ".py" else path.name
        for path in (ROOT / "fairfl").iterdir()
        if (path.suffix == ".py" or (path / "__init__.py").is_file())
        and path.stem not in ("__init__", "__main__")
    }
    assert top <= listed, f"not in any layer of .importlinter: {sorted(top - listed)}"


def test_an_import_cycle_inside_a_package_breaks_the_contracts(tmp_path):
    shutil.copytree(
        ROOT / "fairfl", tmp_path / "fairfl", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / ".importlinter", tmp_path)
    # tables imports nothing of the report's builder; a function-level import back is a cycle.
    tables = tmp_path / "fairfl" / "report" / "tables.py"
    tables.write_text(
        tables.read_text()
        + "\n\ndef _late() -> None:\n    from fairfl.report import build  # noqa\n"
    )

    result = lint_imports(tmp_path)

    assert result.returncode != 0
    assert "No cycles are allowed in fairfl.report" in result.stdout


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
