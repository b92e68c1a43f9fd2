"""The text the README tests read: the README and the docs site's hand-written pages.

The pages are the hand-written Markdown of ``docs/site`` (the results pages themselves are
generated from the files when the docs build, so they cannot drift). :data:`README` is the
text of the README and every such page together; a figure may move between them.
"""

from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DOC_PAGES = sorted(
    page
    for page in (ROOT / "docs" / "site").rglob("*.md")
    if "_generated" not in page.parts and page.name != "README.md"
)
README = "\n\n".join(path.read_text() for path in [ROOT / "README.md", *DOC_PAGES])


def markdown_rows(lines: list[str]) -> list[list[str]]:
    """The cells of a Markdown table's lines (the ``---`` line left out)."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
    return [row for row in rows if set(row[0]) != {"-"}]


def readme_table(first_header_cell_and_next: str) -> list[list[str]]:
    """The README table whose header line starts with the given text."""
    lines = README.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first_header_cell_and_next))
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))
    return markdown_rows(lines[start:end])


def runs_csv_cells(folder: str, metric: str) -> dict[str, str]:
    """Each label's ``mean ± std`` over seeds of one metric of a ``runs.csv``, in %.

    Worked from the per-run fractions with NumPy alone (population std, two decimals).
    """
    import csv

    by_label: dict[str, list[float]] = {}
    with (ROOT / "docs/results" / folder / "runs.csv").open() as handle:
        for row in csv.DictReader(handle):
            assert row["status"] == "ok"
            by_label.setdefault(row["label"], []).append(100 * float(row[metric]))
    return {
        label: f"{np.mean(values):.2f} ± {np.std(values):.2f}" for label, values in by_label.items()
    }
