"""Every code block of the docs site's pages is executed or checked (issue 38 item 3).

``{fairfl-exec}`` blocks run when the docs build (a failure stops it); the ```python
blocks of ``howto/plug-a-rule-into-flower.md`` run in ``tests/readme/test_readme_snippets.py``.
Every other block is checked here, from the Markdown sources (no build needed):

- ```python: compiles (each part between ``...`` lines, de-indented);
- ```toml: parses;
- ```bash / ```console: each ``fairfl …`` command parses with fairfl's own argument
  parser (its subcommand and options exist) and its ``-c`` keys are run-config keys;
  each script it runs (``bash scripts/x.sh``, ``deploy/scripts/x.sh``) and each file of
  the repository it names (``tests/…``, ``deploy/…``) exists;
- ```diff: each run of ``+`` lines compiles as Python, de-indented;
- ```text and bare blocks are output or diagrams, not code.
"""

from __future__ import annotations

import ast
import re
import shlex
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "docs" / "site"
PAGES = sorted(
    p for p in SITE.rglob("*.md") if "_generated" not in p.parts and p.name != "README.md"
)
FENCE = re.compile(r"^(```+)([^\n]*)\n(.*?)^\1\s*$", flags=re.MULTILINE | re.DOTALL)
#: Blocks a test elsewhere runs: page -> the test.
RUN_ELSEWHERE = {"howto/plug-a-rule-into-flower.md": "tests/readme/test_readme_snippets.py"}
#: Directives whose content is not code.
NOT_CODE = {"{toctree}", "{include}", "{eval-rst}"}
#: Repository paths a shell line may name (checked to exist).
REPO_PATH = re.compile(
    r"(?<![\w./-])((?:scripts|deploy|tests|examples|benchmarks|experiments)/[\w./-]+)"
)


def compile_fragments(fragments: list[str]) -> None:
    """Each fragment (a snippet's lines between ``...``, a diff's added lines) compiles."""
    for fragment in fragments:
        if fragment.strip():
            ast.parse(textwrap.dedent(fragment))


def blocks(page: Path) -> list[tuple[str, str]]:
    """The page's fenced blocks: (info string, content)."""
    return [(m.group(2).strip(), m.group(3)) for m in FENCE.finditer(page.read_text("utf-8"))]


def shell_commands(text: str, console: bool) -> list[str]:
    """The block's commands: continuation lines joined, comments and prompts removed."""
    lines = []
    for line in text.replace("\\\n", " ").splitlines():
        if console:
            if not line.startswith("$ "):
                continue  # output
            line = line[2:]
        lines.append(line.split(" #", 1)[0].strip())
    return [line for line in lines if line and not line.startswith("#")]


def run_config_keys() -> set[str]:
    """Every key ``-c`` accepts: the app's run config and every rule's keys."""
    from fairfl.strategies.registry import STRATEGIES

    config = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    keys = set(config["tool"]["flwr"]["app"]["config"])
    for spec in STRATEGIES.values():
        keys |= set(spec.parameters)
    return keys


def check_fairfl_command(words: list[str], keys: set[str]) -> None:
    """``fairfl …``: the parser accepts it and its ``-c`` keys exist."""
    from fairfl.cli import build_parser

    try:
        args = build_parser().parse_args(words[1:])
    except SystemExit as error:
        raise AssertionError(f"fairfl refuses {shlex.join(words)!r}") from error
    for item in getattr(args, "overrides", None) or []:
        for pair in item if isinstance(item, list) else [item]:
            key = pair.split("=", 1)[0]
            assert key in keys, f"{shlex.join(words)!r}: unknown run-config key {key!r}"


def check_shell(text: str, console: bool, keys: set[str]) -> int:
    """Check a bash/console block; return how many commands were checked."""
    checked = 0
    for command in shell_commands(text, console):
        for path in REPO_PATH.findall(command):
            path = path.rstrip(".")
            if "*" not in path and "<" not in path:
                assert (ROOT / path).exists(), f"{command!r}: {path} does not exist"
        for part in re.split(r"\s*(?:&&|\|\||;|\|)\s*", command):
            try:
                words = shlex.split(part)
            except ValueError as error:
                raise AssertionError(f"{command!r} does not parse as a shell line") from error
            if words and words[0] == "fairfl":
                check_fairfl_command(words, keys)
            checked += 1
    return checked


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(SITE)))
def test_every_code_block_is_executed_or_checked(page):
    keys = run_config_keys()
    name = str(page.relative_to(SITE))
    for info, text in blocks(page):
        language = info.split()[0] if info else ""
        where = f"{name}: a ```{info} block"
        if language == "{fairfl-exec}" or language in NOT_CODE:
            continue  # run by the docs build / not code
        if language == "python":
            compile_fragments(text.split("\n...\n"))  # RUN_ELSEWHERE's pages run there
        elif language == "toml":
            tomllib.loads(text)
        elif language in ("bash", "console"):
            assert check_shell(text, language == "console", keys), f"{where}: no command"
        elif language == "diff":
            added = "\n".join(
                line[1:] if line.startswith("+") else "" for line in text.splitlines()
            )
            compile_fragments(added.split("\n\n"))
        elif language in ("text", ""):
            continue  # output or a diagram, not code
        else:
            raise AssertionError(f"{where} is neither executed nor checked: add a check here")


def test_the_checker_refuses_an_unknown_subcommand_key_and_script():
    keys = run_config_keys()
    with pytest.raises(AssertionError, match="fairfl refuses"):
        check_shell("fairfl frobnicate\n", False, keys)
    with pytest.raises(AssertionError, match="unknown run-config key 'qfl-q'"):
        check_shell("fairfl run -c qfl-q=1\n", False, keys)
    with pytest.raises(AssertionError, match="does not exist"):
        check_shell("bash scripts/no-such-script.sh\n", False, keys)
    assert check_shell("fairfl run --strategy qffl -c qffl-q=1 --out x  # a comment\n", False, keys)


#: Pages whose bare or ```text blocks are diagrams, not a program's output: page -> what.
DIAGRAMS = {"explanation/layout.md": "the package's folders"}


def shown_outputs(name: str, text: str) -> list[str]:
    """Outputs a page shows that no build or test ran: one line per block, naming it.

    A program's output may only be shown by a ``{fairfl-exec}`` block (the build runs it
    and shows what it printed) or a page generated from ``docs/results`` files. So a
    ```console block holds ``$ `` commands only, a ```python block no ``>>>`` session, and
    a ```text or bare block is one of :data:`DIAGRAMS`.
    """
    found = []
    for match in FENCE.finditer(text):
        info, content = match.group(2).strip(), match.group(3)
        language = info.split()[0] if info else ""
        first = content.strip().splitlines()[0] if content.strip() else ""
        where = f"{name}: a ```{info} block ({first[:60]!r})"
        if language == "console":
            output = [line for line in content.splitlines() if line and not line.startswith("$ ")]
            if output:
                found.append(f"{where} shows output {output[0][:60]!r}")
        elif language in ("python", "pycon") and re.search(r"^>>> ", content, re.MULTILINE):
            found.append(f"{where} shows an interactive session")
        elif language in ("text", "") and name not in DIAGRAMS:
            found.append(f"{where} is text: a program's output must come from {{fairfl-exec}}")
    return found


@pytest.mark.parametrize(
    "page", [ROOT / "README.md", *PAGES], ids=lambda p: str(p.relative_to(ROOT))
)
def test_no_page_shows_an_output_that_no_build_ran(page):
    name = str(page.relative_to(SITE)) if SITE in page.parents else page.name
    assert shown_outputs(name, page.read_text("utf-8")) == []


def test_the_output_check_finds_a_hand_written_output():
    page = (
        "```console\n$ fairfl run --strategy qffl\nfinal client accuracy: mean 78.10 %\n```\n"
        "```text\nmean 78.10 %\n```\n"
        "```python\n>>> 1 + 1\n2\n```\n"
        "```console\n$ fairfl verify results/q\n```\n"
        "```{fairfl-exec}\nprint(1)\n```\n"
    )
    found = shown_outputs("howto/x.md", page)
    assert len(found) == 3, found
    assert "78.10" in found[0] and "is text" in found[1] and "interactive" in found[2]
    assert shown_outputs("explanation/layout.md", "```\nfairfl/   the package\n```\n") == []


def test_the_runs_elsewhere_are_still_run_there():
    for page, test in RUN_ELSEWHERE.items():
        assert page.split("/")[-1] in (ROOT / test).read_text("utf-8"), (page, test)
