"""The dashboard page's callbacks: a cheap poll on every tick, and the drawing of a view.

:func:`_register_callbacks` adds both to a Dash app. The draw callback builds only the
parts (:data:`_PARTS`) of the open view whose inputs changed since they were last sent
(:func:`_part_keys`); :func:`_build` makes one part's outputs from the followed runs.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import dash
from dash import Dash, Input, Output, State
from dash.exceptions import PreventUpdate

from fairfl.dashboard import answers, facts, figures, ranking
from fairfl.dashboard.follow import Registry, RunFollower
from fairfl.dashboard.layout import (
    _comparison,
    _drops_table,
    _head,
    _headline,
    _overview,
    _standing,
    _table,
)

#: What the poll callback writes when the runs on disk changed.
_POLL_OUTPUTS = (
    ("version", "data"),
    ("sources", "children"),
    ("notes", "children"),
    ("run", "options"),
    ("run", "value"),
)

#: The parts the draw callback builds: their outputs and the view that shows them
#: (None: always shown). A part is built only while its view is open, and only when
#: what it depends on (its key, see :func:`_part_keys`) changed since it was last sent.
_PARTS: dict[str, tuple[str | None, tuple[tuple[str, str], ...]]] = {
    "count": (None, (("round-count", "children"),)),
    "headline": (None, (("headline", "children"),)),
    "overview": (None, (("ranking", "children"), ("tradeoff", "figure"))),
    "comparison": (
        None,
        (
            ("comparison", "figure"),
            ("gainers", "children"),
            ("baseline", "options"),
            ("baseline", "value"),
            ("compare-with", "options"),
            ("compare-with", "value"),
        ),
    ),
    "metrics": ("fairness", (("metrics", "figure"),)),
    "heatmap": ("fairness", (("client-heatmap", "figure"),)),
    "distribution": ("fairness", (("distribution", "figure"),)),
    "rule": (
        "rule",
        (
            ("weights", "figure"),
            ("diagnostics", "figure"),
            ("per-client-key", "options"),
            ("per-client-key", "value"),
        ),
    ),
    "per-client": ("rule", (("per-client", "figure"),)),
    "participation": (
        "participation",
        (("standing", "children"), ("participation", "figure"), ("drops", "children")),
    ),
    "facts": ("facts", (("facts", "children"),)),
}


def _part_keys(
    version: int,
    name: str | None,
    run: RunFollower | None,
    sort: str,
    key: str | None,
    pair: tuple[str | None, str | None],
    seeds: bool,
) -> dict[str, list[Any]]:
    """What each part of :data:`_PARTS` depends on; a part whose key is unchanged is kept."""
    of_run = [name, run.version if run is not None else None]
    return {
        "count": of_run,
        "headline": of_run,
        "overview": [version],
        "comparison": [version, *pair],
        "metrics": [version, seeds],
        "heatmap": [*of_run, sort],
        "distribution": of_run,
        "rule": of_run,
        "per-client": [*of_run, key],
        "participation": of_run,
        "facts": of_run,
    }


def _register_callbacks(app: Dash, registry: Registry) -> None:
    """Two callbacks: a cheap poll on every tick, and the drawing of the open view.

    The page arrives with what was on disk when it was asked for (:func:`_layout`), so
    ``draw`` starts at once. ``poll`` runs on each tick of the interval and answers only
    when something changed on disk (a new version), with the page's head. ``draw`` runs
    when the version, the run, the view, the row order or the per-client diagnostic
    changes, and builds only the parts of the open view that are out of date
    (``dash.no_update`` for the others): a page load builds and draws the first view
    alone, and a tick with nothing new costs one small request. Ticks never cancel a
    ``draw`` on its way (Dash keeps only a callback's newest answer): they trigger
    ``poll`` only.
    """

    @app.callback(
        *[Output(i, p) for i, p in _POLL_OUTPUTS],
        Input("tick", "n_intervals"),
        State("version", "data"),
        State("run", "value"),
        prevent_initial_call=True,
    )
    def poll(ticks: int | None, seen: int | None, selected: str | None) -> tuple[Any, ...]:
        head = _head(registry, selected)
        if head[0] == seen:
            raise PreventUpdate
        return head

    @app.callback(
        *[Output(i, p) for _, outputs in _PARTS.values() for i, p in outputs],
        Output("shown", "data"),
        Output("run", "value", allow_duplicate=True),
        Input("version", "data"),
        Input("run", "value"),
        Input("view", "value"),
        Input("sort", "value"),
        Input("per-client-key", "value"),
        Input("baseline", "value"),
        Input("compare-with", "value"),
        Input("seeds", "value"),
        State("shown", "data"),
        State("url", "search"),
        prevent_initial_call="initial_duplicate",  # draw at once; poll also sets the run
    )
    def draw(
        version: int,
        selected: str | None,
        view: str,
        sort: str,
        key: str | None,
        baseline: str | None,
        other: str | None,
        seeds: list[str] | None,
        shown: dict[str, list[Any]] | None,
        search: str | None,
    ) -> tuple[Any, ...]:
        runs = registry.runs()
        picked: Any = dash.no_update
        if dash.ctx.triggered_id is None:  # first load: the address's choices (ranking)
            asked = ranking.parse_choices(search)
            if asked.get("run") in runs and asked["run"] != selected:
                selected = picked = asked["run"]
            baseline = asked.get("baseline", baseline)
            other = asked.get("compare", other)
        run = runs.get(selected) if selected else None
        if run is not None:
            _, names = figures.diagnostic_names(run)
            key = key if key in names else (names[0] if names else None)
        pair = _pair(registry, runs, baseline, other)
        each_seed = "seeds" in (seeds or [])
        keys = _part_keys(version, selected, run, sort, key, pair, each_seed)
        choices = _Choices(sort, key, pair, each_seed)
        shown = dict(shown or {})
        values: list[Any] = []
        for part, (part_view, outputs) in _PARTS.items():
            built = None
            if part_view in (None, view) and shown.get(part) != keys[part]:
                built = _build(part, registry, runs, run, choices)
            if built is None:
                values.extend([dash.no_update] * len(outputs))
            else:
                values.extend(built)
                shown[part] = keys[part]
        if all(value is dash.no_update for value in (*values, picked)):
            raise PreventUpdate
        return (*values, shown, picked)

    @app.callback(
        Output("url", "search"),
        Output("address", "children"),
        Input("run", "value"),
        Input("baseline", "value"),
        Input("compare-with", "value"),
        State("url", "search"),
        prevent_initial_call=True,  # the first draw reads the address before it is written
    )
    def address(
        run: str | None, baseline: str | None, other: str | None, search: str | None
    ) -> tuple[Any, str]:
        """The choices in the address (``?run=...&baseline=...&compare=...``), no reload.

        The page also says the address, so that it can be copied from a screenshot too.
        """
        wanted = ranking.choices_search({"run": run, "baseline": baseline, "compare": other})
        written = dash.no_update if wanted == (search or "") else wanted
        return written, f"this view's address (reload or share it): {wanted or '/'}"


def _pair(
    registry: Registry, runs: dict[str, RunFollower], baseline: str | None, other: str | None
) -> tuple[str | None, str | None]:
    """The baseline and the variant compared with it: as chosen while they exist.

    Otherwise the comparison's baseline (FedAvg when it names none,
    :func:`~fairfl.dashboard.ranking.default_baseline`) and the best-ranked other variant.
    """
    groups = list(ranking.group_runs(list(runs)))
    if baseline not in groups:
        named = next((s.manifest.get("baseline") for s in registry.sources if s.manifest), None)
        baseline = ranking.default_baseline(groups, named if isinstance(named, str) else None)
    if other not in groups or other == baseline:
        other = ranking.default_other(ranking.rule_rows(runs), baseline)
    return baseline, other


class _Choices(NamedTuple):
    """What the user chose on the page besides the run and the view."""

    sort: str
    key: str | None
    pair: tuple[str | None, str | None]
    seeds: bool


def _build(
    part: str,
    registry: Registry,
    runs: dict[str, RunFollower],
    run: RunFollower | None,
    choices: _Choices,
) -> tuple[Any, ...] | None:
    """The outputs of one part of :data:`_PARTS`; None when it needs a run and has none."""
    if part == "overview":
        return _overview(runs)
    if part == "comparison":
        return _comparison(runs, *choices.pair)
    if part == "metrics":
        return (figures.metrics_figure(runs, seeds=choices.seeds),)
    if run is None:
        return None
    if part == "count":
        return (f"rounds received: {len(run.rounds)} · status: {run.status}",)
    if part == "headline":
        return (_headline(answers.headline(run)),)
    if part == "heatmap":
        return (figures.client_heatmap(run, choices.sort),)  # type: ignore[arg-type]
    if part == "distribution":
        return (figures.distribution_figure(run),)
    if part == "rule":
        _, names = figures.diagnostic_names(run)
        return (
            figures.weights_heatmap(run),
            figures.diagnostics_figure(run),
            [{"label": figures.DIAGNOSTIC_TITLES.get(k, k), "value": k} for k in names],
            choices.key,
        )
    if part == "per-client":
        return (figures.per_client_figure(run, choices.key),)
    if part == "participation":
        return (_standing(run), figures.participation_figure(run), _drops_table(run))
    if part == "facts":
        manifest = next((s.manifest for s in registry.sources if run in s.runs.values()), None)
        return ([_table(title, rows) for title, rows in facts.run_facts(run, manifest).items()],)
    raise ValueError(f"unknown part {part!r}")
