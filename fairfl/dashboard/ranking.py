"""Runs and rules side by side: ranked headlines, seeds grouped by rule, the page's address.

Pure functions of :class:`~fairfl.dashboard.follow.RunFollower` data, so the page and
its tests read the same numbers (accuracies as fractions in [0, 1]).

- :func:`group_runs` -- the runs of each rule variant (a rule and its keys), seeds
  together (``"afl seed 0"``, ``"afl seed 1"`` -> ``"afl"``).
- :func:`rule_rows` -- each variant's headline, the mean over its seeds of each run's
  latest-round mean, worst 10 %, std and Jain's index, ranked by worst 10 %.
- :func:`compare_rules` -- each client's accuracy under two variants, the mean over each
  variant's seeds, for the who-gains-who-loses view; :func:`default_baseline` and
  :func:`default_other` pick what the view opens on.
- :func:`parse_choices` and :func:`choices_search` -- the run, baseline and compared
  variant in the page's query string, so a reloaded or shared address shows the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import parse_qs, urlencode

import numpy as np

from fairfl.dashboard.answers import ClientComparison, Headline, headline, latest_accuracy
from fairfl.dashboard.facts import aggregation_mode, epsilon
from fairfl.dashboard.follow import RunFollower
from fairfl.dashboard.labels import variant_of

#: The rule a baseline is when a comparison names none.
BASELINE_RULE = "fedavg"
#: The page's choices its address carries: query key -> what it chooses.
URL_KEYS = {
    "run": "the run of the per-run views",
    "baseline": "the baseline (A) of who gains, who loses",
    "compare": "the variant compared with it (B)",
}


def group_runs(names: Sequence[str]) -> dict[str, list[str]]:
    """The run names of each rule variant (:func:`~fairfl.dashboard.labels.variant_of`).

    Variants and their runs keep the order of ``names``.
    """
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(variant_of(name), []).append(name)
    return groups


@dataclass(frozen=True)
class RuleRow:
    """One rule variant at a glance: the mean over its seeds of each run's headline.

    Parameters
    ----------
    name : str
        The variant (a rule and the keys set), or the run's name when it has one run.
    members : tuple[Headline, ...]
        The headline of each of its runs that evaluated a client (its seeds).
    mean, worst_10, std, jain : float
        Means over ``members`` of their latest round's mean accuracy, worst 10 %,
        population std (fractions) and Jain's index.
    epsilon : float | None
        The largest ε of its runs under central differential privacy (None: no DP).
    secure : str | None
        Its runs' ``secure-aggregation`` mode when any aggregated securely.
    """

    name: str
    members: tuple[Headline, ...]
    mean: float
    worst_10: float
    std: float
    jain: float
    epsilon: float | None = None
    secure: str | None = None

    @property
    def seeds(self) -> int:
        """How many runs (seeds) the row averages."""
        return len(self.members)


def _row(name: str, runs: Sequence[RunFollower]) -> RuleRow | None:
    heads = [h for h in map(headline, runs) if h is not None]
    if not heads:
        return None
    found = [e[0] for e in map(epsilon, runs) if e is not None]
    modes = {aggregation_mode(run) for run in runs} - {"none"}
    return RuleRow(
        name=name,
        members=tuple(heads),
        mean=float(np.mean([h.mean for h in heads])),
        worst_10=float(np.mean([h.worst_10 for h in heads])),
        std=float(np.mean([h.std for h in heads])),
        jain=float(np.mean([h.jain for h in heads])),
        epsilon=max(found) if found else None,
        secure=", ".join(sorted(modes)) or None,
    )


def rule_rows(runs: Mapping[str, RunFollower]) -> list[RuleRow]:
    """Every rule variant with an evaluated run, best worst 10 % first.

    Ties go to the higher mean, then to the name. A variant's numbers are means over
    its seeds; a run with no evaluated client yet is left out of them.
    """
    rows = []
    for name, members in group_runs(list(runs)).items():
        row = _row(name, [runs[m] for m in members])
        if row is not None:
            rows.append(row)
    return sorted(rows, key=lambda r: (-r.worst_10, -r.mean, r.name))


def default_baseline(groups: Sequence[str], named: str | None = None) -> str | None:
    """The baseline the who-gains view opens on.

    The comparison's own baseline (``manifest.json``'s ``baseline``) when it is one of
    ``groups``; else FedAvg's variant (``fedavg`` as a comparison names it, ``FedAvg``
    as a run's ``summary.json`` does, either with ``(...)`` keys set); else the first
    variant; None without any.
    """
    if named in groups:
        return named
    for group in groups:
        if group.lower() == BASELINE_RULE or group.lower().startswith(f"{BASELINE_RULE} ("):
            return group
    return groups[0] if groups else None


def default_other(rows: Sequence[RuleRow], baseline: str | None) -> str | None:
    """The variant compared with the baseline first: the best-ranked other one."""
    return next((row.name for row in rows if row.name != baseline), None)


def seed_mean_accuracy(runs: Sequence[RunFollower]) -> dict[int, float]:
    """Each client's latest accuracy, the mean over ``runs`` (clients every run evaluated)."""
    latest = [latest_accuracy(run) for run in runs]
    if not latest:
        return {}
    common = set(latest[0]).intersection(*latest[1:])
    return {key: float(np.mean([one[key] for one in latest])) for key in sorted(common)}


def compare_rules(
    name_a: str, runs_a: Sequence[RunFollower], name_b: str, runs_b: Sequence[RunFollower]
) -> ClientComparison:
    """Each client's accuracy under variant A against variant B, each a mean over its seeds.

    A client key is a partition id: in a comparison, runs of one seed share data and
    partitions, so seed ``s`` of A and seed ``s`` of B see the same client. Clients not
    evaluated by every run of both variants are left out.
    """
    a, b = seed_mean_accuracy(runs_a), seed_mean_accuracy(runs_b)
    clients = np.array(sorted(a.keys() & b.keys()), dtype=np.int64)

    def named(name: str, count: int) -> str:
        return f"{name} (mean of {count} seeds)" if count > 1 else name

    return ClientComparison(
        run_a=named(name_a, len(runs_a)),
        run_b=named(name_b, len(runs_b)),
        clients=clients,
        accuracy_a=np.array([a[c] for c in clients.tolist()], dtype=np.float64),
        accuracy_b=np.array([b[c] for c in clients.tolist()], dtype=np.float64),
    )


def parse_choices(search: str | None) -> dict[str, str]:
    """The choices of :data:`URL_KEYS` in a query string (``?run=...&baseline=...``).

    Unknown keys and empty values are ignored; a key given twice counts once (the first).
    """
    parsed = parse_qs((search or "").removeprefix("?"))
    return {key: values[0] for key, values in parsed.items() if key in URL_KEYS and values}


def choices_search(choices: Mapping[str, str | None]) -> str:
    """The query string of the choices made (``""`` when none), keys in :data:`URL_KEYS` order."""
    kept = {key: choices[key] for key in URL_KEYS if choices.get(key)}
    return f"?{urlencode(kept)}" if kept else ""
