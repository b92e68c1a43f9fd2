"""Issue 34's size limits on the strategy core: the orchestrator stays thin.

``FairStrategy`` (the orchestration of a round) is at most 350 lines and no module of
``fairfl/strategies`` is over 500; the collaborators live in their own modules. Run with
``-s`` to see the counts.
"""

from __future__ import annotations

import ast
from pathlib import Path

import fairfl.strategies

STRATEGIES = Path(fairfl.strategies.__file__).parent
MAX_ORCHESTRATOR_LINES = 350
MAX_MODULE_LINES = 500


def class_lines(source: str, name: str) -> int:
    """Lines from ``class <name>`` to the class body's last line, both included."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            assert node.end_lineno is not None
            return node.end_lineno - node.lineno + 1
    raise AssertionError(f"no class {name}")


def test_class_lines_count_from_the_class_line_to_its_last():
    source = "import os\n\n\nclass A:\n    x = 1\n\n    def f(self):\n        return 2\n\n\ny = 3\n"
    assert class_lines(source, "A") == 5


def test_fair_strategy_is_at_most_350_lines():
    source = (STRATEGIES / "core" / "base.py").read_text(encoding="utf-8")
    lines = class_lines(source, "FairStrategy")
    print(f"FairStrategy: {lines} lines (limit {MAX_ORCHESTRATOR_LINES})")
    assert lines <= MAX_ORCHESTRATOR_LINES


def test_no_strategies_module_is_over_500_lines():
    counts = {
        str(path.relative_to(STRATEGIES)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(STRATEGIES.rglob("*.py"))
    }
    for name, lines in sorted(counts.items(), key=lambda item: -item[1]):
        print(f"{name}: {lines} lines")
    assert len(counts) > 20  # every rule module was found
    over = {name: lines for name, lines in counts.items() if lines > MAX_MODULE_LINES}
    assert not over, f"modules over {MAX_MODULE_LINES} lines: {over}"
