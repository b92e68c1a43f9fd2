"""``fairfl rules``: list the registered rules, their run-config keys and defaults.

Plug-ins included; one that failed to load is listed as broken, with its reason.
"""

from __future__ import annotations

import argparse
from typing import Any

from fairfl.cli.common import EXIT_OK


def add_parser(commands: Any) -> None:
    """``fairfl rules``: list the rules."""
    commands.add_parser("rules", help="list registered rules and their run-config keys")


def _list_rules(args: argparse.Namespace) -> int:
    from fairfl.strategies.registry import STRATEGIES

    for name, spec in STRATEGIES.items():
        defaults = spec.defaults()
        keys = {key: defaults.get(key) for key in spec.parameters}
        settings = ", ".join(f"{k}={v!r}" for k, v in keys.items()) or "(no hyperparameters)"
        print(f"{name:14s} {spec.strategy.__name__:14s} {settings}")
    for name, reason in STRATEGIES.broken.items():  # a plug-in that failed to load
        print(f"{name:14s} {'(broken)':14s} {reason}")
    return EXIT_OK
