"""Print the code lines of each loss-reweighting rule module (issue 34: <= 40 each).

Code lines are the lines of the module that are neither blank, nor a comment, nor part
of a docstring (module, class or function). ``--check`` exits 1 if a module is over the
limit. Run: ``python scripts/rule_code_lines.py [--check]``.
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

#: The loss-reweighting rules (issue 34, item 3) and the most code lines each may have.
LOSS_RULES: tuple[str, ...] = (
    "term",
    "gifair",
    "deltafl",
    "afl",
    "vred",
    "semivred",
    "propfair",
    "fedavg",
)
LIMIT = 40
STRATEGIES = Path(__file__).resolve().parents[1] / "fairfl" / "strategies"


def code_lines(source: str) -> int:
    """The number of lines holding code: not blank, not a comment, not a docstring."""
    docstring_lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            value = first.value if isinstance(first, ast.Expr) else None
            if first and isinstance(value, ast.Constant) and isinstance(value.value, str):
                end = first.end_lineno or first.lineno
                docstring_lines.update(range(first.lineno, end + 1))
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT):
            continue
        if token.type in (tokenize.DEDENT, tokenize.ENDMARKER):
            continue
        for line in range(token.start[0], token.end[0] + 1):
            if line not in docstring_lines:
                lines.add(line)
    return len(lines)


def main(argv: list[str]) -> int:
    """Print each rule's count; with ``--check``, return 1 if one is over :data:`LIMIT`."""
    over = []
    for name in LOSS_RULES:
        count = code_lines((STRATEGIES / f"{name}.py").read_text())
        print(f"{name:10s} {count:4d}")
        if count > LIMIT:
            over.append(name)
    if over and "--check" in argv:
        print(f"over {LIMIT} code lines: {', '.join(over)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
