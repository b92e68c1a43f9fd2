"""Author–year citations: every paper the code and the docs cite has a bibliography entry.

``docs/site/_ext/bibliography.py`` holds the references and finds the author–year
citations written in prose ("Li, Sanjabi, Beirami & Smith, ICLR 2020", "Hu et al., IEEE
TNSE 2022"); the docs build makes the bibliography page and links each rule page's
paper to its entry. The results pages generated from ``docs/results`` have unique titles.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "site" / "_ext"))

from bibliography import REFERENCES, citations, labels, references_in  # noqa: E402
from rule_math import RULE_MATH  # noqa: E402

#: Where papers are cited: the package, the hand-written pages, the README, the docs' code.
CITING = sorted(
    [
        *(p for p in (ROOT / "fairfl").rglob("*.py") if "_proto" not in p.parts),
        ROOT / "README.md",
        *(p for p in (ROOT / "docs" / "site").rglob("*.md") if "_generated" not in p.parts),
        *(p for p in (ROOT / "docs" / "site" / "_ext").glob("*.py") if p.name != "bibliography.py"),
    ]
)


def prose(path: Path) -> str:
    """The file's text with adjacent string literals joined ("Mohri, " "Sivek ...")."""
    return re.sub(r"\"\s*\n\s*(?:f?)\"", "", path.read_text("utf-8"))


@pytest.mark.parametrize("path", CITING, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_author_year_citation_has_a_bibliography_entry(path):
    missing = [
        " ".join(text.split()) for _, _, text in citations(prose(path)) if not references_in(text)
    ]
    assert missing == [], f"cited but not in docs/site/_ext/bibliography.py: {missing}"


def test_the_citation_finder_finds_and_resolves_the_forms_in_use():
    def cited(text: str) -> list[str]:
        return [labels()[reference.key] for reference in references_in(text)]

    assert cited("Li, Sanjabi, Beirami & Smith, ICLR 2020, eq. (2)") == ["Li et al., 2020a"]
    assert cited("FedProx (Li et al., MLSys 2020)") == ["Li et al., 2020b"]
    assert cited("AFL, Li et al., ICLR 2020") == ["Li et al., 2020a"]  # a rule name before
    assert cited("Mohri, Sivek and Suresh (ICML 2019)") == ["Mohri et al., 2019"]
    assert cited("Malekmohammadi & Yu, arXiv:2406.16193, eqs. (5)") == ["Malekmohammadi & Yu, 2024"]
    assert cited("McMahan et al., AISTATS 2017") == ["McMahan et al., 2017"]  # not Bonawitz's
    assert cited("Hu, Shaloudegi, Zhang and Yu's (IEEE TNSE 2022)") == ["Hu et al., 2022"]
    # A citation of a paper that is not in the bibliography is found and resolves to none.
    [(names, year, _)] = citations("as in Smith & Jones, NeurIPS 2031, Table 2")
    assert (names, year) == (("Smith", "Jones"), 2031)
    assert references_in("Smith & Jones, NeurIPS 2031") == []
    assert citations("arXiv:2012.10069 and 1,797 samples in 2 rounds") == []


def test_every_rule_cites_a_reference_and_labels_are_unique():
    for qualname, (paper, _) in RULE_MATH.items():
        assert references_in(paper.split(";")[0]), f"{qualname}: {paper!r}"
    shown = labels()
    assert len(set(shown.values())) == len(REFERENCES) == len(shown)


def test_results_pages_have_unique_titles(tmp_path):
    from generate_results import write_results_pages

    pages = write_results_pages(tmp_path)
    titles = {}
    for name in pages:
        title = (tmp_path / f"{name}.md").read_text("utf-8").lstrip().splitlines()[0]
        assert title.startswith("# "), name
        assert title not in titles, f"{name} and {titles.get(title)} share the title {title!r}"
        titles[title] = name


def test_the_bibliography_page_lists_every_reference_and_rule_pages_link_to_it(built_site):
    import html

    page = html.unescape((built_site / "_generated" / "bibliography.html").read_text("utf-8"))
    for reference in REFERENCES:
        assert f'id="bib-{reference.key}"' in page, reference.key
        assert labels()[reference.key] in page
    qffl = (built_site / "_generated" / "rules" / "qffl.html").read_text("utf-8")
    assert "bibliography.html#bib-li2020qffl" in qffl and "Li et al., 2020a" in qffl
