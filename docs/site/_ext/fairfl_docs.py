"""fairfl's Sphinx extension: pages generated from the code, and executed examples.

At ``builder-inited`` (before Sphinx reads any page) it writes, under ``_generated/``:

- ``rules/<name>.md``: one page per rule of :data:`fairfl.strategies.registry.STRATEGIES`
  (its objective and update typeset, paper and equation numbers, what clients report,
  run-config keys with defaults, a snippet the build runs, links to its results), and
  ``rules-table.md``, the table of every rule;
- ``results/*.md``: the committed results of ``docs/results/``, each with its command;
- ``cli.md``: the ``fairfl`` command line, from :func:`fairfl.cli.build_parser`;
- ``rules-guide.md``: the rules grouped by the fairness they aim at (:mod:`rule_guide`);
- ``bibliography.md``: every paper cited, by author and year (:mod:`bibliography`,
  whose ``{cite}`` role links to it).

The ``fairfl-exec`` directive (:mod:`exec_blocks`) runs blocks when the docs build and
caches their output.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

from bibliography import bibliography_page, cite_markdown, cite_role, references_in
from check_links import broken_links
from exec_blocks import ExecDirective
from generate_results import write_results_pages
from rule_guide import guide_entry, guide_page
from rule_math import RULE_MATH
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util import logging as sphinx_logging

SITE = Path(__file__).resolve().parents[1]
REPO = SITE.parents[1]
GENERATED = SITE / "_generated"
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
    hidden = (
        "every other reported metric in the clear (`num-examples`, evaluation losses and "
        "accuracies): the train metric its weights read enters only secure sums"
        if form.kind == "two-rounds"
        else "every reported metric in the clear (losses, `num-examples`, group counts, "
        "evaluation losses and accuracies)"
    )
    return (
        f"{key} runs it ({form.kind}, the client masks its "
        f"`{form.weight}` weight and update): {form.reason}. The server still sees "
        f"{hidden}; {page} gives the threat model."
    )


def parameter_specs(strategy: type) -> dict[str, Any]:
    """The :class:`~fairfl.strategies.core.params.Spec` of each run-config key of the rule."""
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
    cited = ", ".join(cite_markdown(reference.key) for reference in references_in(paper))
    if not cited:
        raise ExtensionError(
            f"rule {name!r}: its paper ({paper!r}) names no reference of "
            "docs/site/_ext/bibliography.py; add the paper there"
        )
    defaults = spec.defaults()
    specs = parameter_specs(strategy)
    lines = [
        f"(rule-{name})=",
        f"# `{name}`: {qualname}",
        "",
        f"**Paper and equations**: {paper} ({cited}).  ",
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
    if links:  # the site's table also says what fairness each rule aims at
        lines = [lines[0] + " aims at |", lines[1] + "---|"]
    for name in names:
        spec = specs[name]
        strategy = spec.strategy
        paper = RULE_MATH[strategy.__qualname__][0].split(";")[0].split(" (")[0]
        if links:  # author–year, linked to the bibliography
            paper = ", ".join(cite_markdown(r.key) for r in references_in(paper)) or paper
        needs = ["weights"]
        if strategy.needs_loss:
            needs.append("F_k(w^t)")
        needs += [f"`{key}`" for key in strategy.required_train_metrics]
        listed = [f"`{key}`" for key in spec.parameters]
        if len(listed) > 4:  # the rule's page lists them all
            listed = [*listed[:3], f"and {len(listed) - 3} more"]
        keys = ", ".join(listed) or "–"
        shown = f"[`{name}`](rule-{name})" if links else f"`{name}`"
        row = f"| {shown} | `{strategy.__qualname__}` | {paper} | {', '.join(needs)} | {keys} |"
        if links:
            row += f" [{guide_entry(name, strategy)[0]}](rules-guide) |"
        lines.append(row)
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
    write_if_changed(GENERATED / "rules-guide.md", "(rules-guide)=\n" + guide_page(specs))
    write_if_changed(GENERATED / "cli.md", cli_page())
    write_if_changed(GENERATED / "bibliography.md", bibliography_page())


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
    app.add_role("cite", cite_role)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    # ``--readme``: rewrite the README's rule table from the registry.
    if sys.argv[1:] != ["--readme"]:
        raise SystemExit("usage: python docs/site/_ext/fairfl_docs.py --readme")
    text = README.read_text(encoding="utf-8")
    README.write_text(text.replace(readme_block(text), readme_rules_block()), encoding="utf-8")
