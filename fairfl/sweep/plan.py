"""The plan of a comparison: its grid and settings parsed, its runs listed and checked.

Grid and setting syntax (``fairfl compare --grid``/``--set``):

- ``key=v1,v2`` : a grid axis. A rule key (``semivred-beta``) varies the rules that own it
  (the registry's run-config keys); a shared run key (``lr``, ``local-epochs``) varies
  every rule. Axes of one rule multiply.
- ``rule:key=v1,v2`` : the axis for that rule only (``qffl:lr=0.05,0.1``).
- ``--set key=value`` sets a base run-config value for every run, ``--set
  rule:key=value`` for one rule's runs only.

Values take the type of the key's default (``RunSettings`` or the rule's constructor),
so ``lr=1`` is the float 1.0; unknown keys are rejected.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fairfl.contract.config import closest_keys
from fairfl.server.config_values import all_keys, known_default, parse_value, rule_keys, shared_keys
from fairfl.server.preflight import OutDirError, check_run, prepare_out_dir
from fairfl.settings import RunSettings
from fairfl.strategies.registry import STRATEGIES

#: Run-config keys a comparison sets itself (per run), not through ``--set``.
RESERVED_KEYS = ("strategy", "seed", "out-dir")


# --------------------------------------------------------------------------- parsing


@dataclasses.dataclass(frozen=True)
class Assignment:
    """A parsed ``[rule:]key=value[,value...]`` item."""

    rule: str | None
    key: str
    values: tuple[Any, ...]


_ITEM = re.compile(r"^(?:(?P<rule>[A-Za-z0-9_+-]+):)?(?P<key>[A-Za-z0-9_-]+)=(?P<value>.*)$")


def parse_assignment(item: str, *, multi: bool) -> Assignment:
    """Parse ``[rule:]key=value`` (``multi``: comma-separated values).

    Raises
    ------
    ValueError
        If the item is malformed, the rule or key unknown, or the key reserved.
    """
    match = _ITEM.match(item.strip())
    if match is None:
        raise ValueError(f"expected [rule:]key=value, got {item!r}")
    rule, key, raw = match["rule"], match["key"], match["value"]
    if key in RESERVED_KEYS:
        hint = {"strategy": "--rules", "seed": "--seeds", "out-dir": "--out"}[key]
        raise ValueError(f"{key} is set per run; use {hint} instead of {item!r}")
    if rule is not None and rule not in STRATEGIES:
        raise ValueError(f"rule must be one of {sorted(STRATEGIES)}, got {rule!r} in {item!r}")
    known, _ = known_default(key)
    if not known:
        close = closest_keys(key, all_keys())
        guess = (
            "did you mean " + " or ".join(repr(c) for c in close) + "?"
            if close
            else "no known key is close"
        )
        raise ValueError(
            f"unknown run-config key {key!r} in {item!r} ({guess}); `fairfl rules` lists "
            "every rule's keys, [tool.flwr.app.config] in pyproject.toml the shared ones"
        )
    texts = raw.split(",") if multi else [raw]
    if any(not t.strip() for t in texts):
        raise ValueError(f"empty value in {item!r}")
    return Assignment(rule, key, tuple(parse_value(key, t) for t in texts))


@dataclasses.dataclass(frozen=True)
class Variant:
    """One rule with one choice of grid values: a row of the tables.

    Parameters
    ----------
    label : str
        Unique display name, the rule followed by its grid values
        (``semivred[beta=0.5]``); the bare rule name when it has no grid.
    rule : str
        Registry name.
    overrides : Mapping[str, Any]
        Run-config values of this variant (grid values and ``rule:key`` settings).
    """

    label: str
    rule: str
    overrides: Mapping[str, Any]

    @property
    def slug(self) -> str:
        """File-system safe form of the label."""
        return re.sub(r"[^A-Za-z0-9.+-]+", "_", self.label).strip("_")


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _short_key(rule: str, key: str) -> str:
    return key[len(rule) + 1 :] if key.startswith(f"{rule}-") else key


def expand_variants(
    rules: Sequence[str],
    grid: Sequence[Assignment] = (),
    rule_settings: Sequence[Assignment] = (),
) -> list[Variant]:
    """The variants of a comparison: each rule times the product of its grid axes.

    Parameters
    ----------
    rules : Sequence[str]
        Registered rule names, in table order (duplicates are dropped).
    grid : Sequence[Assignment]
        Grid axes. An axis with a rule applies to that rule; one without applies to the
        rules that own the key, or to all rules when the key is a shared
        (``RunSettings``) key.
    rule_settings : Sequence[Assignment]
        Fixed per-rule values (``--set rule:key=value``), not part of the label.

    Raises
    ------
    ValueError
        If a rule is unknown, or a grid axis applies to none of ``rules``.
    """
    ordered = list(dict.fromkeys(rules))
    for rule in ordered:
        rule_keys(rule)  # raises for unknown rules
    shared = shared_keys()
    axes: dict[str, list[Assignment]] = {rule: [] for rule in ordered}
    for axis in grid:
        if axis.rule is not None:
            targets = [axis.rule] if axis.rule in axes else []
        elif axis.key in shared:
            targets = ordered
        else:
            targets = [rule for rule in ordered if axis.key in STRATEGIES[rule].parameters]
        if not targets:
            raise ValueError(
                f"grid key {axis.key!r} belongs to none of the rules {ordered}"
                + (f" (axis for {axis.rule!r})" if axis.rule else "")
            )
        for rule in targets:
            axes[rule].append(axis)
    variants = []
    for rule in ordered:
        fixed = {s.key: s.values[0] for s in rule_settings if s.rule == rule}
        rule_axes = axes[rule]
        for combination in itertools.product(*(axis.values for axis in rule_axes)):
            values = {axis.key: v for axis, v in zip(rule_axes, combination, strict=True)}
            label = rule
            if values:
                inner = ",".join(
                    f"{_short_key(rule, k)}={_format_value(v)}" for k, v in values.items()
                )
                label = f"{rule}[{inner}]"
            variants.append(Variant(label=label, rule=rule, overrides={**fixed, **values}))
    labels = [v.label for v in variants]
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise ValueError(f"grid gives duplicate variants {duplicates}; remove repeated values")
    return variants


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    """One run of a comparison: a variant on a seed, with its full run config."""

    label: str
    rule: str
    seed: int
    dir: str
    config: dict[str, Any]
    #: Every key the run reads with its value, defaults resolved (:func:`check_plan`).
    effective_config: dict[str, Any] = dataclasses.field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """The manifest entry."""
        return dataclasses.asdict(self)


def check_out(out_dir: Path) -> None:
    """Create ``--out`` and check that it can be written (before anything runs).

    Raises
    ------
    ValueError
        Naming ``--out``, the folder and the operating system's reason.
    """
    try:
        prepare_out_dir(out_dir)
    except OutDirError as error:
        cause = error.__cause__
        reason = getattr(cause, "strerror", None) or type(cause).__name__
        raise ValueError(f"--out {out_dir}: cannot create or write it: {reason}") from error


def check_plan(plan: Sequence[PlannedRun], out_dir: Path) -> list[PlannedRun]:
    """Check every run of a comparison as the run itself would, before the first starts.

    The one validation path of a run (:func:`fairfl.server.preflight.check_run`, the
    clients running here): keys, values, the rule, missing extras, partitions, each
    run's folder. Returns the plan with each run's effective configuration.

    Raises
    ------
    ValueError
        The first problem, naming the run (label and seed) and the key.
    """
    check_out(out_dir)
    checked = []
    for run in plan:
        try:
            # Runs start with overwrite=true (compare() checked the folders itself).
            result = check_run(
                {**run.config, "overwrite": True}, local_clients=True, check_out_dir_use=False
            )
        except (ValueError, FileNotFoundError) as error:
            raise ValueError(f"run {run.label} seed {run.seed}: {error}") from error
        effective = result.effective_config()
        effective.pop("overwrite")
        checked.append(dataclasses.replace(run, effective_config=effective))
    return checked


def plan_runs(
    variants: Sequence[Variant],
    seeds: Sequence[int],
    base_config: Mapping[str, Any],
    out_dir: Path,
) -> list[PlannedRun]:
    """Every (variant, seed) run with its run config, seed-major within a variant.

    Rule keys ending in ``-seed`` (a rule's own random stream, e.g. ``rcfl-seed``) follow
    the run's seed unless set explicitly, so seeds vary everything random.

    Raises
    ------
    ValueError
        If no seed is given, a seed is negative or repeated, or a run config is invalid
        (checked by ``RunSettings``).
    """
    if not seeds:
        raise ValueError("seeds must not be empty")
    if len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ValueError(f"seeds must be distinct and >= 0, got {list(seeds)}")
    runs = []
    for variant in variants:
        for seed in seeds:
            rel = f"runs/{variant.slug}/seed-{seed}"
            config: dict[str, Any] = {**base_config, **variant.overrides}
            for key in STRATEGIES[variant.rule].parameters:
                if key.endswith("-seed") and key not in config:
                    config[key] = seed
            config.update({"strategy": variant.rule, "seed": seed, "out-dir": str(out_dir / rel)})
            RunSettings.from_run_config(config)  # fail before any run starts
            runs.append(
                PlannedRun(
                    label=variant.label, rule=variant.rule, seed=seed, dir=rel, config=config
                )
            )
    return runs


def split_settings(items: Sequence[str]) -> tuple[dict[str, Any], list[Assignment]]:
    """Parse ``--set`` items into the shared base config and per-rule assignments.

    Later items override earlier ones.
    """
    base: dict[str, Any] = {}
    per_rule: dict[tuple[str, str], Assignment] = {}
    for item in items:
        assignment = parse_assignment(item, multi=False)
        if assignment.rule is None:
            base[assignment.key] = assignment.values[0]
        else:
            per_rule[(assignment.rule, assignment.key)] = assignment
    return base, list(per_rule.values())
