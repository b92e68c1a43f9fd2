"""The rules guide (docs/site/_ext/rule_guide.py): every rule's fairness notion.

Every registered rule has an entry (the build fails without one), the guide groups the
rules under the notions they target, and the rules table of the site names each rule's
notion.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "site" / "_ext"))

import fairfl_docs  # noqa: E402
from rule_guide import NOTIONS, RULE_GUIDE, guide_page  # noqa: E402


def test_every_registered_rule_has_a_notion_and_each_notion_a_rule():
    specs = fairfl_docs.builtin_specs()
    page = guide_page(specs)
    for name, spec in specs.items():
        notion, when = RULE_GUIDE[spec.strategy.__qualname__]
        assert notion in NOTIONS and when, name
        assert f"[`{name}`](rule-{name}) | {when} |" in page
    used = {RULE_GUIDE[spec.strategy.__qualname__][0] for spec in specs.values()}
    assert used == set(NOTIONS)


def test_a_rule_without_a_notion_stops_the_build(monkeypatch):
    from sphinx.errors import ExtensionError

    specs = fairfl_docs.builtin_specs()
    monkeypatch.delitem(RULE_GUIDE, specs["term"].strategy.__qualname__)
    with pytest.raises(ExtensionError, match=r"'term' .*no fairness notion"):
        guide_page(specs)


def test_the_built_guide_lists_every_rule_under_its_notion(built_site):
    page = (built_site / "_generated" / "rules-guide.html").read_text("utf-8")
    for name in fairfl_docs.builtin_specs():
        assert f"rule-{name}" in page or f"rules/{name}.html" in page, name
    table = (built_site / "rules" / "index.html").read_text("utf-8")
    assert "aims at" in table and "rules-guide.html" in table
    assert len(re.findall(r"<h2>", page)) == len(NOTIONS)
