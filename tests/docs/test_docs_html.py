"""The built docs site holds what the registry, the results and the docstrings say.

Read from the HTML ``bash scripts/docs.sh`` wrote (the ``built_site`` fixture): every
registered rule has a page with a typeset equation and each of its run-config keys;
the API reference documents the public names users call; the tutorials' code ran
during the build; every committed report has a results page.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from fairfl.strategies.registry import STRATEGIES

BUILTIN = [name for name, spec in STRATEGIES.items() if spec.source == "fairfl"]

ROOT = Path(__file__).resolve().parents[2]


def page_text(path: Path) -> str:
    """The page's HTML with tags removed and entities decoded (whitespace kept)."""
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text(encoding="utf-8")))


@pytest.mark.parametrize("name", BUILTIN)
def test_every_rule_has_a_page_with_an_equation_and_its_run_config_keys(built_site, name):
    page = built_site / "_generated" / "rules" / f"{name}.html"
    source = page.read_text(encoding="utf-8")
    # MyST's $$ blocks become MathJax display maths: \[ ... \] in a math div.
    assert re.search(r'<div class="math[^"]*">\s*\\\[', source), f"{name}: no typeset equation"
    assert "mathjax" in source.lower()
    text = page_text(page)
    for key in STRATEGIES[name].parameters:
        assert key in text, f"{name}: run-config key {key} missing"
    assert f"build_strategy('{name}'" in text
    # The snippet ran when the docs were built: its output names the rule's class.
    assert "Output (ran when these docs were built" in text
    assert f"{STRATEGIES[name].strategy.__name__} {{" in text


def test_the_rules_table_lists_every_rule_with_a_link_to_its_page(built_site):
    source = (built_site / "rules" / "index.html").read_text(encoding="utf-8")
    for name in BUILTIN:
        assert f'href="../_generated/rules/{name}.html' in source, name


@pytest.mark.parametrize(
    ("page", "anchor"),
    [
        ("fairfl.strategies.html", "fairfl.strategies.QFFL"),
        ("fairfl.client.html", "fairfl.client.fair_train"),
        ("fairfl.strategies.registry.html", "fairfl.strategies.registry.build_strategy"),
        ("fairfl.simulation.html", "fairfl.simulation.run_inprocess"),
        ("fairfl.contract.html", "fairfl.contract.TrainReply"),
        ("fairfl.metrics.html", "fairfl.metrics.jain_index"),
        ("fairfl.telemetry.wrapper.html", "fairfl.telemetry.wrapper.with_telemetry"),
    ],
)
def test_the_api_reference_documents_the_public_names(built_site, page, anchor):
    source = (built_site / "_generated" / "api" / page).read_text(encoding="utf-8")
    assert f'id="{anchor}"' in source, anchor


def test_the_cli_page_shows_every_subcommand(built_site):
    from fairfl.cli import build_parser

    text = page_text(built_site / "_generated" / "cli.html")
    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    for command in commands:
        assert f"fairfl {command}" in text, command


def test_the_tutorials_ran_during_the_build(built_site):
    compare = page_text(built_site / "tutorials" / "compare-two-rules.html")
    rows = re.findall(
        r"^(fedavg|qffl)\s+(\d+\.\d\d)\s+(\d+\.\d\d)\s+(\d+\.\d\d)\s+(\d\.\d{3})$",
        compare,
        flags=re.MULTILINE,
    )
    assert [row[0] for row in rows] == ["fedavg", "qffl"]
    for _, mean, worst, _, jain in rows:
        assert 0 <= float(worst) <= float(mean) <= 100 and 0 < float(jain) <= 1
    plug = page_text(built_site / "tutorials" / "plug-into-flower.html")
    assert len(re.findall(r"client \d+: test accuracy \d+\.\d %", plug)) == 2


def test_every_committed_report_has_a_results_page(built_site):
    results = ROOT / "docs" / "results"
    names = [p.stem for p in results.glob("*.md")]
    names += [p.name for p in results.iterdir() if (p / "report.md").exists()]
    assert names
    for name in [*names, "benchmarks"]:
        assert (built_site / "_generated" / "results" / f"{name}.html").exists(), name


def test_no_page_loads_a_script_from_a_cdn(built_site):
    # Equations render offline: MathJax is copied into the site (Debian's libjs-mathjax;
    # the strict build refuses to fall back to a CDN, docs/site/conf.py).
    remote = re.compile(r'<script[^>]+src="(?:https?:)?//[^"]+"')
    offenders = {
        page.relative_to(built_site).as_posix(): remote.findall(page.read_text(encoding="utf-8"))
        for page in built_site.rglob("*.html")
    }
    assert not {page: found for page, found in offenders.items() if found}


def test_the_tutorial_shows_the_figure_its_block_saved(built_site):
    page = (built_site / "tutorials" / "compare-two-rules.html").read_text(encoding="utf-8")
    images = re.findall(r'<img[^>]*class="[^"]*fairfl-exec-figure[^"]*"[^>]*>', page)
    assert len(images) == 1, images
    src = re.search(r'src="([^"]+)"', images[0]).group(1)
    figure = (built_site / "tutorials" / src).resolve()
    assert figure.read_bytes().startswith(b"\x89PNG") and figure.stat().st_size > 10_000


class _MathOutside(HTMLParser):
    """Collects TeX delimiters in text outside MathJax's containers and code."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[bool] = []  # per open element: inside math or code?
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("br", "img", "meta", "link", "input", "hr"):
            return
        classes = (dict(attrs).get("class") or "").split()
        skip = "math" in classes or tag in ("pre", "code", "script", "style", "textarea")
        self.stack.append(skip or (bool(self.stack) and self.stack[-1]))

    def handle_endtag(self, tag: str) -> None:
        if self.stack and tag not in ("br", "img", "meta", "link", "input", "hr"):
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if not (self.stack and self.stack[-1]):
            self.found += re.findall(r"\\\[|\\\(|\$\$|\\frac|\\sum", data)


def test_no_page_shows_tex_outside_the_math_mathjax_renders(built_site):
    # MathJax (configured in docs/site/conf.py) typesets only elements of class "math";
    # TeX anywhere else would show raw to the reader.
    raw = {}
    for page in built_site.rglob("*.html"):
        if "_static" in page.parts:
            continue
        parser = _MathOutside()
        parser.feed(page.read_text(encoding="utf-8"))
        if parser.found:
            raw[page.relative_to(built_site).as_posix()] = parser.found[:3]
    assert raw == {}
    checker = _MathOutside()
    checker.feed('<p>a \\[x\\] b</p><div class="math">\\[y\\]</div><pre>\\frac</pre>')
    assert checker.found == ["\\["]
