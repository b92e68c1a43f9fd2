"""``fairfl rules [RULE]``: the registered rules, or one rule's paper, reports and keys.

Plug-ins included; one that failed to load is listed as broken, with its reason. Lines fit
100 columns; each key shows the value a run uses when it is not set (a rule key that is
also a shared key, such as ``lr``, takes the run's). The client steps follow the rules
(:data:`fairfl.client.steps.CLIENT_STEPS`, a plug-in's from the entry-point group
``fairfl.client_steps`` included), each with the train-config key that switches it on;
``fairfl rules RULE`` names the steps the rule's train config switches on. Without the
client half (a server-only install, no torch) the steps are not listed, and it says so.
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
    _list_client_steps()
    print("\n`fairfl rules RULE` shows one rule; ditto+RULE pairs Ditto with a rule.")
    return EXIT_OK


def _client_steps() -> Any:
    """The client-step registry with fairfl's steps and the plug-ins', or ``None`` without torch."""
    try:
        import fairfl.client.builtin_steps  # noqa: F401 (registers fairfl's steps)
        from fairfl.client.steps import CLIENT_STEPS
    except ImportError:
        return None
    return CLIENT_STEPS


def _list_client_steps() -> None:
    """Each client step: its train-config key, phase, the metrics it adds, where it is from."""
    steps = _client_steps()
    print("\nclient steps (the train-config key that switches each on; phase; metrics it adds):")
    if steps is None:
        print('  not listed: the client half is not installed (pip install "fairfl[client]")')
        return
    for key, step in steps.items():
        source = f"plug-in {steps.plugins[key]}" if key in steps.plugins else "fairfl"
        head = f"  {key:30s} {step.phase:9s} "
        added = ", ".join(step.metrics) or "-"
        print(
            textwrap.fill(
                f"{added}; {source}",
                WIDTH,
                initial_indent=head,
                subsequent_indent=" " * len(head),
                break_on_hyphens=False,
            )
        )
    for key, reason in steps.broken.items():
        print(textwrap.fill(reason, WIDTH, initial_indent=f"  {key:30s} (broken) "))


def _switched_steps(name: str) -> list[str] | None:
    """The client steps rule ``name``'s train config switches on (``None``: no client half).

    Read from the messages of a first round to two nodes, built with every key at its
    default, so that keys a rule sets per client (RC-FL's ``rcfl-alpha``) count too.
    """
    steps = _client_steps()
    if steps is None:
        return None
    from unittest.mock import Mock

    import numpy as np
    from flwr.app import Array, ArrayRecord, ConfigRecord
    from flwr.serverapp import Grid

    from fairfl._compat import server_task_identity
    from fairfl.strategies.registry import build_strategy

    strategy = build_strategy(name, {}, min_available_nodes=1)
    grid = Mock(spec=Grid)
    grid.get_node_ids.return_value = [1, 2]
    arrays = ArrayRecord({"w": Array(np.zeros(2, dtype=np.float32))})
    with server_task_identity(1):
        messages = list(strategy.configure_train(1, arrays, ConfigRecord({"lr": 0.1}), grid))
    configs = [message.content["config"] for message in messages]
    return [key for key, step in steps.items() if any(step.switched_on(c) for c in configs)]


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
    switched = _switched_steps(name)
    line = "not listed (no client half installed)" if switched is None else ", ".join(switched)
    print(
        textwrap.fill(
            line or "none", WIDTH, initial_indent="client steps: ", subsequent_indent="  "
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
