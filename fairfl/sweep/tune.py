"""Tuned comparison: choose each rule's hyperparameters on validation data, report on test.

``fairfl compare --tune`` runs in two phases (Malekmohammadi & Yu §5.1 / App. B.2 tunes every
method on a grid and reports its best setting; Table 5 lists the grids):

1. **Tuning** (``<out>/tuning/``): every grid setting of every rule runs on the tuning
   seeds with ``validation-fraction`` of each client's *training* split carved out as a
   validation split (:func:`fairfl.data.partition.validation_split`) and
   ``evaluate-split = "validation"``: the clients train on the rest of their training
   split and evaluate on their validation split only; no test sample is read.
2. **Selection**: per rule, the setting the declared criterion prefers on the tuning
   runs' final-round validation statistics (the mean over tuning seeds of the
   unweighted client mean and of the worst-10 % mean; :func:`select_setting`).
3. **Reporting** (``<out>/``): each rule's chosen setting runs on *fresh* seeds (the
   comparison's ``--seeds``, disjoint from the tuning seeds) with the plain run config
   (no validation split, evaluation on test) and is reported as ``fairfl compare``
   reports; the variant labels carry the chosen values (``semivred[beta=0.5]``).
   ``tuning.json`` / ``tuning.md`` hold every setting's validation numbers, the
   choice, the grid, the criterion, the seeds and the wall times.

Criteria (``--tune-criterion``), accuracies as fractions, ``tolerance`` in points:

- ``worst10-near-baseline`` (default): among the settings whose validation mean is at
  least the baseline's (FedAvg's) minus ``tolerance`` points, the highest worst-10 %;
  if none qualifies, the highest mean. The baseline's own value is its best-mean
  setting.
- ``worst10``: the highest worst-10 %.
- ``mean``: the highest mean.

Ties (equal to 1e-9) go to the higher mean, then the higher worst-10 %, then the
setting listed first in the grid (values in the order given).

Grid edges: a chosen value at the lowest or highest end of a numeric grid axis of three
or more values (:func:`edge_side`) may mean the best setting lies beyond the grid.
``tuning.md`` marks it (``beta=1 (grid edge)``) and lists it with its grid, and the
tuning logs a WARNING for it: widen that axis with ``--tune-grid`` and tune again. With
two values every choice is an end, so such an axis is never flagged.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from fairfl.report.results import group_by_label, load_runs, read_manifest
from fairfl.server.config_values import shared_keys
from fairfl.strategies.registry import STRATEGIES
from fairfl.sweep.compare import (
    Assignment,
    compare,
    expand_variants,
    parse_assignment,
    split_settings,
    write_manifest,
)

logger = logging.getLogger(__name__)

CRITERIA: tuple[str, ...] = ("worst10-near-baseline", "worst10", "mean")
DEFAULT_CRITERION = "worst10-near-baseline"
#: Points of validation mean a setting may lose against the baseline (default criterion).
DEFAULT_TOLERANCE = 2.0
DEFAULT_VALIDATION_FRACTION = 0.2
TUNING_DIR = "tuning"
TUNING_JSON = "tuning.json"
TUNING_MD = "tuning.md"
_TIE = 1e-9
#: Fewest distinct numeric values an axis needs before an end value is flagged.
MIN_EDGE_GRID = 3


def paper_grid(rule: str, num_server_rounds: int) -> tuple[str, ...]:
    """The default tuning grid of a rule (``rule:key=v1,v2`` items; empty: nothing to tune).

    Read from the rule's declared parameters only
    (:meth:`~fairfl.strategies.core.params.RuleParameters.tuning_grid`: each field's
    ``grid=``, or its ``tune=`` where the tuned values are not the paper's, and the
    axes that depend on the run's length), so a plug-in rule's declared grid is its
    default grid here too. The built-in grids are Malekmohammadi & Yu's Table 5 /
    App. B.2 and Hu et al.'s Table 5 (FedMGDA+'s ε, η_g and, past the 100-round decay
    period, its decay); Ditto and ``ditto+<rule>``: the global rule's grid and Ditto's
    λ (its Appendix C; scored on the personal models, :class:`Candidate`).
    Malekmohammadi & Yu also tunes the local learning rate per method (Table 4); pass
    ``lr=...`` in ``tune_grid`` for that.
    """
    spec = STRATEGIES.get(rule)
    if spec is None:
        return ()
    grid = spec.strategy.Parameters.tuning_grid(num_server_rounds)
    return tuple(
        f"{rule}:{key}={','.join(_grid_text(value) for value in values)}"
        for key, values in grid.items()
    )


def _grid_text(value: Any) -> str:
    """A grid value as short text that parses back to it (``1``, ``0.05``, full β digits)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        short = f"{value:g}"
        return short if float(short) == value else repr(value)
    return str(value)


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One grid setting of a rule with its validation statistics (fractions).

    Parameters
    ----------
    label : str
        Variant label (``semivred[beta=0.5]``).
    rule : str
        Registry name.
    overrides : Mapping[str, Any]
        The setting's run-config values.
    mean : float
        Validation mean accuracy (unweighted over clients), mean over tuning seeds; NaN
        when a tuning run failed or ended with a non-finite accuracy.
    worst10 : float
        Validation worst-10 % mean accuracy, mean over tuning seeds (NaN as ``mean``).
    order : int
        Position in the grid (ties go to the lower).
    models : {"global", "personal"} (default: "global")
        Which models the statistics are of: ``"personal"`` for a rule whose clients
        report personal models (Ditto), whose λ leaves the global model unchanged; the
        paper picks λ by the personal models' validation accuracy (its Appendix C).
    """

    label: str
    rule: str
    overrides: Mapping[str, Any]
    mean: float
    worst10: float
    order: int
    models: Literal["global", "personal"] = "global"

    @property
    def finite(self) -> bool:
        """Whether every tuning run of the setting gave finite statistics."""
        return math.isfinite(self.mean) and math.isfinite(self.worst10)


def _rank(candidate: Candidate, first: str) -> tuple[float, float, int]:
    """Sort key (smaller is better): the criterion's statistic, the other, grid order."""
    mean = round(candidate.mean / _TIE) * _TIE
    worst = round(candidate.worst10 / _TIE) * _TIE
    if first == "mean":
        return (-mean, -worst, candidate.order)
    return (-worst, -mean, candidate.order)


def select_setting(
    candidates: Sequence[Candidate],
    *,
    criterion: str = DEFAULT_CRITERION,
    baseline_mean: float | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> Candidate:
    """The setting a criterion chooses among one rule's candidates.

    With m_s, w_s the validation mean and worst-10 % of setting s (fractions) and m_0
    the baseline's mean:

    - ``worst10-near-baseline``: argmax_{s : m_s ≥ m_0 − tolerance/100} w_s, or
      argmax_s m_s when no setting qualifies;
    - ``worst10``: argmax_s w_s;
    - ``mean``: argmax_s m_s.

    Ties (to 1e-9) go to the higher mean, then the higher worst-10 %, then the lower
    ``order``. Settings with a non-finite statistic are never chosen.

    Raises
    ------
    ValueError
        If the criterion is unknown, ``worst10-near-baseline`` has no finite
        ``baseline_mean``, ``tolerance`` is negative, or no candidate is finite (the
        message names the rule).
    """
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA}, got {criterion!r}")
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0 points, got {tolerance!r}")
    finite = [c for c in candidates if c.finite]
    if not finite:
        rule = candidates[0].rule if candidates else "?"
        raise ValueError(
            f"rule {rule}: no grid setting finished its tuning runs with finite validation "
            f"accuracies ({[c.label for c in candidates]})"
        )
    if criterion == "mean":
        return min(finite, key=lambda c: _rank(c, "mean"))
    if criterion == "worst10":
        return min(finite, key=lambda c: _rank(c, "worst10"))
    if baseline_mean is None or not math.isfinite(baseline_mean):
        raise ValueError(
            f"criterion {criterion} needs the baseline's finite validation mean, got "
            f"{baseline_mean!r}"
        )
    floor = baseline_mean - tolerance / 100.0
    eligible = [c for c in finite if c.mean >= floor - _TIE]
    if not eligible:
        return min(finite, key=lambda c: _rank(c, "mean"))
    return min(eligible, key=lambda c: _rank(c, "worst10"))


def candidates_from_folder(folder: Path) -> list[Candidate]:
    """Every variant of a tuning folder with its validation statistics, in grid order.

    Reads the final evaluated round of each run (:mod:`fairfl.report.results`) and
    averages ``acc-mean`` and ``acc-worst-10`` over the variant's seeds (those of the
    personal models, ``personal-acc-mean`` ..., where every run reports them: Ditto); a
    failed or non-finite run makes the variant's statistics NaN.

    Raises
    ------
    ValueError
        If a run of the folder was not evaluated on the validation split.
    """
    manifest = read_manifest(folder)
    if manifest is None:
        raise ValueError(f"{folder}: no manifest.json (not a `fairfl compare --tune` folder)")
    for run in manifest["runs"]:
        if run["config"].get("evaluate-split") != "validation":
            raise ValueError(f"{folder / run['dir']}: a tuning run must evaluate on validation")
    groups = group_by_label(load_runs(folder))
    candidates = []
    for order, variant in enumerate(manifest["variants"]):
        runs = groups.get(variant["label"], [])
        finals = [run.final_metrics() if run.ok else {} for run in runs]
        personal = bool(finals) and all("personal-acc-mean" in f for f in finals if f)
        prefix = "personal-" if personal else ""
        means = [f.get(f"{prefix}acc-mean", math.nan) for f in finals] or [math.nan]
        worsts = [f.get(f"{prefix}acc-worst-10", math.nan) for f in finals] or [math.nan]
        candidates.append(
            Candidate(
                label=variant["label"],
                rule=variant["rule"],
                overrides=dict(variant["overrides"]),
                mean=float(np.mean(means)),
                worst10=float(np.mean(worsts)),
                order=order,
                models="personal" if personal else "global",
            )
        )
    return candidates


def choose_settings(
    candidates: Sequence[Candidate],
    *,
    criterion: str = DEFAULT_CRITERION,
    tolerance: float = DEFAULT_TOLERANCE,
    baseline_rule: str = "fedavg",
) -> tuple[dict[str, Candidate], float | None]:
    """Each rule's chosen setting, and the baseline mean the criterion used (or None).

    The baseline's mean is that of its own best-mean setting.

    Raises
    ------
    ValueError
        If the criterion needs the baseline and ``baseline_rule`` has no candidate.
    """
    by_rule: dict[str, list[Candidate]] = {}
    for candidate in candidates:
        by_rule.setdefault(candidate.rule, []).append(candidate)
    baseline_mean = None
    if criterion == "worst10-near-baseline":
        if baseline_rule not in by_rule:
            raise ValueError(
                f"criterion {criterion} compares with {baseline_rule}'s validation mean: add "
                f"{baseline_rule} to the rules (got {sorted(by_rule)})"
            )
        baseline_mean = select_setting(by_rule[baseline_rule], criterion="mean").mean
    chosen = {
        rule: select_setting(
            group, criterion=criterion, baseline_mean=baseline_mean, tolerance=tolerance
        )
        for rule, group in by_rule.items()
    }
    return chosen, baseline_mean


def edge_side(values: Sequence[Any], chosen: Any) -> Literal["lowest", "highest"] | None:
    """Which end of a numeric grid axis the chosen value is at, if any.

    With v_1 < ... < v_k the axis's distinct values (k ≥ :data:`MIN_EDGE_GRID`): the
    chosen value c is at the ``"lowest"`` end if c = v_1 and the ``"highest"`` if
    c = v_k. None when c is inside the grid, the axis has fewer than three distinct
    values (with two, every choice is an end and says nothing), or a value is not a
    number (booleans and strings have no ends).
    """
    numbers = [*values, chosen]
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in numbers):
        return None
    distinct = sorted(set(values))
    if len(distinct) < MIN_EDGE_GRID:
        return None
    if chosen == distinct[0]:
        return "lowest"
    if chosen == distinct[-1]:
        return "highest"
    return None


@dataclasses.dataclass(frozen=True)
class GridEdge:
    """A rule's chosen value at an end of its numeric grid axis.

    Parameters
    ----------
    rule : str
        Registry name.
    key : str
        Run-config key of the axis (``vred-beta``).
    value : float
        The chosen value.
    side : {"lowest", "highest"}
        Which end of the axis it is.
    grid : tuple[float, ...]
        The axis's values, in the order given.
    """

    rule: str
    key: str
    value: float
    side: Literal["lowest", "highest"]
    grid: tuple[float, ...]

    @property
    def where(self) -> str:
        """``"the highest value of its grid (0.01, 0.5, 1)"``."""
        return f"the {self.side} value of its grid ({', '.join(map(_shown, self.grid))})"

    @property
    def short(self) -> str:
        """``key=value`` as the rule's variant labels show it (``beta=1``)."""
        key = self.key[len(self.rule) + 1 :] if self.key.startswith(f"{self.rule}-") else self.key
        return f"{key}={_shown(self.value)}"

    def describe(self) -> str:
        """One line for people: the value, which end, the grid and what to do."""
        return (
            f"{self.rule}: {self.key}={_shown(self.value)} is {self.where}; the best setting "
            f"may lie beyond it: widen the grid (--tune-grid {self.rule}:{self.key}=...) "
            "and tune again"
        )


def grid_edges(
    rules: Sequence[str], grid: Sequence[str], chosen: Mapping[str, Mapping[str, Any]]
) -> list[GridEdge]:
    """The chosen values that sit at an end of their grid axis (:func:`edge_side`).

    Parameters
    ----------
    rules : Sequence[str]
        The compared rules, in table order.
    grid : Sequence[str]
        The tuning grid items (``rule:key=v1,v2,...`` or ``key=...``; :func:`tuning_grid`).
    chosen : Mapping[str, Mapping[str, Any]]
        Each rule's chosen run-config overrides (:attr:`Candidate.overrides`).

    Returns
    -------
    list[GridEdge]
        In rule order, then grid order.
    """
    edges = []
    for rule, axis in _rule_axes(rules, grid):
        value = chosen.get(rule, {}).get(axis.key)
        side = edge_side(axis.values, value)
        # A side means a number was chosen (edge_side is None for None).
        if side is not None and value is not None:
            edges.append(GridEdge(rule, axis.key, value, side, tuple(axis.values)))
    return edges


def warn_grid_edges(
    rules: Sequence[str], grid: Sequence[str], chosen: Mapping[str, Mapping[str, Any]]
) -> list[GridEdge]:
    """Log one WARNING per chosen value at a grid edge (:func:`grid_edges`); return them."""
    edges = grid_edges(rules, grid, chosen)
    for edge in edges:
        logger.warning("tune_and_compare: %s", edge.describe())
    return edges


def _shown(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _grid_value(value: Any) -> str:
    """A run-config value as grid text that parses back to the same value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def tuning_grid(
    rules: Sequence[str], explicit: Sequence[str] | None, num_server_rounds: int
) -> list[str]:
    """The grid items of the tuning phase.

    ``explicit`` (``--tune-grid``) items replace the default grid (:func:`paper_grid`)
    of every rule they apply to (a ``rule:key`` item: that rule; a rule key: the rules
    that own it; a shared key such as ``lr``: every rule); the other rules keep theirs.
    """
    explicit = list(explicit or ())
    touched = {rule for rule, _ in _grid_axes(rules, explicit)}
    items = [i for r in rules if r not in touched for i in paper_grid(r, num_server_rounds)]
    return items + explicit


def _tuning_markdown(summary: Mapping[str, Any]) -> str:
    lines = [
        "# Tuning: validation statistics of every grid setting",
        "",
        f"Criterion `{summary['criterion']}` (tolerance {summary['tolerance']:g} points"
        + (
            f", baseline {summary['baseline_rule']} validation mean "
            f"{100 * summary['baseline_mean']:.2f} %"
            if summary["baseline_mean"] is not None
            else ""
        )
        + f"); validation fraction {summary['validation_fraction']:g} of each client's "
        f"training split; tuning seeds {summary['tuning_seeds']}, reported seeds "
        f"{summary['seeds']}. Wall time: tuning {summary['wall_time_s']['tuning']:.0f} s, "
        f"reported runs {summary['wall_time_s']['final']:.0f} s, total "
        f"{summary['wall_time_s']['total']:.0f} s.",
        "",
        "Grid: " + (", ".join(f"`{g}`" for g in summary["grid"]) or "(none)") + ".",
        "",
    ]
    edges = summary_edges(summary)
    if edges:
        lines += [
            "Chosen at a grid edge (the lowest or highest value of a numeric axis of "
            f"{MIN_EDGE_GRID} or more values): the best setting may lie beyond the grid, "
            "so widen these axes with `--tune-grid` and tune again.",
            "",
            *[f"- {edge.rule}: `{edge.key}={_shown(edge.value)}`, {edge.where}." for edge in edges],
            "",
        ]
    else:
        lines += [
            f"No chosen value is at an edge of a numeric grid axis of {MIN_EDGE_GRID} or "
            "more values.",
            "",
        ]
    lines += []
    # "Models" only where a rule was scored on its personal models (Ditto).
    models = any(c.get("models", "global") != "global" for c in summary["candidates"])
    lines += [
        "| Setting | Validation mean (%) | Validation worst 10% (%) | "
        + ("Models | " if models else "")
        + "Chosen |",
        "| --- | --- | --- | " + ("--- | " if models else "") + "--- |",
    ]
    chosen = {c["label"]: rule for rule, c in summary["chosen"].items()}
    for c in summary["candidates"]:
        mark = ""
        if c["label"] in chosen:
            at_edge = [edge.short for edge in edges if edge.rule == chosen[c["label"]]]
            mark = "yes" + (f", {', '.join(at_edge)} (grid edge)" if at_edge else "")
        lines.append(
            f"| {c['label']} | {100 * c['mean']:.2f} | {100 * c['worst10']:.2f} | "
            + (f"{c.get('models', 'global')} | " if models else "")
            + f"{mark} |"
        )
    return "\n".join(lines) + "\n"


def summary_edges(summary: Mapping[str, Any]) -> list[GridEdge]:
    """The grid edges of a ``tuning.json`` summary (its rules, grid and choices)."""
    chosen = summary["chosen"]
    return grid_edges(list(chosen), summary["grid"], {r: c["overrides"] for r, c in chosen.items()})


def write_tuning_markdown(folder: Path) -> Path:
    """Rewrite ``tuning.md`` of a tuned comparison from its ``tuning.json``, running nothing.

    Raises
    ------
    ValueError
        If the folder has no ``tuning.json``.
    """
    path = folder / TUNING_JSON
    if not path.is_file():
        raise ValueError(f"{path}: no such file (not a `fairfl compare --tune` folder)")
    summary = json.loads(path.read_text(encoding="utf-8"))
    out = folder / TUNING_MD
    out.write_text(_tuning_markdown(summary), encoding="utf-8")
    return out


def tune_and_compare(
    *,
    rules: Sequence[str],
    out_dir: Path,
    seeds: Sequence[int],
    tuning_seeds: Sequence[int],
    tune_grid: Sequence[str] | None = None,
    settings: Sequence[str] = (),
    criterion: str = DEFAULT_CRITERION,
    tolerance: float = DEFAULT_TOLERANCE,
    validation_fraction: float = DEFAULT_VALIDATION_FRACTION,
    baseline_rule: str = "fedavg",
    weights_rule: str | None = None,
    title: str | None = None,
    description: str = "",
    command: str = "",
    **compare_options: Any,
) -> Any:
    """Tune every rule on validation splits, then report the chosen settings on test.

    Parameters
    ----------
    rules : Sequence[str]
        Registered rule names.
    out_dir : Path
        Output folder: the reported comparison, ``tuning/`` (the tuning runs),
        ``tuning.json`` and ``tuning.md``.
    seeds, tuning_seeds : Sequence[int]
        Seeds of the reported runs and of the tuning runs; they must be disjoint.
    tune_grid : Sequence[str] | None
        ``--tune-grid`` items (:func:`tuning_grid`); None: the papers' grids.
    settings : Sequence[str]
        ``--set`` items of every run (tuning and reported).
    criterion, tolerance : str, float
        :func:`select_setting`.
    validation_fraction : float
        Share of each client's training split held out for validation while tuning.
    baseline_rule, weights_rule : str, str | None
        Rule whose setting is Table 2's baseline (and the criterion's reference), and
        whose weights are plotted.
    title, description, command
        As :func:`fairfl.sweep.compare.compare`; the description gets the tuning
        summary appended.
    **compare_options
        Passed to both :func:`fairfl.sweep.compare.compare` calls (``workers``,
        ``keep_models``, ``compress_runs``, ``overwrite``, ``reference``, ...).

    Raises
    ------
    ValueError
        If the seeds overlap, the criterion or tolerance is invalid,
        ``validation_fraction`` is not in (0, 1), or ``settings`` set
        ``validation-fraction`` or ``evaluate-split`` (before anything runs).
    """
    overlap = sorted(set(seeds) & set(tuning_seeds))
    if overlap:
        raise ValueError(
            f"tuning seeds must differ from the reported seeds (fresh seeds), both have {overlap}"
        )
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA}, got {criterion!r}")
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0 points, got {tolerance!r}")
    if not 0 < validation_fraction < 1:
        raise ValueError(f"validation fraction must be in (0, 1), got {validation_fraction!r}")
    rules = list(dict.fromkeys(rules))
    if criterion == "worst10-near-baseline" and baseline_rule not in rules:
        raise ValueError(
            f"criterion {criterion} compares with {baseline_rule}: add it to the rules"
        )
    base, rule_settings = split_settings(settings)
    own = sorted(
        {"validation-fraction", "evaluate-split"} & {*base, *(a.key for a in rule_settings)}
    )
    if own:
        raise ValueError(
            f"{own} are set by the tuning (validation while tuning, test when reporting); "
            "use --validation-fraction instead of --set"
        )
    rounds = int(base.get("num-server-rounds", shared_keys()["num-server-rounds"]))
    grid = tuning_grid(rules, tune_grid, rounds)
    tuning_settings = [
        *settings,
        f"validation-fraction={validation_fraction!r}",
        "evaluate-split=validation",
    ]
    started = time.perf_counter()
    compare(
        rules=rules,
        out_dir=out_dir / TUNING_DIR,
        seeds=tuning_seeds,
        grid=grid,
        settings=tuning_settings,
        baseline=None,
        title=f"{title or out_dir.resolve().name}: tuning runs (accuracies on validation)",
        description=(
            "Tuning phase of a tuned comparison: every grid setting on the tuning seeds, "
            "each client holding out a validation split of its training data; every "
            "accuracy in this report is on the validation split (no test data is read)."
        ),
        command=command,
        **compare_options,
    )
    tuning_wall = time.perf_counter() - started
    candidates = candidates_from_folder(out_dir / TUNING_DIR)
    chosen, baseline_mean = choose_settings(
        candidates, criterion=criterion, tolerance=tolerance, baseline_rule=baseline_rule
    )
    warn_grid_edges(rules, grid, {rule: c.overrides for rule, c in chosen.items()})
    final_grid = [
        f"{rule}:{key}={_grid_value(chosen[rule].overrides[key])}"
        for rule, key in _grid_axes(rules, grid)
    ]
    final_labels = {
        v.rule: v.label
        for v in expand_variants(
            rules, [parse_assignment(g, multi=True) for g in final_grid], rule_settings
        )
    }
    summary_text = (
        f"Tuned: each rule's setting chosen on validation splits ({validation_fraction:g} of "
        f"each client's training data) over tuning seeds {list(tuning_seeds)} by criterion "
        f"`{criterion}` (tolerance {tolerance:g} points), then run on the fresh seeds "
        f"{list(seeds)} and reported on test. Grid: "
        + (", ".join(f"`{g}`" for g in grid) or "none")
        + f". Tuning wall time {tuning_wall:.0f} s; every setting's validation numbers: "
        f"[{TUNING_MD}]({TUNING_MD}), runs under `{TUNING_DIR}/`."
    )
    final_started = time.perf_counter()
    report = compare(
        rules=rules,
        out_dir=out_dir,
        seeds=seeds,
        grid=final_grid,
        settings=settings,
        baseline=final_labels.get(baseline_rule),
        weights_label=final_labels.get(weights_rule) if weights_rule else None,
        title=title,
        description=(description + "\n\n" if description else "") + summary_text,
        command=command,
        **compare_options,
    )
    final_wall = time.perf_counter() - final_started
    summary = {
        "criterion": criterion,
        "tolerance": tolerance,
        "baseline_rule": baseline_rule,
        "baseline_mean": baseline_mean,
        "validation_fraction": validation_fraction,
        "tuning_seeds": list(tuning_seeds),
        "seeds": list(seeds),
        "grid": grid,
        "final_grid": final_grid,
        "candidates": [dataclasses.asdict(c) for c in candidates],
        "chosen": {rule: dataclasses.asdict(c) for rule, c in chosen.items()},
        "wall_time_s": {
            "tuning": round(tuning_wall, 1),
            "final": round(final_wall, 1),
            "total": round(tuning_wall + final_wall, 1),
        },
        "command": command,
    }
    (out_dir / TUNING_JSON).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    (out_dir / TUNING_MD).write_text(_tuning_markdown(summary), encoding="utf-8")
    manifest = read_manifest(out_dir) or {}
    manifest["tuning"] = {k: v for k, v in summary.items() if k != "candidates"}
    write_manifest(out_dir, manifest)
    return report


def _rule_axes(rules: Sequence[str], grid: Sequence[str]) -> list[tuple[str, Assignment]]:
    """Each grid axis with each rule it applies to, in expansion order (``expand_variants``)."""
    shared = shared_keys()
    axes: list[tuple[str, Assignment]] = []
    for item in grid:
        axis = parse_assignment(item, multi=True)
        if axis.rule is not None:
            targets = [axis.rule] if axis.rule in rules else []
        elif axis.key in shared:
            targets = list(rules)
        else:
            targets = [r for r in rules if axis.key in STRATEGIES[r].parameters]
        axes += [(rule, axis) for rule in targets]
    return sorted(axes, key=lambda pair: list(rules).index(pair[0]))


def _grid_axes(rules: Sequence[str], grid: Sequence[str]) -> list[tuple[str, str]]:
    """The (rule, key) grid axes of ``grid`` in expansion order (as ``expand_variants``)."""
    return [(rule, axis.key) for rule, axis in _rule_axes(rules, grid)]
