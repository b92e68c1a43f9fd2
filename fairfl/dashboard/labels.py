"""A run's name on the dashboard: its rule and the keys the user set, never its folder.

:func:`run_label` names a run from ``summary.json`` (``strategy`` and ``config_given``)
or, while it runs, from the rule its ``rounds.jsonl`` lines name; :func:`variant_of`
takes the seed off a label, which is how the page groups a rule's seeds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Between a rule's label and its seed (``"afl seed 2"``), as ``fairfl compare`` names runs.
SEED = " seed "
#: Run-config keys a label leaves out of its parentheses: the rule is named first, the
#: seed last, and the out-dir is a folder.
UNLABELLED = ("strategy", "seed", "out-dir")


def value_text(value: Any) -> str:
    """A run-config value as the user would type it (``true``, ``0.1``, ``mlp``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def run_label(rule: str, given: Mapping[str, Any]) -> str:
    """``rule (key=value, ...) seed S`` from the keys the user set (``config_given``).

    Keys are sorted; the seed comes last, and only when the user set it.

    Examples
    --------
    >>> run_label("qffl", {"qffl-q": 1.0, "lr": 0.1, "seed": 2, "out-dir": "o"})
    'qffl (lr=0.1, qffl-q=1) seed 2'
    >>> run_label("fedavg", {})
    'fedavg'
    """
    keys = sorted(k for k in given if k not in UNLABELLED)
    label = rule
    if keys:
        label += " (" + ", ".join(f"{k}={value_text(given[k])}" for k in keys) + ")"
    if "seed" in given:
        label += f"{SEED}{value_text(given['seed'])}"
    return label


def variant_of(label: str) -> str:
    """The rule variant of a run label (``"afl seed 2"`` -> ``"afl"``)."""
    head, sep, seed = label.rpartition(SEED)
    return head if sep and seed.isdigit() else label
