"""``pip install "fairfl[client]"`` next to a user's torch changes nothing of it (issue 40).

A venv with the user's torch and no torchvision: with torchvision in ``[client]``, pip
would fetch torchvision and, for PyPI's torchvision, replace a CPU torch with a CUDA
build. The stand-in is this test's own environment less torchvision: a fresh venv whose
``.pth`` points at a folder of links to every installed distribution except
torchvision's. Offline: ``--no-index`` and only fairfl's freshly built wheel to find.
"""

from __future__ import annotations

import json
import subprocess
import sysconfig
import tomllib
import venv
from email.parser import Parser
from pathlib import Path
from zipfile import ZipFile

import pytest
from packaging.requirements import Requirement

from tests.project.test_packaging import build_wheel

SITE = Path(sysconfig.get_paths()["purelib"])
ROOT = Path(__file__).resolve().parents[2]


def extra_requirements(wheel: Path, extra: str) -> set[str]:
    """Names of the wheel's ``Requires-Dist`` that only ``extra`` brings."""
    with ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(name).decode())
    names = set()
    for line in metadata.get_all("Requires-Dist", []):
        requirement = Requirement(line)
        marker = requirement.marker
        only_this = marker is not None and not marker.evaluate({"extra": ""})
        if only_this and marker.evaluate({"extra": extra}):
            names.add(requirement.name)
    return names


def test_pyproject_keeps_torchvision_out_of_the_client_extra():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert {Requirement(r).name for r in extras["client"]} == {"torch"}
    assert {Requirement(r).name for r in extras["vision"]} == {"torchvision"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("dist"))


@pytest.mark.integration
def test_the_client_extra_is_torch_alone_and_torchvision_is_the_vision_extra(wheel):
    assert extra_requirements(wheel, "client") == {"torch"}
    assert extra_requirements(wheel, "vision") == {"torchvision"}


@pytest.mark.integration
def test_installing_the_client_extra_keeps_the_users_torch(wheel, tmp_path):
    # Prepare: the user's venv, torch (this environment's) but no torchvision.
    kept = tmp_path / "site"
    kept.mkdir()
    for entry in SITE.iterdir():
        if not entry.name.lower().startswith("torchvision"):
            (kept / entry.name).symlink_to(entry)
    user = tmp_path / "venv"
    venv.create(user, with_pip=False)
    python = user / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(purelib, "user-site.pth").write_text(f"{kept}\n")
    probe = (
        "import importlib.util as u; "
        "print(u.find_spec('torch') is None, u.find_spec('torchvision') is None)"
    )
    assert subprocess.run([python, "-c", probe], capture_output=True, text=True).stdout == (
        "False True\n"
    )

    # Execute: what pip would do, offline, with only fairfl's wheel to find.
    def dry_run(extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                python,
                "-m",
                "pip",
                "install",
                "--dry-run",
                "--no-index",
                "--report",
                str(tmp_path / f"{extra}.json"),
                "--quiet",
                f"fairfl[{extra}] @ {wheel.as_uri()}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )

    client, vision = dry_run("client"), dry_run("vision")
    # Assert: [client] would install fairfl and nothing else: torch stays as it is.
    assert client.returncode == 0, client.stderr
    installs = json.loads((tmp_path / "client.json").read_text())["install"]
    assert [item["metadata"]["name"] for item in installs] == ["fairfl"]
    # The stand-in can tell: [vision] needs torchvision, which it lacks (and cannot fetch).
    assert vision.returncode != 0 and "Cannot install fairfl[vision]" in vision.stderr
