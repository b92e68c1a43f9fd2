"""Results pages of the docs site, generated from the committed ``docs/results/``.

Every Markdown report there (``<name>.md``, or ``<name>/report.md`` of a comparison
folder) becomes one page, with the command that made it when the report records one.
The benchmark tables come from ``benchmarks/readme_tables.py`` (``docs/results/
benchmarks.json``), the cross-device scale page from ``benchmarks/bench_engine_scale.py``
(``docs/results/engine-scale.json``), the liar-share table of the lying-clients how-to
from ``experiments/liar_share.py`` (``docs/results/liar-share.json``), the DP trade-off
table of the differential-privacy how-to from ``experiments/dp_tradeoff.py``
(``docs/results/dp-tradeoff/tradeoff.md``).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

SITE = Path(__file__).resolve().parents[1]
REPO = SITE.parents[1]
RESULTS = REPO / "docs" / "results"


def _reports() -> dict[str, Path]:
    """Page name -> the committed Markdown report it shows."""
    found: dict[str, Path] = {}
    for path in sorted(RESULTS.iterdir()):
        if path.suffix == ".md":
            found[path.stem] = path
        elif path.is_dir() and (path / "report.md").exists():
            found[path.name] = path / "report.md"
    return found


def _files_linked(report: Path, page_folder: Path) -> str:
    """``report``'s Markdown, its links made safe for a page in ``page_folder``.

    Links inside a report point at files beside it (plots, CSVs): not pages of the
    site. Images are copied by Sphinx when the path resolves; other files become
    plain text naming the committed file.
    """
    base = report.parent

    def link(match: re.Match[str]) -> str:
        bang, label, target = match.group(1), match.group(2), match.group(3)
        if target.startswith(("http://", "https://", "#")):
            return match.group(0)
        resolved = (base / target).resolve()
        if bang and resolved.exists():
            return f"![{label}]({os.path.relpath(resolved, page_folder)})"
        where = resolved.relative_to(REPO).as_posix() if resolved.is_relative_to(REPO) else target
        return f"{label} (`{where}`)"

    text = report.read_text(encoding="utf-8")
    return re.sub(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)", link, text)


def _page(name: str, report: Path) -> str:
    """One results page: the report's Markdown, its links made safe for the site."""
    relative = report.relative_to(REPO).as_posix()
    text = _files_linked(report, SITE / "_generated" / "results")
    # Each report is its own page: its first heading is the page title, lower ones stay.
    if not text.lstrip().startswith("# "):
        text = f"# {name}\n\n{text}"
    return f"{text.rstrip()}\n\n*Committed file: `{relative}`.*\n"


def benchmark_tables() -> str:
    """The benchmark tables (Markdown), rendered by ``benchmarks/readme_tables.py``."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import readme_tables
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    results = json.loads(readme_tables.RESULTS.read_text(encoding="utf-8"))
    return readme_tables.render(results) + "\n"


def engine_scale_page() -> str | None:
    """The cross-device scale page, rendered by ``benchmarks/bench_engine_scale.py``.

    From ``docs/results/engine-scale.json``; ``None`` while that file is not committed.
    """
    path = RESULTS / "engine-scale.json"
    if not path.exists():
        return None
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import bench_engine_scale
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    text = bench_engine_scale.render(json.loads(path.read_text(encoding="utf-8")))
    return (
        f"{text.rstrip()}\n\n*Generated from the committed file "
        "`docs/results/engine-scale.json`.*\n"
    )


def liar_share_table() -> str:
    """The liar-share table (Markdown), rendered by ``experiments/liar_share.py``.

    From ``docs/results/liar-share.json``; the how-to *Defend against clients that lie*
    includes it.
    """
    sys.path.insert(0, str(REPO / "experiments"))
    try:
        import liar_share
    finally:
        sys.path.remove(str(REPO / "experiments"))
    results = json.loads((RESULTS / "liar-share.json").read_text(encoding="utf-8"))
    text = liar_share.render(results).rstrip()
    return f"{text}\n\n*Generated from the committed file `docs/results/liar-share.json`.*\n"


def dp_tradeoff_table() -> str:
    """The DP trade-off table, as ``experiments/dp_tradeoff.py`` wrote it, without its title.

    From ``docs/results/dp-tradeoff/tradeoff.md``; the how-to *Train with differential
    privacy under fair weights* includes it with ``:relative-images:`` (the plot's path is
    relative to ``_generated``).
    """
    text = _files_linked(RESULTS / "dp-tradeoff" / "tradeoff.md", SITE / "_generated")
    if text.startswith("# "):
        text = text.split("\n", 1)[1]
    return f"{text.strip()}\n\n*Committed file: `docs/results/dp-tradeoff/tradeoff.md`.*\n"


def docs_build_section() -> str:
    """The docs build's cold and warm times, rendered by ``benchmarks/bench_docs_build.py``.

    From ``docs/results/docs-build.json``; empty while that file is not committed.
    """
    path = RESULTS / "docs-build.json"
    if not path.exists():
        return ""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import bench_docs_build
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return "\n" + bench_docs_build.render(json.loads(path.read_text(encoding="utf-8")))


def write_results_pages(out: Path) -> dict[str, str]:
    """Write ``out/<name>.md`` for every committed report; return name -> page text."""
    from fairfl_docs import write_if_changed

    pages = {name: _page(name, report) for name, report in _reports().items()}
    engine_scale = engine_scale_page()
    if engine_scale is not None:
        pages["engine-scale"] = engine_scale
    tables = benchmark_tables() + docs_build_section()
    write_if_changed(out.parent / "benchmark-tables.md", tables)
    write_if_changed(out.parent / "liar-share-table.md", liar_share_table())
    write_if_changed(out.parent / "dp-tradeoff-table.md", dp_tradeoff_table())
    pages["benchmarks"] = (
        "# Benchmarks\n\nGenerated from `docs/results/benchmarks.json`, written by\n"
        "`nice .venv/bin/python benchmarks/run_all.py`; how they are measured:\n"
        "{doc}`/explanation/performance`.\n\n"
        "```{include} ../benchmark-tables.md\n```\n"
    )
    for stale in out.glob("*.md") if out.exists() else ():
        if stale.stem not in pages:
            stale.unlink()
    for name, text in pages.items():
        write_if_changed(out / f"{name}.md", text)
    pages["benchmarks"] += tables  # what the page shows, for the rule pages' links
    return pages
