"""Citations a reader can follow: no reference to a file or a paper number the repository lacks.

The code and the docs cite papers by authors, year and venue, and specs by their path in
``docs/specs/``; the team's offline folders (``papers/``, ``specs/``, ``DESIGN.md``) and
their numbering ("paper 000", "[P000]") are not in the repository (issue #51, item 6).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_GLOBS = (
    "fairfl/**/*.py",
    "docs/site/**/*.md",
    "docs/site/**/*.py",
    "docs/results/**/*.md",
    "docs/results/**/manifest.json",
    "experiments/**/*.py",
    "benchmarks/**/*.py",
    "examples/**/*.py",
    "examples/**/*.md",
    "scripts/**/*.sh",
)
SOURCES = sorted(
    path
    for path in (*(p for g in _GLOBS for p in ROOT.glob(g)), ROOT / "README.md")
    if "_generated" not in path.parts
)

#: Pointers into folders the repository does not have, and the papers' private numbering.
UNFOLLOWABLE = re.compile(
    r"(?i:paper 00\d)|\[P00\d\]|(?<![\w/])papers/|DESIGN\.md|(?<![\w/])specs/spec-|"
    r"(?<![\w/.])spec-[a-z-]+ §"
)
SPEC_PATH = re.compile(r"docs/specs/([\w.-]+\.md)")


def test_the_scan_sees_the_code_and_the_docs():
    names = {p.relative_to(ROOT).as_posix() for p in SOURCES}
    assert {"fairfl/strategies/qffl.py", "README.md", "docs/site/index.md"} <= names


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_citation_points_outside_the_repository(path: Path):
    text = path.read_text(encoding="utf-8")
    found = [m.group(0) for m in UNFOLLOWABLE.finditer(text)]
    assert not found, f"{path.relative_to(ROOT)} cites what the repository lacks: {found}"
    missing = {
        name for name in SPEC_PATH.findall(text) if not (ROOT / "docs/specs" / name).is_file()
    }
    assert not missing, f"{path.relative_to(ROOT)} cites specs not in docs/specs: {missing}"


def test_the_pattern_catches_what_it_must():
    for text in ("paper 000's Table 6", "Paper 002 (q-FFL)", "[P004]", "see papers/000_x.txt",
                 "(DESIGN.md)", "``specs/spec-rcfl.md``", "spec-vred-qffl §13"):  # fmt: skip
        assert UNFOLLOWABLE.search(text), text
    for text in ("docs/specs/spec-rcfl.md §4", "Malekmohammadi & Yu, Table 6", "spec §7"):
        assert not UNFOLLOWABLE.search(text), text
