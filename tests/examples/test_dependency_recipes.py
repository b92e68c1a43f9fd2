"""Dependency recipes for an app that uses fairfl, through ``flwr run`` (issue 40).

Flower 1.42's per-run install (on unless FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1;
``flwr/supercore/superexec/dependency_installer.py``) unpacks the app under
``$FLWR_HOME/apps/...`` and runs ``uv sync --no-install-project --no-install-package flwr
--inexact`` there into a fresh environment, ``$FLWR_HOME/runtime-envs/<run id>``, whose
site-packages then lead the ServerApp's ``sys.path``. Each test runs ``recipe_app`` with
its ``pyproject.toml`` naming fairfl as ``docs/site/howto/plug-in.md`` shows:

- wheel URL: ``"fairfl[client] @ file:///.../fairfl-<version>-py3-none-any.whl"``, and
  the same wheel served at ``http://127.0.0.1:<port>/`` by an ``http.server`` this
  module starts and stops;
- git URL: ``"fairfl[client] @ git+file:///.../fairfl@v<version>"``, a repository made
  here from the checkout's HEAD (the files of fairfl's sdist), tagged;
- absolute path: ``"fairfl[client]"`` and ``[tool.uv.sources]`` ``fairfl = { path =
  "/abs/.../fairfl-<version>-py3-none-any.whl" }``;
- relative path: the same, relative; it resolves from the unpacked app's folder under
  ``$FLWR_HOME/apps``, and the run fails with exit code 608
  (COMMON_RUNTIME_DEPENDENCY_INSTALLATION_ERROR).

The recipe "runtime install off" (plain ``"fairfl[client]"``, fairfl preinstalled,
FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1) is Flower's quickstart as
``tests/examples/test_quickstart_pytorch.py`` runs it.

No package index is reached (``UV_NO_INDEX=1``, ``conftest.py``), hence two stand-ins:

- fairfl's own requirements (numpy, flwr, torch, ...) would come from the index. The app
  declares fairfl's metadata without them (uv's ``[[tool.uv.dependency-metadata]]``), so
  uv installs fairfl's real wheel alone; its requirements are this environment's, which
  the app's processes also see.
- Building the git checkout needs its build backend, hatchling, which uv's isolated build
  fetches from the index. So the module first builds that commit's wheel with this
  environment's hatchling (``uv pip install --no-build-isolation``) into the uv cache the
  SuperLink's uv uses; uv keys a git build by commit, and Flower's ``uv sync`` takes the
  wheel from there and builds nothing.
"""

from __future__ import annotations

import functools
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import tomllib
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.examples.flower_run import flwr_run
from tests.project.test_packaging import build_wheel

ROOT = Path(__file__).resolve().parents[2]
APP = Path(__file__).resolve().parent / "recipe_app"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = PROJECT["project"]["version"]
# fairfl's metadata without its requirements: they are this environment's (no index here).
STANDIN = f"""
[[tool.uv.dependency-metadata]]
name = "fairfl"
version = "{VERSION}"
requires-dist = []
provides-extras = {json.dumps(sorted(PROJECT["project"]["optional-dependencies"]))}
"""


def recipe_app(tmp_path: Path, requirement: str, *, path: str | None = None) -> Path:
    """A copy of ``recipe_app`` whose only dependency is ``requirement``, with the stand-in.

    ``path`` adds ``[tool.uv.sources]`` ``fairfl = { path = ... }``.
    """
    app = tmp_path / "project" / "recipe-app"
    shutil.copytree(APP, app, ignore=shutil.ignore_patterns("__pycache__"))
    pyproject = app / "pyproject.toml"
    text = pyproject.read_text()
    assert text.count('dependencies = ["fairfl"]') == 1
    text = text.replace('dependencies = ["fairfl"]', f"dependencies = [{json.dumps(requirement)}]")
    if path is not None:
        text += f"\n[tool.uv.sources]\nfairfl = {{ path = {json.dumps(path)} }}\n"
    pyproject.write_text(text + STANDIN)
    return app


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """fairfl's wheel, built from this checkout."""
    return build_wheel(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def wheel_server(wheel: Path) -> Iterator[tuple[str, list[tuple[str, int]]]]:
    """``http://127.0.0.1:<port>`` serving the wheel's folder; the requests it answered."""
    answered: list[tuple[str, int]] = []

    class Handler(SimpleHTTPRequestHandler):
        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            answered.append((self.requestline, int(code)))

    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(wheel.parent))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", answered
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def git_repo(
    tmp_path_factory: pytest.TempPathFactory, flower_installing: dict[str, str]
) -> tuple[str, str]:
    """A git repository of fairfl's sdist files at HEAD, tagged; its URL and commit.

    The commit's wheel is built here into the SuperLink's uv cache (module docstring).
    """
    repo = tmp_path_factory.mktemp("git") / "fairfl"
    files = [
        item.lstrip("/")
        for item in PROJECT["tool"]["hatch"]["build"]["targets"]["sdist"]["include"]
    ]
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", "HEAD", *files],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(repo, filter="data")

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
        )
        return done.stdout.strip()

    git("init", "-q")
    git("add", ".")
    author = ("-c", "user.name=fairfl tests", "-c", "user.email=tests@localhost")
    git(*author, "-c", "commit.gpgsign=false", "commit", "-q", "-m", "fairfl's sdist files")
    git("tag", f"v{VERSION}")
    url = f"git+{repo.as_uri()}"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "uv",
            "pip",
            "install",
            "--quiet",
            "--python",
            sys.executable,
            "--no-build-isolation",
            "--no-deps",
            "--target",
            str(repo.parent / "scratch"),
            f"fairfl @ {url}@v{VERSION}",
        ],
        env=flower_installing,
        check=True,
        timeout=300,
    )
    return url, git("rev-parse", "HEAD")


@pytest.mark.integration
@pytest.mark.parametrize("recipe", ["wheel file URL", "wheel http URL", "git URL", "absolute path"])
def test_a_recipe_installs_fairfl_under_flowers_per_run_install(
    flower_installing, wheel, tmp_path, request, recipe
):
    path = None
    if recipe == "wheel file URL":
        requirement, source = f"fairfl[client] @ {wheel.as_uri()}", wheel.as_uri()
    elif recipe == "wheel http URL":
        base, answered = request.getfixturevalue("wheel_server")
        requirement, source = f"fairfl[client] @ {base}/{wheel.name}", f"{base}/{wheel.name}"
    elif recipe == "git URL":
        url, commit = request.getfixturevalue("git_repo")
        requirement, source = f"fairfl[client] @ {url}@v{VERSION}", f"{url}@{commit}"
    else:
        requirement, path, source = "fairfl[client]", str(wheel), wheel.as_uri()
    app = recipe_app(tmp_path, requirement, path=path)
    code, text = flwr_run(app, flower_installing, tmp_path / "flwr.log", cwd=app, timeout=400)
    assert code == 0, text[-5000:]
    # `flwr run --stream` exits 0 whatever the run did: the ServerApp's last line says.
    assert "recipe-app: aggregated-rounds=[1]" in text, text[-5000:]
    # Flower's uv sync installed fairfl, from the recipe's source, into the run's
    # environment under FLWR_HOME, and the ServerApp imported it from there.
    assert f"Installed: [fairfl=={VERSION} (from {source})]" in text, text[-5000:]
    runtime_envs = Path(flower_installing["FLWR_HOME"]) / "runtime-envs"
    assert f"recipe-app: fairfl from {runtime_envs}{os.sep}" in text, text[-5000:]
    if recipe == "wheel http URL":
        assert (f"GET /{wheel.name} HTTP/1.1", 200) in answered


@pytest.mark.integration
def test_a_relative_uv_path_source_fails_under_flowers_per_run_install(
    flower_installing, wheel, tmp_path
):
    relative = os.path.relpath(wheel, tmp_path / "project" / "recipe-app")
    app = recipe_app(tmp_path, "fairfl[client]", path=relative)
    _, text = flwr_run(app, flower_installing, tmp_path / "flwr.log", cwd=app, timeout=400)
    assert "recipe-app: aggregated-rounds" not in text, text[-5000:]
    # uv looked for the wheel relative to the unpacked app under FLWR_HOME.
    assert "uv sync failed" in text and "Distribution not found at" in text, text[-5000:]
    assert "Exit Code: 608" in text, text[-5000:]
