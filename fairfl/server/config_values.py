"""Run-config values typed on a command line: each key's default, and a value parsed with its type.

``fairfl run -c key=value`` and ``fairfl compare --grid/--set`` read every value with the
type of the key's default: the shared keys' (:class:`~fairfl.settings.RunSettings`) and
every registered rule's (its parameters dataclass). Nothing here imports torch or
matplotlib, so a typo is refused before either loads.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable
from typing import Any

from fairfl.settings import RunSettings
from fairfl.strategies.registry import STRATEGIES


def shared_keys() -> dict[str, Any]:
    """Run-config keys every run reads (``RunSettings``), with their defaults."""
    return {
        f.name.replace("_", "-"): f.default
        for f in dataclasses.fields(RunSettings)
        if f.default is not dataclasses.MISSING
    }


def rule_keys(rule: str) -> dict[str, Any]:
    """The run-config keys of a registered rule, with their defaults (None if none).

    Raises
    ------
    ValueError
        If the rule is not registered (the message lists the registered names).
    """
    if rule not in STRATEGIES:
        raise ValueError(f"rule must be one of {sorted(STRATEGIES)}, got {rule!r}")
    spec = STRATEGIES[rule]
    defaults = spec.defaults()
    return {key: defaults.get(key) for key in spec.parameters}


def all_keys() -> set[str]:
    """Every run-config key: the shared ones and every registered rule's."""
    return set(shared_keys()).union(*(spec.parameters for spec in STRATEGIES.values()))


def keys_not_read(rule: str, given: Iterable[str]) -> list[str]:
    """The keys of ``given`` that neither every run nor ``rule`` reads, in order.

    Known keys of other rules (``ditto-lambda`` given to ``qffl``): the run would go on
    and silently ignore them, so ``fairfl run`` warns (``--strict``: refuses). Unknown
    keys are another error (:func:`all_keys`).

    Raises
    ------
    ValueError
        If the rule is not registered.
    """
    read, known = set(shared_keys()) | set(rule_keys(rule)), all_keys()
    return [key for key in given if key not in read and key in known]


def known_default(key: str) -> tuple[bool, Any]:
    """Whether ``key`` is a known run-config key, and its default (None if it has none)."""
    shared = shared_keys()
    if key in shared:
        return True, shared[key]
    for rule in STRATEGIES:
        keys = rule_keys(rule)
        if key in keys:
            return True, keys[key]
    return False, None


def parse_value(key: str, text: str) -> Any:
    """Parse a command-line value with the type of the key's default.

    bool: ``true``/``false`` (also 1/0, yes/no); int; float; str. A key without a typed
    default gets the first of int, float, bool or str that parses.

    Raises
    ------
    ValueError
        If the text does not parse as the default's type (the message names the key).
    """
    _, default = known_default(key)
    text = text.strip()
    booleans = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}
    if isinstance(default, bool):
        if text.lower() not in booleans:
            raise ValueError(f"{key} must be true or false, got {text!r}")
        return booleans[text.lower()]
    if isinstance(default, int):
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{key} must be an int, got {text!r}") from None
    if isinstance(default, float):
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{key} must be a float, got {text!r}") from None
    if isinstance(default, str):
        return text
    for parse in (int, float):
        with contextlib.suppress(ValueError):
            return parse(text)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text
