"""One typed getter for ConfigRecord and run-config values, used by both sides."""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from dataclasses import fields
from typing import Any, TypeVar

T = TypeVar("T", int, float, str, bool)


def get_config_value(config: Mapping[str, Any], key: str, type_: type[T]) -> T:
    """Read ``config[key]`` as ``type_``; ints are accepted where floats are expected.

    Raises
    ------
    ValueError
        If the key is missing or its value has another type (the message names both).
    """
    if key not in config:
        raise ValueError(f"config key {key!r} is missing")
    value = config[key]
    if type_ is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)  # type: ignore[return-value]
    if type_ is int and isinstance(value, bool):
        raise ValueError(f"config key {key!r} must be int, got bool")
    if not isinstance(value, type_):
        raise ValueError(
            f"config key {key!r} must be {type_.__name__}, got {type(value).__name__} ({value!r})"
        )
    return value


def get_config_value_or(config: Mapping[str, Any], key: str, type_: type[T], default: T) -> T:
    """``config[key]`` read as :func:`get_config_value` does, or ``default`` when absent.

    Raises
    ------
    ValueError
        If the key is present with another type (the message names both).
    """
    return get_config_value(config, key, type_) if key in config else default


class UnknownKeyError(ValueError):
    """A config holds a key that nothing reads (a typo would otherwise run on defaults)."""


def closest_keys(key: str, known: Collection[str], n: int = 3) -> list[str]:
    """Up to ``n`` keys of ``known`` closest to ``key`` (:func:`difflib.get_close_matches`).

    Closest first; ties in sorted order, so the answer does not depend on the
    collection's order. Only keys with a similarity ratio of at least 0.6 are returned.
    """
    return difflib.get_close_matches(key, sorted(known), n=n, cutoff=0.6)


def check_known_keys(
    config: Mapping[str, Any],
    known: Collection[str],
    *,
    name: str = "run config",
    hint: str = "",
) -> None:
    """Refuse every key of ``config`` that is not in ``known``, suggesting the closest.

    Parameters
    ----------
    config : Mapping[str, Any]
        The keys to check.
    known : Collection[str]
        Every key that something reads.
    name : str (default: "run config")
        What ``config`` is, to start the message with.
    hint : str (default: "")
        Appended to the message (e.g. the keys of the chosen rule).

    Raises
    ------
    UnknownKeyError
        Naming each unknown key, in sorted order, with ``did you mean`` and the closest
        known keys, or ``no known key is close`` when none is.
    """
    unknown = sorted(key for key in config if key not in known)
    if not unknown:
        return
    parts = []
    for key in unknown:
        close = closest_keys(key, known)
        guess = (
            "did you mean " + " or ".join(repr(c) for c in close) + "?"
            if close
            else "no known key is close"
        )
        parts.append(f"{key!r} ({guess})")
    noun = "key" if len(unknown) == 1 else "keys"
    message = f"{name}: unknown {noun} " + ", ".join(parts)
    raise UnknownKeyError(f"{message}. {hint}".rstrip() if hint else message)


def dataclass_fields_from_config(cls: type, config: Mapping[str, Any]) -> dict[str, Any]:
    """The values of ``config`` for a settings dataclass's fields, keyed by field name.

    A field ``foo_bar`` is read from the key ``foo-bar`` (run-config style) as the type of
    its default (:func:`get_config_value`); keys the dataclass has no field for are ignored.
    """
    values: dict[str, Any] = {}
    for item in fields(cls):
        key = item.name.replace("_", "-")
        if key in config:
            # Settings fields have defaults of int, float, str or bool.
            default_type: type[Any] = type(item.default)
            values[item.name] = get_config_value(config, key, default_type)
    return values
