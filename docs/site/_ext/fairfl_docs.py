"""fairfl's Sphinx extension: pages generated from the code, and executed examples.

At ``builder-inited`` (before Sphinx reads any page) it writes, under ``_generated/``:

- ``rules/<name>.md``: one page per rule of :data:`fairfl.strategies.registry.STRATEGIES`
  (its objective and update typeset, paper and equation numbers, what clients report,
  run-config keys with defaults, a snippet the build runs, links to its results), and
  ``rules-table.md``, the table of every rule;
- ``results/*.md``: the committed results of ``docs/results/``, each with its command;
- ``cli.md``: the ``fairfl`` command line, from :func:`fairfl.cli.build_parser`.

The ``fairfl-exec`` directive runs a Python block when the docs build (in a fresh
interpreter, from the repository root) and shows the code and what it printed; a block
that fails or prints to stderr with a non-zero exit stops the build. With ``:session:``
the page's session blocks (Python, or bash with ``:language: bash``) run as one program
at the block marked ``:end-session:``, each block's output shown under it; a session
that leaves a process running stops the build (the processes are killed first).

A block's output is kept in a cache outside the checkout (``$FAIRFL_DOCS_CACHE``, default
``~/.cache/fairfl-docs``), under a key made of the program it runs and of everything
else it can print differently for (:func:`exec_inputs_digest`): a build with none of
them changed runs no block again, also from a fresh clone. Only blocks that succeeded
are kept. To run every block again, point ``FAIRFL_DOCS_CACHE`` at an empty folder.
"""

from __future__ import annotations

import argparse
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

from check_links import broken_links
from docutils import nodes
from docutils.parsers.rst import Directive, directives
from generate_results import write_results_pages
from rule_math import RULE_MATH
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util import logging as sphinx_logging

SITE = Path(__file__).resolve().parents[1]
REPO = SITE.parents[1]
GENERATED = SITE / "_generated"
#: Printed between a ``:continue:`` block's earlier blocks and its own code.
MARK = "--- fairfl-exec: output of this block ---"
#: Module of a rule's class -> its page of notes (fairfl's choices, reproductions).
NOTES = {
    "qffl": "qffl-vred-semivred",
    "qfedsgd": "qffl-vred-semivred",
    "vred": "qffl-vred-semivred",
    "semivred": "qffl-vred-semivred",
    "afl": "baselines",
    "term": "baselines",
    "gifair": "baselines",
    "deltafl": "baselines",
    "propfair": "baselines",
    "fedmgda": "fedmgda",
    "equitable": "equitable",
    "rcfl": "rcfl",
}
#: What an executed block runs besides its own text (the package, the scripts and
#: example apps it calls, the project file): a change to any file under these re-runs
#: every block. A block that reads another file of the repository must add it here.
EXEC_INPUTS = ("fairfl", "scripts", "deploy", "examples", "pyproject.toml")
#: Environment variables that change what a block prints (the Gram kernel's path).
EXEC_ENVIRONMENT = ("FAIRFL_GRAM_KERNEL", "OPENBLAS_CORETYPE")


def write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` unless the file already holds it (Sphinx then keeps its cache)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def md_cell(value: object) -> str:
    """A value as inline code in a Markdown table cell."""
    return "`" + repr(value).replace("|", "\\|") + "`"


def client_reports(strategy: type) -> list[str]:
    """What a client must send for ``strategy``, in words, from its declarations."""
    reports = ["its local model (weights)"]
    if getattr(strategy, "needs_loss", False):
        reports.append(
            "F_k(w^t), the loss of the received model before training "
            "(`loss-before-training`, sent by `fairfl.client.fair_train`)"
        )
    for key in getattr(strategy, "required_train_metrics", ()):
        reports.append(f"the metric `{key}`")
    return reports


def secure_aggregation(strategy: type) -> str:
    """What ``secure-aggregation = "secagg+"`` does with ``strategy``: its declared form."""
    from fairfl.strategies.secure import secure_form_of

    form = secure_form_of(strategy)
    page, key = "{doc}`/howto/aggregate-securely`", '`secure-aggregation = "secagg+"`'
    if form is None:
        return f"{key} refuses it at start: it declares no form ({page})."
    if not form.supported:
        return f"{key} refuses it at start ({form.kind}): {form.reason}."
    return (
        f"{key} runs it ({form.kind}, the client masks its "
        f"`{form.weight}` weight and update): {form.reason}. The server still sees every "
        "reported metric in the clear (losses, `num-examples`, group counts, evaluation "
        f"losses and accuracies); {page} gives the threat model."
    )


def parameter_specs(strategy: type) -> dict[str, Any]:
    """The :class:`~fairfl.strategies.params.Spec` of each run-config key of the rule."""
    from dataclasses import fields

    parameters = getattr(strategy, "Parameters", None)
    try:
        declared = fields(parameters)  # type: ignore[arg-type]
    except TypeError:
        return {}
    specs: dict[str, Any] = {}
    for field in declared:
        spec = next((v for v in field.metadata.values() if hasattr(v, "grid")), None)
        if spec is not None and getattr(spec, "key", None):
            specs[spec.key] = spec
    return specs


def grid_cell(spec: Any) -> str:
    """A run-config key's "paper's grid" cell: the values, or why there are none."""
    if spec is not None and spec.grid:
        return ", ".join(str(v) for v in spec.grid)
    if spec is not None and spec.kind in ("real", "integer"):
        return "the paper gives no grid"
    return "– (an option, not a tuned value)"


def results_mentioning(name: str, strategy: type, pages: dict[str, str]) -> list[str]:
    """The generated results pages whose text names the rule (registry or class name)."""
    pattern = re.compile(rf"(?<![\w-])(`?{re.escape(name)}`?|{strategy.__name__})(?![\w-])")
    return [page for page, text in sorted(pages.items()) if pattern.search(text)]


def snippet(name: str, defaults: dict[str, Any]) -> str:
    """Python that builds the rule from a run config (the build runs it)."""
    config = {key: value for key, value in defaults.items() if value is not None}
    shown = dict(list(config.items())[:2])
    return (
        "from fairfl.strategies import build_strategy\n\n"
        f"strategy = build_strategy({name!r}, {shown!r}, min_available_nodes=2)\n"
        "print(type(strategy).__name__, strategy.settings())\n"
    )


def rule_page(name: str, spec: Any, results: dict[str, str]) -> str:
    """The Markdown page of one registered rule."""
    strategy = spec.strategy
    qualname = strategy.__qualname__
    if qualname not in RULE_MATH:
        raise ExtensionError(
            f"rule {name!r} ({strategy.__module__}.{qualname}) has no equations in "
            "docs/site/_ext/rule_math.py; add its objective and update there"
        )
    paper, equations = RULE_MATH[qualname]
    defaults = spec.defaults()
    specs = parameter_specs(strategy)
    lines = [
        f"(rule-{name})=",
        f"# `{name}`: {qualname}",
        "",
        f"**Paper and equations**: {paper}.  ",
        f"**Class**: {{py:class}}`{strategy.__module__}.{qualname}` "
        f'(`strategy = "{name}"` in the run config).',
        "",
        "## Objective and update",
        "",
    ]
    for equation in equations:
        lines += ["$$", equation, "$$", ""]
    lines += ["## What clients must report", ""]
    lines += [f"- {item}" for item in client_reports(strategy)]
    lines += ["", "## Under secure aggregation", "", secure_aggregation(strategy)]
    lines += ["", "## Run-config keys", ""]
    if spec.parameters:
        lines += [
            "| run-config key | keyword | default | paper's grid |",
            "|---|---|---|---|",
        ]
        for key, keyword in spec.parameters.items():
            default = md_cell(defaults[key]) if key in defaults else "required"
            lines.append(f"| `{key}` | `{keyword}` | {default} | {grid_cell(specs.get(key))} |")
        lines += [
            "",
            "Every rule also reads `sampling` (`uniform` or `size-proportional`).",
        ]
    else:
        lines += ["None besides `sampling` (`uniform` or `size-proportional`)."]
    code = snippet(name, defaults)
    lines += [
        "",
        "## Use it",
        "",
        "In Python (the docs build runs this):",
        "",
        "```{fairfl-exec}",
        code.rstrip("\n"),
        "```",
        "",
        "In a simulation (the repository's Flower app):",
        "",
        "```bash",
        f"bash scripts/simulate.sh \"strategy='{name}' num-server-rounds=3\"",
        "```",
        "",
        "## Committed results",
        "",
    ]
    if name == "ditto":
        lines[-2:-2] = [
            'With another global rule: `strategy = "ditto+<rule>"` for any rule '
            "({py:func}`~fairfl.strategies.ditto.with_ditto`), built here with q-FFL:",
            "",
            "```{fairfl-exec}",
            "from fairfl.strategies import build_strategy",
            "",
            "strategy = build_strategy('ditto+qffl', {'qffl-q': 1.0, 'ditto-lambda': 0.1})",
            "print(strategy.rule_name, strategy.train_config(1))",
            "```",
            "",
        ]
    notes = NOTES.get(strategy.__module__.rsplit(".", 1)[-1])
    if notes is not None:
        lines[-2:-2] = [
            f"fairfl's choices where the paper is ambiguous, and the reproductions: "
            f"{{doc}}`/rules/notes/{notes}`.",
            "",
        ]
    mentioned = results_mentioning(name, strategy, results)
    if mentioned:
        lines += [f"- {{doc}}`/_generated/results/{page}`" for page in mentioned]
    else:
        lines += ["No committed run of this rule yet."]
    lines += [
        "",
        "## Reference",
        "",
        "```{eval-rst}",
        f".. automodule:: {strategy.__module__}",
        "   :no-index:",
        "   :no-members:",
        "",
        f".. autoclass:: {strategy.__module__}.{qualname}",
        "   :no-index:",
        "   :no-members:",
        "```",
        "",
    ]
    return "\n".join(lines)


def rules_table(names: list[str], specs: dict[str, Any], *, links: bool = True) -> str:
    """The table of every rule: what it needs from clients and its run-config keys.

    ``links``: each name links to its rule page (the site); the README's copy has none.
    """
    lines = [
        "| `strategy =` | class | paper | clients report | run-config keys |",
        "|---|---|---|---|---|",
    ]
    for name in names:
        spec = specs[name]
        strategy = spec.strategy
        paper = RULE_MATH[strategy.__qualname__][0].split(";")[0].split(" (")[0]
        needs = ["weights"]
        if strategy.needs_loss:
            needs.append("F_k(w^t)")
        needs += [f"`{key}`" for key in strategy.required_train_metrics]
        listed = [f"`{key}`" for key in spec.parameters]
        if len(listed) > 4:  # the rule's page lists them all
            listed = [*listed[:3], f"and {len(listed) - 3} more"]
        keys = ", ".join(listed) or "–"
        shown = f"[`{name}`](rule-{name})" if links else f"`{name}`"
        lines.append(
            f"| {shown} | `{strategy.__qualname__}` | {paper} | {', '.join(needs)} | {keys} |"
        )
    return "\n".join(lines) + "\n"


def cli_page() -> str:
    """The ``fairfl`` command line: every subcommand's ``--help``."""
    from fairfl.cli import build_parser

    parser = build_parser()
    lines = [
        "# Command line: `fairfl`",
        "",
        "Generated from `fairfl.cli.build_parser` when the docs build.",
        "",
        "```text",
        parser.format_help().rstrip(),
        "```",
        "",
    ]
    for action in parser._actions:  # argparse keeps subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            for command, subparser in action.choices.items():
                lines += [
                    f"## `fairfl {command}`",
                    "",
                    "```text",
                    subparser.format_help().rstrip(),
                    "```",
                    "",
                ]
    return "\n".join(lines)


def builtin_specs() -> dict[str, Any]:
    """The registry's built-in rules (fairfl's own), in its order.

    Rules other installed distributions declare (the ``fairfl.rules`` entry points) are
    theirs to document.
    """
    from fairfl.strategies.registry import STRATEGIES

    return {
        name: STRATEGIES[name]
        for name in STRATEGIES
        if getattr(STRATEGIES[name], "source", "fairfl") == "fairfl"
    }


def generate(app: Sphinx) -> None:
    """Write every generated page (``builder-inited``)."""
    os.environ.setdefault("COLUMNS", "88")  # argparse's help width
    results = write_results_pages(GENERATED / "results")
    specs = builtin_specs()
    names = list(specs)
    rules_dir = GENERATED / "rules"
    for stale in rules_dir.glob("*.md") if rules_dir.exists() else ():
        if stale.stem not in specs:
            stale.unlink()
    for name in names:
        write_if_changed(rules_dir / f"{name}.md", rule_page(name, specs[name], results))
    write_if_changed(GENERATED / "rules-table.md", rules_table(names, specs))
    write_if_changed(GENERATED / "cli.md", cli_page())


README = REPO / "README.md"
README_BEGIN = (
    "<!-- rules:begin (generated by docs/site/_ext/fairfl_docs.py --readme; do not edit) -->"
)
README_END = "<!-- rules:end -->"


def readme_rules_block() -> str:
    """The README's rule table, markers included, from the registry."""
    specs = builtin_specs()
    table = rules_table(list(specs), specs, links=False)
    return f"{README_BEGIN}\n{table}{README_END}"


def readme_block(text: str) -> str:
    """The README's current rule table block (markers included)."""
    start, end = text.index(README_BEGIN), text.index(README_END) + len(README_END)
    return text[start:end]


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
        if ran is None:
            start = time.monotonic()
            try:
                done = subprocess.run(
                    [sys.executable, "-c", program],
                    cwd=REPO,
                    env=exec_environment(),
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
            exec_cache_store(key, ran)
        seconds = ran["seconds"]
        shown: list[nodes.Node] = []
        if "hide-code" not in self.options:
            block = nodes.literal_block(code, code, language="python")
            shown.append(block)
        stdout = ran["stdout"].split(MARK + "\n", 1)[-1]
        output = stdout.rstrip("\n") or "(no output)"
        out = nodes.literal_block(output, output, language="text")
        out["classes"].append("fairfl-exec-output")
        caption = nodes.paragraph(text=f"Output (ran when these docs were built, {seconds:.1f} s):")
        shown += [caption, out]
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
            text = parts[index].split("\n", 1)[1].rstrip("\n") or "(no output)"
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


#: Debian's libjs-mathjax (conf.py points ``mathjax_path`` at it when it is installed).
LOCAL_MATHJAX = Path("/usr/share/javascript/mathjax")
#: What MathJax 2.7's TeX input and CommonHTML output load (of Debian's 54 MB).
MATHJAX_PARTS = (
    "MathJax.js",
    "config/TeX-AMS_CHTML.js",
    "extensions",
    "jax/input/TeX",
    "jax/output/CommonHTML",
    "jax/element",
    "fonts/HTML-CSS/TeX/woff",
)


def copy_mathjax(app: Sphinx, exception: Exception | None) -> None:
    """Copy the local MathJax the configuration points at into ``_static/mathjax``."""
    import shutil

    if exception is not None or not str(app.config.mathjax_path).startswith("mathjax/"):
        return
    source = LOCAL_MATHJAX
    target = Path(app.outdir) / "_static" / "mathjax"
    for part in MATHJAX_PARTS:
        if (source / part).is_dir():
            shutil.copytree(source / part, target / part, dirs_exist_ok=True)
        else:
            (target / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / part, target / part)


#: The API reference's autosummary stubs: path -> (text, access and modification times)
#: before this build, while autosummary writes them again (:func:`set_aside_api_stubs`).
_API_STUBS: dict[Path, tuple[str, int, int]] = {}


def set_aside_api_stubs(app: Sphinx) -> None:
    """Delete the API reference's stubs before autosummary writes them (``builder-inited``).

    A stub of a module that is gone or private now would not be written again, and
    Sphinx would warn about it. Their text and times are kept for
    :func:`keep_unchanged_api_stubs`.
    """
    _API_STUBS.clear()
    for stub in (GENERATED / "api").glob("*.rst"):
        times = stub.stat()
        _API_STUBS[stub] = (stub.read_text(encoding="utf-8"), times.st_atime_ns, times.st_mtime_ns)
        stub.unlink()


def keep_unchanged_api_stubs(app: Sphinx) -> None:
    """Give a stub autosummary wrote with the same text its old times back.

    Sphinx reads a page again when its file is newer than its last reading: a stub
    written anew, unchanged, would send every API page through autodoc again.
    """
    for stub, (text, accessed, modified) in _API_STUBS.items():
        if stub.is_file() and stub.read_text(encoding="utf-8") == text:
            os.utime(stub, ns=(accessed, modified))
    _API_STUBS.clear()


def check_internal_links(app: Sphinx, exception: Exception | None) -> None:
    """Warn (an error under ``-W``) for each internal link of the built HTML that leads nowhere.

    Run after :func:`copy_mathjax`, so the copied MathJax counts as part of the site.
    """
    if exception is not None or app.builder.format != "html":
        return
    logger = sphinx_logging.getLogger(__name__)
    for broken in broken_links(Path(app.outdir)):
        logger.warning("broken internal link: %s", broken)


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the generator, the directive, the MathJax copy and the link check."""
    # Around autosummary's stub writing (its builder-inited handler, priority 500).
    app.connect("builder-inited", set_aside_api_stubs, priority=100)
    app.connect("builder-inited", keep_unchanged_api_stubs, priority=900)
    app.connect("builder-inited", generate)
    app.connect("build-finished", copy_mathjax)
    app.connect("build-finished", check_internal_links, priority=900)
    app.add_directive("fairfl-exec", ExecDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    # ``--readme``: rewrite the README's rule table from the registry.
    if sys.argv[1:] != ["--readme"]:
        raise SystemExit("usage: python docs/site/_ext/fairfl_docs.py --readme")
    text = README.read_text(encoding="utf-8")
    README.write_text(text.replace(readme_block(text), readme_rules_block()), encoding="utf-8")
