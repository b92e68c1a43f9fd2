"""What a newcomer meets on a fresh clone: the README's docs command, and the extras.

``bash scripts/docs.sh`` on a clone without ``.venv`` sets it up (``scripts/setup.sh``)
before it builds, instead of failing with "No module named sphinx"; the install tables of
the README and of the get-started page list every extra of ``fairfl[all]``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_command_sets_up_the_venv_on_a_fresh_clone(tmp_path):
    clone = tmp_path / "clone"
    (clone / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "docs.sh", clone / "scripts" / "docs.sh")
    # A set-up that records its run and fails, so that the build never starts here.
    (clone / "scripts" / "setup.sh").write_text('touch "$(dirname "$0")/../setup-ran"\nexit 7\n')
    done = subprocess.run(
        ["bash", "scripts/docs.sh"],
        cwd=clone,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (clone / "setup-ran").exists(), done.stdout + done.stderr
    assert done.returncode == 7
    assert "bash scripts/setup.sh" in done.stdout
    assert "No module named" not in done.stderr


def all_extras() -> list[str]:
    """The extras ``fairfl[all]`` installs, from pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    (requirement,) = project["optional-dependencies"]["all"]
    return re.fullmatch(r"fairfl\[([\w,]+)\]", requirement).group(1).split(",")


@pytest.mark.parametrize("page", ["README.md", "docs/site/get-started.md"])
def test_the_install_table_lists_every_extra_of_all(page):
    row = next(
        line
        for line in (ROOT / page).read_text("utf-8").splitlines()
        if line.startswith('| `pip install "fairfl[all]"`')
    )
    listed = re.findall(r"`(\w+)`", row.split("|")[2])
    assert sorted(listed) == sorted(all_extras()), (page, listed)


@pytest.mark.parametrize("page", ["README.md", "docs/site/get-started.md"])
def test_the_default_runs_numbers_are_its_committed_summary(page):
    import json

    summary = json.loads((ROOT / "docs/results/default-simulation/summary.json").read_text())
    final = summary["final_metrics"]
    shown = (
        f"final mean {100 * final['acc-mean']:.2f} %, worst-10 % "
        f"{100 * final['acc-worst-10']:.2f} %, std {100 * final['acc-std']:.2f}"
    )
    text = " ".join((ROOT / page).read_text("utf-8").split())
    assert shown in text, shown
    assert "fairfl run --out docs/results/default-simulation" in text
    config = summary["config"]
    assert (config["strategy"], config["num-partitions"], config["num-server-rounds"]) == (
        "fedavg",
        20,
        20,
    )
