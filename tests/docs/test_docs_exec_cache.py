"""The docs build's ``fairfl-exec`` cache (docs/site/_ext/fairfl_docs.py) on a small site.

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

import fairfl_docs  # noqa: E402

CONF = """
import sys
sys.path.insert(0, {ext!r})
from fairfl_docs import ExecDirective

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
    monkeypatch.setattr(fairfl_docs, "REPO", repo)
    monkeypatch.setattr(fairfl_docs, "EXEC_INPUTS", ("pkg",))
    monkeypatch.setenv("FAIRFL_DOCS_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "source"
    source.mkdir()
    (source / "conf.py").write_text(CONF.format(ext=str(ROOT / "docs" / "site" / "_ext")))
    runs = tmp_path / "runs.txt"
    builds = iter(range(100))

    def build(greeting: str = "hello") -> tuple[str, int]:
        """Build the site afresh; return its page's text and how often the block has run."""
        (source / "index.md").write_text(PAGE.format(runs=str(runs), greeting=greeting))
        fairfl_docs.exec_inputs_digest.cache_clear()  # each build is a process of its own
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
