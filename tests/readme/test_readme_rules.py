"""The README: short, its rule table generated from the registry, its links alive.

The README is the front page; the docs site (``docs/site``) holds the rest. Its rule
table is what ``docs/site/_ext/fairfl_docs.py --readme`` writes from
:data:`fairfl.strategies.registry.STRATEGIES` (the same generator makes the site's table),
so a rule added, renamed or given a new run-config key fails here until it is rerun.
Its Python blocks run in ``tests/readme/test_readme_snippets.py``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def docs_extension():
    sys.path.insert(0, str(ROOT / "docs" / "site" / "_ext"))
    try:
        import fairfl_docs
    finally:
        sys.path.remove(str(ROOT / "docs" / "site" / "_ext"))
    return fairfl_docs


def test_readme_rule_table_is_generated_from_the_registry():
    from fairfl.strategies.registry import STRATEGIES

    extension = docs_extension()
    text = README.read_text(encoding="utf-8")
    assert extension.readme_block(text) == extension.readme_rules_block(), (
        "README's rule table differs from the registry: run "
        "`.venv/bin/python docs/site/_ext/fairfl_docs.py --readme`"
    )
    rows = re.findall(r"^\| `([\w-]+)` \| `(\w+)` \|", extension.readme_block(text), re.M)
    builtin = [(n, s.strategy.__name__) for n, s in STRATEGIES.items() if s.source == "fairfl"]
    assert rows == builtin


def test_readme_is_at_most_250_lines_and_keeps_the_two_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    # CI (.ci/run) runs exactly this, and the README says so.
    assert "```bash\nbash scripts/test.sh\n```" in text
    assert "```bash\nbash scripts/simulate.sh\n```" in text
    assert "bash scripts/docs.sh" in text


def test_readme_links_to_files_that_exist():
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)\)", text)
    local = [t for t in targets if not t.startswith(("http://", "https://"))]
    assert len(local) >= 10
    for target in local:
        assert (ROOT / target).exists(), target
