"""The ``fairfl-exec`` directive: blocks the docs build runs, and their cache.

The directive runs a Python block when the docs build (in a fresh interpreter, from the
repository root) and shows the code and what it printed; a block that fails or prints to
stderr with a non-zero exit stops the build. With ``:session:`` the page's session
blocks (Python, or bash with ``:language: bash``) run as one program at the block marked
``:end-session:``, each block's output shown under it; a session that leaves a process
running stops the build (the processes are killed first). With ``:figure: ALT`` a Python
block saves a figure at ``$FAIRFL_DOCS_FIGURE`` (a PNG), shown under its output.
Terminal colour codes are dropped from the shown output.

A block's output is kept in a cache outside the checkout (``$FAIRFL_DOCS_CACHE``, default
``~/.cache/fairfl-docs``), under a key made of the program it runs and of everything
else it can print differently for (:func:`exec_inputs_digest`): a build with none of
them changed runs no block again, also from a fresh clone. Only blocks that succeeded
are kept (with the figure a block saved). Each shown output carries its key as the class
``fairfl-exec-key-<key>``, so the tests can check that every block of a build is in the
cache. To run every block again, point ``FAIRFL_DOCS_CACHE`` at an empty folder.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import Directive, directives

REPO = Path(__file__).resolve().parents[3]
#: Printed between a ``:continue:`` block's earlier blocks and its own code.
MARK = "--- fairfl-exec: output of this block ---"
#: What an executed block runs besides its own text (the package, the scripts and
#: example apps it calls, the project file): a change to any file under these re-runs
#: every block. A block that reads another file of the repository must add it here.
EXEC_INPUTS = ("fairfl", "scripts", "deploy", "examples", "pyproject.toml")
#: Environment variables that change what a block prints (the Gram kernel's path).
EXEC_ENVIRONMENT = ("FAIRFL_GRAM_KERNEL", "OPENBLAS_CORETYPE")
#: Terminal colour codes (Flower's log lines): dropped from the shown output.
ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


class ExecDirective(Directive):
    """``fairfl-exec``: run a Python block at build time; show it and its output."""

    has_content = True
    option_spec: ClassVar[dict[str, Any]] = {
        "timeout": directives.positive_int,
        "hide-code": directives.flag,
        "continue": directives.flag,
        "session": directives.flag,
        "end-session": directives.flag,
        "language": lambda value: directives.choice(value, ("python", "bash")),
        "figure": directives.unchanged_required,
    }

    def run(self) -> list[nodes.Node]:
        """Run the block; return its code and output as literal blocks."""
        code = "\n".join(self.content) + "\n"
        if "session" in self.options or "end-session" in self.options:
            return self.run_session(code)
        # ``:continue:`` runs the page's earlier blocks first (their output hidden), so a
        # tutorial can define its app in steps and run it in the last one.
        env = self.state.document.settings.env  # temp_data: cleared after each page
        earlier: list[str] = env.temp_data.setdefault("fairfl_exec_blocks", [])
        program = code
        if "continue" in self.options:
            program = "".join(earlier) + f"print({MARK!r})\n" + code
        earlier.append(code)
        key = exec_cache_key("python", program)
        ran = exec_cache_load(key)
        figure = Path(env.srcdir) / "_generated" / "figures" / f"{key[:24]}.png"
        if ran is None:
            start = time.monotonic()
            environment = exec_environment()
            if "figure" in self.options:
                figure.parent.mkdir(parents=True, exist_ok=True)
                figure.unlink(missing_ok=True)
                environment["FAIRFL_DOCS_FIGURE"] = str(figure)
            try:
                done = subprocess.run(
                    [sys.executable, "-c", program],
                    cwd=REPO,
                    env=environment,
                    capture_output=True,
                    text=True,
                    timeout=self.options.get("timeout", 120),
                    check=False,
                )
            except subprocess.TimeoutExpired as error:
                raise self.error(f"fairfl-exec: the block ran past {error.timeout} s") from error
            if done.returncode != 0:
                raise self.error(
                    f"fairfl-exec: the block exited with {done.returncode}:\n{done.stderr[-3000:]}"
                )
            ran = {"stdout": done.stdout, "seconds": time.monotonic() - start}
            if "figure" in self.options:
                if not figure.is_file():
                    raise self.error("fairfl-exec: no figure saved at $FAIRFL_DOCS_FIGURE")
                ran["figure"] = base64.b64encode(figure.read_bytes()).decode("ascii")
            exec_cache_store(key, ran)
        seconds = ran["seconds"]
        shown: list[nodes.Node] = []
        if "hide-code" not in self.options:
            block = nodes.literal_block(code, code, language="python")
            shown.append(block)
        stdout = ran["stdout"].split(MARK + "\n", 1)[-1]
        output = ANSI_COLOUR.sub("", stdout).rstrip("\n") or "(no output)"
        out = nodes.literal_block(output, output, language="text")
        out["classes"] += ["fairfl-exec-output", f"fairfl-exec-key-{key}"]
        caption = nodes.paragraph(text=f"Output (ran when these docs were built, {seconds:.1f} s):")
        shown += [caption, out]
        if "figure" in self.options:
            data = base64.b64decode(ran.get("figure", ""))
            if not figure.is_file() or figure.read_bytes() != data:
                figure.parent.mkdir(parents=True, exist_ok=True)
                figure.write_bytes(data)
            uri = f"/_generated/figures/{figure.name}"
            image = nodes.image(uri=uri, alt=self.options["figure"])
            image["classes"].append("fairfl-exec-figure")
            shown += [nodes.paragraph(text="Figure (saved by the block):"), image]
        return shown

    def run_session(self, code: str) -> list[nodes.Node]:
        """A ``:session:`` block: shown now, run with the page's others at ``:end-session:``.

        The blocks run as one program (one interpreter, or one bash script) in a process
        group of their own, for the largest ``:timeout:`` of its blocks (default 120) in
        all; a marker printed
        before each block splits the output between them. After the program ends, a
        process still in its group (a server the page started and did not stop) fails
        the build, once killed. Its output comes from the cache when the same program
        succeeded with the same inputs before (:func:`exec_cache_key`).
        """
        env = self.state.document.settings.env
        session: list[tuple[str, nodes.paragraph, nodes.literal_block]] = env.temp_data.setdefault(
            "fairfl_exec_session", []
        )
        language = self.options.get("language", "python")
        caption = nodes.paragraph(text="Output (ran when these docs were built):")
        out = nodes.literal_block("", "", language="text")
        out["classes"].append("fairfl-exec-output")
        session.append((code, caption, out))
        # The session's time limit: the largest ``:timeout:`` of its blocks.
        timeout = max(
            env.temp_data.get("fairfl_exec_session_timeout", 0), self.options.get("timeout", 120)
        )
        env.temp_data["fairfl_exec_session_timeout"] = timeout
        shown: list[nodes.Node] = []
        if "hide-code" not in self.options:
            shown.append(nodes.literal_block(code, code, language=language))
        shown += [caption, out]
        if "end-session" not in self.options:
            return shown
        env.temp_data.pop("fairfl_exec_session")
        env.temp_data.pop("fairfl_exec_session_timeout")
        if language == "bash":
            marks = [f'echo "{MARK} $(date +%s.%N)"\n' for _ in session]
            command = ["bash", "-c"]
        else:
            marks = [f"import time; print({MARK!r}, time.time(), flush=True)\n" for _ in session]
            command = [sys.executable, "-c"]
        program = "".join(mark + block for mark, (block, _, _) in zip(marks, session, strict=True))
        key = exec_cache_key(language, program)
        ran = exec_cache_load(key)
        if ran is None:
            ran = {"stdout": self.run_program(command, program, timeout), "ended": time.time()}
            exec_cache_store(key, ran)
        stdout = ran["stdout"]
        parts = stdout.split(MARK + " ")[1:]
        times = [float(part.split("\n", 1)[0]) for part in parts] + [ran["ended"]]
        for index, (_, caption_node, out_node) in enumerate(session):
            out_node["classes"].append(f"fairfl-exec-key-{key}")
            text = ANSI_COLOUR.sub("", parts[index].split("\n", 1)[1]).rstrip("\n") or "(no output)"
            seconds = times[index + 1] - times[index]
            out_node.clear()
            out_node += nodes.Text(text)
            out_node.rawsource = text
            caption_node.clear()
            caption_node += nodes.Text(f"Output (ran when these docs were built, {seconds:.1f} s):")
        return shown

    def run_program(self, command: list[str], program: str, timeout: float) -> str:
        """Run a session's program in a process group of its own; return its stdout.

        Fails the build if it exits non-zero, runs past ``timeout`` seconds, or leaves a
        process of its group running (killed first). A SIGTERM to the build meanwhile
        (``scripts/test.sh`` stopping it) stops the group before the build exits: the
        group is not the build's, so the signal reaches only the build.
        """
        with sigterm_exits():
            popen = subprocess.Popen(
                [*command, program],
                cwd=REPO,
                env=exec_environment(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            try:
                stdout, stderr = popen.communicate(timeout=timeout)
            except subprocess.TimeoutExpired as error:
                os.killpg(popen.pid, signal.SIGKILL)
                popen.communicate()
                raise self.error(f"fairfl-exec: the session ran past {error.timeout} s") from error
            finally:
                leftovers = stop_process_group(popen.pid)
        if popen.returncode != 0:
            raise self.error(
                f"fairfl-exec: the session exited with {popen.returncode}:\n"
                f"{stdout[-2000:]}\n{stderr[-3000:]}"
            )
        if leftovers:
            raise self.error(f"fairfl-exec: the session left processes running: {leftovers}")
        return stdout


@contextlib.contextmanager
def sigterm_exits() -> Iterator[None]:
    """Inside the block, SIGTERM raises ``SystemExit(143)``, so ``finally`` blocks run.

    Python's default for SIGTERM ends the process at once. The previous handler is
    restored on exit from the block.
    """

    def exit_now(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, exit_now)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def exec_environment() -> dict[str, str]:
    """The environment executed blocks run in (Flower quiet, runs reproducible).

    The build's interpreter's folder comes first on ``PATH``, so that a bash block's
    ``python``, ``fairfl`` and ``flwr`` are the ones the docs build with.
    """
    variables = dict(os.environ)
    variables.update(
        PATH=os.pathsep.join([str(Path(sys.executable).parent), variables.get("PATH", "")]),
        FLWR_TELEMETRY_ENABLED="0",
        FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
        PYTHONHASHSEED="0",
        OMP_NUM_THREADS="1",
        MPLBACKEND="Agg",
    )
    return variables


def exec_cache_dir() -> Path:
    """Where executed blocks' outputs are kept: ``$FAIRFL_DOCS_CACHE``, else ``~/.cache``'s."""
    return Path(os.environ.get("FAIRFL_DOCS_CACHE") or Path.home() / ".cache" / "fairfl-docs")


@functools.cache
def exec_inputs_digest() -> str:
    """A hash of what an executed block can print differently for, besides its program.

    Every file under :data:`EXEC_INPUTS` (path and content; bytecode caches left out),
    every installed distribution's name and version (fairfl, flwr, torch, ...), the
    Python version, the machine type and :data:`EXEC_ENVIRONMENT`. Computed once per
    build: files edited while the docs build count from the next build on.
    """
    digest = hashlib.sha256()
    for name in EXEC_INPUTS:
        top = REPO / name
        files = sorted(top.rglob("*")) if top.is_dir() else [top]
        for path in files:
            if not path.is_file() or "__pycache__" in path.parts or path.suffix == ".pyc":
                continue
            content = hashlib.sha256(path.read_bytes()).hexdigest()
            digest.update(f"{path.relative_to(REPO).as_posix()} {content}\n".encode())
    versions = sorted(
        f"{dist.metadata['Name']}=={dist.version}" for dist in importlib.metadata.distributions()
    )
    settings = [f"{name}={os.environ.get(name, '')}" for name in EXEC_ENVIRONMENT]
    context = [*versions, sys.version, platform.machine(), *settings]
    digest.update("\n".join(context).encode())
    return digest.hexdigest()


def exec_cache_key(language: str, program: str) -> str:
    """The cache key of a program a ``fairfl-exec`` block runs (with its earlier blocks)."""
    text = f"{exec_inputs_digest()}\n{language}\n{program}"
    return hashlib.sha256(text.encode()).hexdigest()


def exec_cache_load(key: str) -> dict[str, Any] | None:
    """What the program of ``key`` printed when it last succeeded, or ``None``."""
    try:
        return dict(json.loads((exec_cache_dir() / f"{key}.json").read_text(encoding="utf-8")))
    except (OSError, ValueError):  # never run with these inputs, or a damaged entry
        return None


def exec_cache_store(key: str, ran: dict[str, Any]) -> None:
    """Keep what a program printed under ``key`` (written whole or not at all)."""
    folder = exec_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f"{key}.{os.getpid()}.part"
    partial.write_text(json.dumps(ran), encoding="utf-8")
    partial.replace(folder / f"{key}.json")


def stop_process_group(pgid: int, grace: float = 10.0) -> list[str]:
    """Kill what is left of process group ``pgid``; return what was left (``pid name``).

    A process the session stopped itself may take a moment to exit: it is given
    ``grace`` seconds before it counts as left running.
    """
    deadline = time.monotonic() + grace
    while True:
        members = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)
            except OSError:  # gone meanwhile
                continue
            state, _, group = fields[1].split()[:3]
            if int(group) == pgid and state != "Z":
                members.append(f"{stat.parent.name} {fields[0].split('(', 1)[1]}")
        if not members or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if members:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    return members
