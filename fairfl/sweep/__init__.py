"""Sweeps: run rules, grids and seeds side by side, optionally tuned, locally or on Ray.

``fairfl compare`` (:func:`compare`) runs rules and grids on identical partitions,
initial models and seeds and then writes the report (:mod:`fairfl.report`);
``fairfl compare --tune`` (:func:`tune_and_compare`) first chooses each rule's
hyperparameters on validation splits of the training data, from each rule's declared
grid (the ``grid=`` of its parameters); ``--engine ray`` hands the runs to a Ray
cluster (:mod:`fairfl.sweep.ray_sweep`); :data:`RECIPES` are the papers' comparisons.
"""

from fairfl.sweep.compare import compare, execute, expand_variants, plan_runs
from fairfl.sweep.recipes import RECIPES, Recipe
from fairfl.sweep.tune import select_setting, tune_and_compare

__all__ = [
    "RECIPES",
    "Recipe",
    "compare",
    "execute",
    "expand_variants",
    "plan_runs",
    "select_setting",
    "tune_and_compare",
]
