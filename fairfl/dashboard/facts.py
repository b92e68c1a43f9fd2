"""A run's facts as the page's tables: how it aggregated, its privacy, its source, its config.

:func:`run_facts` makes the "Config and hardware" tables; :func:`standing` the line of the
participation view that puts ε (central differential privacy, :mod:`fairfl.privacy`),
secure aggregation and the source revision next to the run's accuracy and fairness.
Everything is read from ``summary.json`` (its ``environment``, ``privacy`` and ``config``)
and the ``rounds.jsonl`` lines (each released round's ``dp-epsilon`` and ``dp-delta``
diagnostics), so a run still going shows what it has so far.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from typing import Any

from fairfl.dashboard.follow import RunFollower
from fairfl.metrics import PERCENT


def secure_aggregation_fact(mode: str) -> str:
    """How a run aggregated, for its facts: in the clear, or securely (``secure-aggregation``)."""
    if mode == "none":
        return "in the clear: the server read each client's update"
    return f"secure ({mode}): the server read only the sum of the clients' updates"


def run_facts(run: RunFollower, manifest: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Tables for the page: the run, its config, the rule's settings, hardware/device.

    The hardware section holds what the results files recorded (a comparison's engine,
    workers, torch threads and CPU count; any ``hardware``/``device``/``environment``
    key of ``summary.json``), then the host serving the page, marked as such.
    """
    summary = run.summary or {}
    last = run.rounds[-1] if run.rounds else None
    facts: dict[str, Any] = {
        "folder": str(run.path),
        "status": run.status + (f": {run.error}" if run.error else ""),
        "rounds received": len(run.rounds),
        "last round": last.round if last else "-",
        "planned rounds": run.config.get("num-server-rounds", "-"),
        "rule": summary.get("strategy") or run.config.get("strategy", "-"),
        # Issue #48: whether the server read each client's update or only their sum.
        "aggregation": secure_aggregation_fact(aggregation_mode(run)),
        "differential privacy": privacy_fact(run),
        "source revision": revision_fact(run),
    }
    if last is not None and last.wall_time is not None:
        facts["wall time (s)"] = round(last.wall_time, 1)
    if summary.get("wall_time") is not None:
        facts["wall time (s)"] = round(float(summary["wall_time"]), 1)
    silenced = summary.get("silenced_clients")
    if isinstance(silenced, Mapping) and silenced:  # never heard: say so on the first screen
        facts["clients at weight 0 all run (rounds)"] = ", ".join(
            f"{key} ({rounds})" for key, rounds in silenced.items()
        )
    failed = summary.get("failed_rounds")
    if isinstance(failed, Mapping) and failed:
        facts["failed rounds"] = ", ".join(map(str, failed))
    hardware: dict[str, Any] = {}
    for key in ("engine", "workers", "torch_threads", "cpu_count"):
        if manifest and key in manifest:
            hardware[f"comparison {key.replace('_', ' ')}"] = manifest[key]
    for key in ("hardware", "device", "environment", "host"):
        value = summary.get(key)
        if isinstance(value, Mapping):
            hardware.update({f"{key} {k}": v for k, v in value.items()})
        elif value is not None:
            hardware[key] = value
    if "device" in run.config:
        hardware["client device (run config)"] = run.config["device"]
    hardware["dashboard host"] = f"{platform.node()} ({platform.system()} {platform.machine()})"
    hardware["dashboard host python"] = platform.python_version()
    return {
        "Run": facts,
        "Run config": run.config,
        "Rule settings": dict(summary.get("strategy_settings") or {}),
        "Hardware / device": hardware,
    }


def revision_fact(run: RunFollower) -> str:
    """The source revision the run ran from (``summary.json``'s ``environment.revision``).

    A commit with ``(tracked files modified)`` when the checkout had edits; the installed
    fairfl version when it was not a git checkout; "unknown" until ``summary.json`` is
    written.
    """
    environment = (run.summary or {}).get("environment")
    if not isinstance(environment, Mapping):
        return "unknown (no summary.json with an environment yet)"
    revision = environment.get("revision")
    if isinstance(revision, Mapping) and revision.get("commit"):
        edited = " (tracked files modified)" if revision.get("modified") else ""
        return f"{revision['commit']}{edited}"
    versions = environment.get("versions")
    version = versions.get("fairfl") if isinstance(versions, Mapping) else None
    return f"no git checkout: installed fairfl {version or '(version unknown)'}"


def epsilon(run: RunFollower) -> tuple[float, float, int | None] | None:
    """ε, δ and the round they hold after, of a run with central DP; None without DP.

    ``summary.json``'s ``privacy`` (the final ε at δ) once written, else the latest
    round whose record holds ``dp-epsilon`` (the account so far).
    """
    privacy = (run.summary or {}).get("privacy")
    if isinstance(privacy, Mapping) and isinstance(privacy.get("epsilon"), int | float):
        last = run.rounds[-1].round if run.rounds else None
        return float(privacy["epsilon"]), float(privacy.get("delta") or 0.0), last
    for entry in reversed(run.rounds):
        value = entry.scalars.get("dp-epsilon")
        if isinstance(value, float):
            delta = entry.scalars.get("dp-delta")
            return value, float(delta) if isinstance(delta, float) else 0.0, entry.round
    return None


def privacy_fact(run: RunFollower) -> str:
    """``ε = 2.31 at δ = 1e-05 (central DP, after round 30)``, or ``none`` without DP."""
    found = epsilon(run)
    if found is None:
        return "none (no differential privacy)"
    value, delta, after = found
    when = f", after round {after}" if after is not None else ""
    return f"ε = {value:.3g} at δ = {delta:.3g} (central DP{when})"


def standing(
    run: RunFollower, worst_10: float | None, mean: float | None, jain: float | None
) -> dict[str, str]:
    """The participation view's line: accuracy and fairness, ε, aggregation, revision.

    ``worst_10``, ``mean`` (fractions) and ``jain`` are the run's latest headline (None
    before a client is evaluated).
    """

    def percent(value: float | None) -> str:
        return "-" if value is None else f"{value * PERCENT:.1f} %"

    return {
        "mean accuracy": percent(mean),
        "worst 10 %": percent(worst_10),
        "Jain's index": "-" if jain is None else f"{jain:.3f}",
        "differential privacy": privacy_fact(run),
        "aggregation": secure_aggregation_fact(aggregation_mode(run)),
        "source revision": revision_fact(run),
    }


def aggregation_mode(run: RunFollower) -> str:
    """The run's ``secure-aggregation`` setting (``none`` when it has none)."""
    return str(run.config.get("secure-aggregation", "none"))
