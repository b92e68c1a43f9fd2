"""``fairfl rules [RULE]``: the registered rules, or one rule's paper, reports and keys.

Plug-ins included; one that failed to load is listed as broken, with its reason. Lines fit
100 columns; each key shows the value a run uses when it is not set (a rule key that is
also a shared key, such as ``lr``, takes the run's).
"""

from __future__ import annotations

import argparse
import inspect
import sys
import textwrap
from typing import TYPE_CHECKING, Any

from fairfl.cli.common import EXIT_OK

if TYPE_CHECKING:
    from fairfl.strategies.registry import RuleSpec

#: Width the listing fits (a terminal, a docs page's code block).
WIDTH = 100


def add_parser(commands: Any) -> None:
    """``fairfl rules [RULE]``: list the rules, or show one."""
    rules = commands.add_parser(
        "rules",
        help="list registered rules and their run-config keys; `fairfl rules RULE` shows "
        "one rule's paper, client reports and keys with defaults, ranges and paper grids",
    )
    rules.add_argument("rule", nargs="?", help="a rule's name (qffl, ditto+term, ...)")


def _run_defaults(spec: RuleSpec) -> dict[str, Any]:
    """Each key of the rule with the value a run uses when it is not set."""
    from fairfl.server.config_values import shared_keys

    shared, defaults = shared_keys(), spec.defaults()
    return {
        key: shared[key] if defaults.get(key) is None and key in shared else defaults.get(key)
        for key in spec.parameters
    }


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return (
        repr(value)
        if isinstance(value, str)
        else f"{value:g}"
        if isinstance(value, float)
        else str(value)
    )


def _list_rules(args: argparse.Namespace) -> int:
    from fairfl.strategies.registry import STRATEGIES

    if args.rule is not None:
        return _show_rule(args.rule)
    print(f"{'rule':14s} {'class':14s} run-config keys (value when unset)")
    for name, spec in STRATEGIES.items():
        keys = ", ".join(f"{k}={_value(v)}" for k, v in _run_defaults(spec).items())
        head = f"{name:14s} {spec.strategy.__name__:14s} "
        print(
            textwrap.fill(
                keys or "(no hyperparameters)",
                WIDTH,
                initial_indent=head,
                subsequent_indent=" " * len(head),
                break_on_hyphens=False,
            )
        )
    for name, reason in STRATEGIES.broken.items():  # a plug-in that failed to load
        print(textwrap.fill(reason, WIDTH, initial_indent=f"{name:14s} {'(broken)':14s} "))
    print("\n`fairfl rules RULE` shows one rule; ditto+RULE pairs Ditto with a rule.")
    return EXIT_OK


def _show_rule(name: str) -> int:
    """One rule: what it is, its paper, what its clients report, each key."""
    from fairfl.contract.keys import LOSS_BEFORE_TRAINING
    from fairfl.strategies.registry import STRATEGIES, build_strategy

    if name not in STRATEGIES:
        build_strategy(name, {})  # raises the registry's error, with "Did you mean"
    spec = STRATEGIES[name]
    rule = spec.strategy
    module = inspect.getdoc(sys.modules[rule.__module__]) or ""
    paragraphs = [" ".join(p.split()) for p in module.split("\n\n") if p.strip()]
    summary = (inspect.getdoc(rule) or "").splitlines()[0] if inspect.getdoc(rule) else ""
    print(textwrap.fill(f"{name}: {summary}", WIDTH, subsequent_indent="  "))
    print(f"class: {rule.__module__}.{rule.__name__} ({spec.source})")
    if len(paragraphs) > 1:  # the citation: the module docstring's second paragraph
        citation = paragraphs[1].split(". ")[0].rstrip(".") + "."
        print(textwrap.fill(citation, WIDTH, initial_indent="paper: ", subsequent_indent="  "))
    reports = ["num-examples"]
    if rule.needs_loss:
        reports.append(f"{LOSS_BEFORE_TRAINING} (F_k(w^t), the loss before local training)")
    reports += list(rule.required_train_metrics)
    print(
        textwrap.fill(
            ", ".join(reports), WIDTH, initial_indent="clients report: ", subsequent_indent="  "
        )
    )
    specs = {s.key: s for s in rule.Parameters.specs().values() if s.key is not None}
    defaults = _run_defaults(spec)
    if not defaults:
        print("keys: none (no hyperparameters)")
        return EXIT_OK
    width = max(len(key) for key in defaults)
    print("keys (value when unset; allowed; paper grid):")
    for key, default in defaults.items():
        item = specs.get(key)
        allowed = item.allowed() if item is not None else "-"
        grid = ", ".join(_value(v) for v in item.grid) if item is not None and item.grid else "-"
        line = f"  {key:{width}s}  {_value(default):10s} {allowed}; grid: {grid}"
        print(textwrap.fill(line, WIDTH, subsequent_indent=" " * (width + 15)))
    return EXIT_OK
