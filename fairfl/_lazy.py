"""Names of a package loaded on first use (PEP 562), so that importing it stays light.

``fairfl.models``, ``fairfl.server`` and ``fairfl.simulation`` re-export names whose
modules import torch; a run config is checked through light modules of the same packages
(``fairfl.server.preflight``, ``fairfl.models.names``) before anything heavy loads.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(
    package: str, homes: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` for names loaded from their ``homes``.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    homes : Mapping[str, str]
        Each lazy name and the module that defines it.

    Returns
    -------
    tuple[Callable[[str], Any], Callable[[], list[str]]]
        ``__getattr__`` (imports the home module on first use and keeps the value in
        the package) and ``__dir__`` (the package's names and the lazy ones: autosummary
        and IDEs list a package's members through ``dir()``).
    """

    def get_attribute(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(homes[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    def names() -> list[str]:
        return sorted({*vars(sys.modules[package]), *homes})

    return get_attribute, names
