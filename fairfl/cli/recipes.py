"""``fairfl recipes``: list the reproduction recipes of ``fairfl compare --recipe``."""

from __future__ import annotations

import argparse
from typing import Any

from fairfl.cli.common import EXIT_OK


def add_parser(commands: Any) -> None:
    """``fairfl recipes``: list the recipes."""
    commands.add_parser("recipes", help="list reproduction recipes")


def _list_recipes(args: argparse.Namespace) -> int:
    from fairfl.sweep.recipes import RECIPES

    for recipe in RECIPES.values():
        print(f"{recipe.name}: {recipe.title}\n    {recipe.description}\n")
    return EXIT_OK
