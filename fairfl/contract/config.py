"""One typed getter for ConfigRecord and run-config values, used by both sides."""

from __future__ import annotations

from collections.abc import Mapping
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
