"""The docs build's ``fairfl-exec`` cache (docs/site/_ext/exec_blocks.py) on a small site.

A block runs once for a program and its inputs; another build (a fresh output folder
and doctree cache, as in a fresh clone) shows the kept output without running it, and
a change to a file the blocks can run, or to the block, runs it again.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "site" / "_ext"))

import exec_blocks  # noqa: E402

CONF = """
import sys
sys.path.insert(0, {ext!r})
from exec_blocks import ExecDirective

extensions = ["myst_parser"]
exclude_patterns = ["_build"]


def setup(app):
    app.add_directive("fairfl-exec", ExecDirective)
"""

PAGE = """# Page

```{{fairfl-exec}}
with open({runs!r}, "a") as runs:
    runs.write("ran\\n")
print("{greeting} from the block")
```
"""


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A one-page site whose block counts its runs; blocks run from ``tmp_path/repo``."""
    from sphinx.cmd.build import build_main

    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "module.py").write_text("VALUE = 1\n")
    monkeypatch.setattr(exec_blocks, "REPO", repo)
    monkeypatch.setattr(exec_blocks, "EXEC_INPUTS", ("pkg",))
    monkeypatch.setenv("FAIRFL_DOCS_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "source"
    source.mkdir()
    (source / "conf.py").write_text(CONF.format(ext=str(ROOT / "docs" / "site" / "_ext")))
    runs = tmp_path / "runs.txt"
    builds = iter(range(100))

    def build(greeting: str = "hello") -> tuple[str, int]:
        """Build the site afresh; return its page's text and how often the block has run."""
        (source / "index.md").write_text(PAGE.format(runs=str(runs), greeting=greeting))
        exec_blocks.exec_inputs_digest.cache_clear()  # each build is a process of its own
        out = tmp_path / f"build{next(builds)}"
        code = build_main(
            ["-b", "html", "-W", "-q", "-d", str(out / "doctrees"), str(source), str(out / "html")]
        )
        assert code == 0
        html = (out / "html" / "index.html").read_text(encoding="utf-8")
        return html, len(runs.read_text().splitlines())

    return repo, build


def test_a_block_runs_once_for_the_same_program_and_inputs(site):
    _, build = site
    html, runs = build()
    assert "hello from the block" in html and runs == 1
    html, runs = build()
    assert "hello from the block" in html and runs == 1  # shown from the cache
    assert "Output (ran when these docs were built" in html


def test_a_changed_input_file_or_block_runs_it_again(site):
    repo, build = site
    assert build()[1] == 1
    (repo / "pkg" / "module.py").write_text("VALUE = 2\n")
    assert build()[1] == 2
    html, runs = build("hi")
    assert "hi from the block" in html and runs == 3
    assert build("hi")[1] == 3


SESSION_PAGE = """# Page

```{{fairfl-exec}}
:session:
:end-session:
:language: bash
sleep 300 &
echo $! > {pid_file}
wait
```
"""


def test_a_stopped_build_stops_the_running_session(tmp_path):
    """SIGTERM to the build (scripts/test.sh stopping it) stops the session's processes."""
    import os
    import signal
    import subprocess
    import time

    source = tmp_path / "source"
    source.mkdir()
    (source / "conf.py").write_text(CONF.format(ext=str(ROOT / "docs" / "site" / "_ext")))
    pid_file = tmp_path / "sleep.pid"
    (source / "index.md").write_text(SESSION_PAGE.format(pid_file=pid_file))
    build = subprocess.Popen(
        [sys.executable, "-m", "sphinx", "-b", "html", "-q", str(source), str(tmp_path / "out")],
        env={**os.environ, "FAIRFL_DOCS_CACHE": str(tmp_path / "cache")},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    sleeper = None
    try:
        deadline = time.monotonic() + 120
        while not pid_file.exists() or not pid_file.read_text().strip():
            assert build.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        sleeper = int(pid_file.read_text())
        build.send_signal(signal.SIGTERM)
        assert build.wait(timeout=60) != 0
        state = Path(f"/proc/{sleeper}/stat")
        assert not state.exists() or state.read_text().rsplit(")", 1)[1].split()[0] == "Z"
        assert not list((tmp_path / "cache").glob("*.json"))  # nothing kept of it
    finally:
        if build.poll() is None:
            build.kill()
            build.wait()
        if sleeper is not None and Path(f"/proc/{sleeper}").exists():
            os.kill(sleeper, signal.SIGKILL)  # left running: the check above failed


FIGURE_PAGE = """# Page

```{{fairfl-exec}}
:figure: a square
import os

with open({runs!r}, "a") as runs:
    runs.write("ran\\n")
with open(os.environ["FAIRFL_DOCS_FIGURE"], "wb") as figure:
    figure.write({png!r})
print("saved")
```
"""


def test_a_figure_the_block_saves_is_shown_and_kept_in_the_cache(tmp_path, monkeypatch):
    """``:figure:``: the PNG the block saved is on the page, also when the block is not rerun."""
    import base64

    from sphinx.cmd.build import build_main

    monkeypatch.setattr(exec_blocks, "EXEC_INPUTS", ())
    monkeypatch.setenv("FAIRFL_DOCS_CACHE", str(tmp_path / "cache"))
    runs = tmp_path / "runs.txt"
    # A 1x1 PNG: what the block saves is copied byte for byte.
    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="
    )
    shown = []
    for build in range(2):  # each from a fresh source folder: the second from the cache only
        source = tmp_path / f"source{build}"
        source.mkdir()
        (source / "conf.py").write_text(CONF.format(ext=str(ROOT / "docs" / "site" / "_ext")))
        (source / "index.md").write_text(FIGURE_PAGE.format(runs=str(runs), png=png))
        exec_blocks.exec_inputs_digest.cache_clear()
        out = tmp_path / f"build{build}"
        assert build_main(["-b", "html", "-W", "-q", str(source), str(out)]) == 0
        html = (out / "index.html").read_text(encoding="utf-8")
        images = list((out / "_images").glob("*.png"))
        assert 'alt="a square"' in html and len(images) == 1
        assert images[0].name in html
        shown.append(images[0].read_bytes())
    assert shown == [png, png]
    assert len(runs.read_text().splitlines()) == 1


def test_every_block_of_the_built_site_is_in_the_cache(built_site):
    """A second build, also from a fresh clone, would show every block from the cache.

    Each shown output carries its cache key (the class ``fairfl-exec-key-<key>``); each
    key must have its entry in ``$FAIRFL_DOCS_CACHE`` (the build that made the site
    stored it), so rebuilding with nothing changed runs no block.
    """
    import re

    keys = set()
    for page in built_site.rglob("*.html"):
        keys |= set(re.findall(r"fairfl-exec-key-([0-9a-f]{64})", page.read_text("utf-8")))
    assert len(keys) >= 20  # the tutorials, how-tos and every rule page's snippet
    cache = exec_blocks.exec_cache_dir()
    missing = sorted(key for key in keys if not (cache / f"{key}.json").is_file())
    assert missing == [], f"{len(missing)} of {len(keys)} blocks not in {cache}"
