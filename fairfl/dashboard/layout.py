"""The dashboard page's layout: the views, and the HTML pieces its callbacks fill in.

:func:`_layout` is the whole page: first the comparison of every run (the ranked table
and the trade-off scatter side by side, in the first screen of a 1280 x 800 window),
then who gains and who loses against the baseline, then the run picker, its headline
and the four per-run views as ``dcc.Tabs``. :func:`_head` reads what is on disk now
(runs, their states, notes on skipped lines) for the page and the poll; the rest build
the tables and cards the draw callback sends (the ranked table, the headline numbers,
the per-client comparison, the run's standing, dropped replies).
"""

from __future__ import annotations

import time
from typing import Any

from dash import dcc, html

from fairfl.dashboard import answers, comparison, facts, figures, ranking
from fairfl.dashboard.follow import COMPLETED, FAILED, RUNNING, WAITING, Registry, RunFollower
from fairfl.dashboard.plotting import empty_figure

_SECTION = {"marginTop": "28px", "marginBottom": "6px", "fontSize": "18px"}
_TOP = {"margin": "4px 0", "fontSize": "16px"}
_MUTED = {"color": "#57606a", "marginTop": "8px"}
_PICK = {"display": "flex", "alignItems": "center", "gap": "8px", "fontSize": "14px"}
_HEADLINE = {"display": "flex", "gap": "14px", "flexWrap": "wrap", "margin": "8px 0"}
_CARD = {"border": "1px solid #d0d7de", "borderRadius": "6px", "padding": "6px 12px"}
_NOTE = {"color": "#9a3412", "fontFamily": "monospace", "fontSize": "12px"}


def _table(title: str, rows: dict[str, Any]) -> html.Div:
    return html.Div(
        [
            html.H4(title, style={"margin": "6px 0"}),
            html.Table(
                [html.Tr([html.Td(str(k)), html.Td(str(v))]) for k, v in rows.items()]
                or [html.Tr(html.Td("(none recorded)"))],
                style={"fontSize": "12px", "fontFamily": "monospace"},
            ),
        ],
        style={"flex": "1 1 300px", "minWidth": "280px"},
    )


def _status_line(registry: Registry, runs: dict[str, RunFollower]) -> list[Any]:
    lines: list[Any] = []
    for source in registry.sources:
        followers = list(source.runs.values())
        counts = {
            state: sum(f.status == state for f in followers)
            for state in (RUNNING, COMPLETED, FAILED, WAITING)
        }
        if source.kind == WAITING:
            text = f"{source.path}: waiting for the folder to appear"
        elif not followers:
            text = f"{source.path}: no run yet (waiting for rounds.jsonl)"
        else:
            states = ", ".join(f"{n} {state}" for state, n in counts.items() if n)
            text = f"{source.path} ({source.kind}): {len(followers)} runs: {states}"
        lines.append(html.Div(text, className="source-status"))
    finished = sum(f.status in (COMPLETED, FAILED) for f in runs.values())
    lines.append(html.Div(f"{finished} of {len(runs)} runs finished", id="finished-count"))
    return lines


def _notes(runs: dict[str, RunFollower], limit: int = 20) -> list[Any]:
    notes = [note for run in runs.values() for note in run.all_notes()]
    if not notes:
        return []
    shown = [html.Div(note.text(), style=_NOTE) for note in notes[-limit:]]
    head = html.Div(
        f"{len(notes)} line(s) of rounds.jsonl not shown"
        + (f" (the last {limit} listed)" if len(notes) > limit else ""),
        style={**_NOTE, "fontWeight": "bold"},
    )
    return [head, *shown]


def _head(registry: Registry, selected: str | None) -> tuple[Any, ...]:
    """What the poll writes (:data:`_POLL_OUTPUTS`), from what is on disk now.

    ``selected`` stays the run shown while it exists; otherwise the first run with
    rounds (or the first run) is.
    """
    version = registry.refresh(time.monotonic())
    runs = registry.runs()
    if selected not in runs:
        with_rounds = [name for name, run in runs.items() if run.rounds]
        selected = with_rounds[0] if with_rounds else next(iter(runs), None)
    options = [{"label": f"{n} ({run.status})", "value": n} for n, run in runs.items()]
    return version, _status_line(registry, runs), _notes(runs), options, selected


def _layout(interval_s: float, head: tuple[Any, ...]) -> html.Div:
    """The page, with :func:`_head`'s view of the disk when it is asked for.

    It arrives with the runs already listed and one selected, so its figures are asked
    for at once, without waiting for a first poll.
    """
    version, sources, notes, options, selected = head
    graph: dict[str, Any] = {"config": {"displaylogo": False}}
    tab = {"padding": "6px 14px"}
    return html.Div(
        [
            html.H2("fairfl dashboard", style={"margin": "2px 0", "fontSize": "20px"}),
            html.Div(sources, id="sources", style={"fontSize": "13px"}),
            html.Div(notes, id="notes"),
            dcc.Location(id="url", refresh=False),
            dcc.Interval(id="tick", interval=int(interval_s * 1000)),
            dcc.Store(id="version", data=version),
            dcc.Store(id="shown"),
            html.Div(
                [
                    html.Div(
                        [
                            html.H3(
                                "Runs ranked by worst 10 % (latest round; rules: mean over seeds)",
                                style=_TOP,
                            ),
                            html.Div(id="ranking"),
                        ],
                        style={"flex": "1 1 560px", "minWidth": "480px"},
                    ),
                    html.Div(
                        [
                            html.H3("Trade-off: mean against worst 10 %", style=_TOP),
                            dcc.Graph(id="tradeoff", **graph),
                        ],
                        style={"flex": "1 1 560px", "minWidth": "420px"},
                    ),
                ],
                id="overview",
                style={"display": "flex", "flexWrap": "wrap", "gap": "16px"},
            ),
            html.H3("Who gains, who loses: each client against the baseline", style=_SECTION),
            html.Div(
                [
                    html.Label("baseline (A): ", htmlFor="baseline"),
                    dcc.Dropdown(id="baseline", clearable=False, style={"width": "360px"}),
                    html.Label("compared (B): ", htmlFor="compare-with"),
                    dcc.Dropdown(id="compare-with", clearable=False, style={"width": "360px"}),
                ],
                style=_PICK,
            ),
            html.Div(
                [
                    html.Div(dcc.Graph(id="comparison", **graph), style={"flex": "3 1 500px"}),
                    html.Div(
                        [
                            html.Div(id="gainers"),
                            html.Div(id="address", style={"fontSize": "12px", **_MUTED}),
                        ],
                        style={"flex": "2 1 300px"},
                    ),
                ],
                style={"display": "flex", "flexWrap": "wrap"},
            ),
            html.Div(
                [
                    html.Label("Run: ", htmlFor="run"),
                    dcc.Dropdown(
                        id="run",
                        options=options,
                        value=selected,
                        clearable=False,
                        style={"width": "420px"},
                    ),
                    html.Span(id="round-count", style={"marginLeft": "16px", "fontSize": "14px"}),
                ],
                style={"display": "flex", "alignItems": "center", "gap": "8px", **_SECTION},
            ),
            html.Div(id="headline", style=_HEADLINE),
            dcc.Tabs(
                id="view",
                value=VIEWS[0],
                children=[
                    dcc.Tab(
                        label="Fairness and clients",
                        value="fairness",
                        id="tab-fairness",
                        style=tab,
                        selected_style=tab,
                        children=[
                            html.H3("Per-client accuracy (%) over rounds", style=_SECTION),
                            dcc.RadioItems(
                                id="sort",
                                options=[
                                    {"label": f"sort by {t}", "value": v}
                                    for v, t in figures.SORTS.items()
                                ],
                                value="final",
                                inline=True,
                                inputStyle={"marginLeft": "12px", "marginRight": "4px"},
                            ),
                            html.Div(
                                [
                                    html.Div(
                                        dcc.Graph(id="client-heatmap", **graph),
                                        style={"flex": "3 1 500px"},
                                    ),
                                    html.Div(
                                        dcc.Graph(id="distribution", **graph),
                                        style={"flex": "2 1 300px"},
                                    ),
                                ],
                                style={"display": "flex", "flexWrap": "wrap"},
                            ),
                            html.H3(
                                "Fairness per round (client accuracy in %; Jain's index 0-1)",
                                style=_SECTION,
                            ),
                            dcc.Checklist(
                                id="seeds",
                                options=[{"label": " show each seed's own line", "value": "seeds"}],
                                value=[],
                            ),
                            dcc.Graph(id="metrics", **graph),
                        ],
                    ),
                    dcc.Tab(
                        label="Rule state",
                        value="rule",
                        id="tab-rule",
                        style=tab,
                        selected_style=tab,
                        children=[
                            html.H3(
                                "Rule state: aggregation weights λ per client and round",
                                style=_SECTION,
                            ),
                            dcc.Graph(id="weights", **graph),
                            html.H3("Rule diagnostics per round", style=_SECTION),
                            dcc.Graph(id="diagnostics", **graph),
                            html.H3(
                                "Rule state per client (RC-FL's q_i, Equitable FL's clusters)",
                                style=_SECTION,
                            ),
                            dcc.Dropdown(
                                id="per-client-key", clearable=False, style={"width": "420px"}
                            ),
                            dcc.Graph(id="per-client", **graph),
                        ],
                    ),
                    dcc.Tab(
                        label="Participation",
                        value="participation",
                        id="tab-participation",
                        style=tab,
                        selected_style=tab,
                        children=[
                            html.H3(
                                "Participation: sampled, answered and dropped clients",
                                style=_SECTION,
                            ),
                            html.Div(id="standing", style=_HEADLINE),
                            dcc.Graph(id="participation", **graph),
                            html.Div(id="drops"),
                        ],
                    ),
                    dcc.Tab(
                        label="Config and hardware",
                        value="facts",
                        id="tab-facts",
                        style=tab,
                        selected_style=tab,
                        children=[
                            html.Div(
                                id="facts",
                                style={"display": "flex", "flexWrap": "wrap", "gap": "12px"},
                            )
                        ],
                    ),
                ],
            ),
        ],
        style={"fontFamily": "sans-serif", "margin": "12px 20px"},
    )


def _points(fraction: float) -> str:
    return f"{fraction * 100:.1f} %"


def _change(fraction: float, first_round: int) -> html.Span:
    colour = "#1a7f37" if fraction > 0 else "#cf222e" if fraction < 0 else "#57606a"
    return html.Span(
        f" {fraction * 100:+.1f} points since round {first_round}",
        style={"color": colour, "fontSize": "13px"},
    )


def _headline(head: answers.Headline | None) -> list[Any]:
    """The numbers at the top: worst client, worst 10 %, mean, each with its change."""
    if head is None:
        return [html.Span("no client evaluated yet", style={"fontSize": "14px"})]
    cards = [
        (
            "worst client",
            f"client {head.worst_client}: {_points(head.worst_accuracy)}",
            head.change_worst,
        ),
        ("worst 10 %", _points(head.worst_10), head.change_worst_10),
        ("mean", _points(head.mean), head.change_mean),
    ]
    return [
        html.Div(
            [
                html.Div(title, style={"fontSize": "12px", "color": "#57606a"}),
                html.Div(
                    [html.B(value, style={"fontSize": "20px"}), _change(change, head.first_round)]
                ),
            ],
            className="headline-card",
            style=_CARD,
        )
        for title, value, change in cards
    ] + [
        html.Div(
            f"{head.run}: round {head.round}, {head.clients} clients evaluated",
            style={"fontSize": "12px", "alignSelf": "end", "color": "#57606a"},
        )
    ]


def _ranking_table(rows: list[ranking.RuleRow]) -> html.Table:
    """Every rule variant's headline in one table, best worst 10 % first."""
    if not rows:
        return html.Table(html.Tr(html.Td("no run evaluated a client yet")), id="ranked")
    columns = ("#", "rule (keys set)", "seeds", "worst 10 %", "mean", "std", "Jain", "privacy")

    def privacy(row: ranking.RuleRow) -> str:
        parts = [f"ε {row.epsilon:.3g}"] if row.epsilon is not None else []
        return ", ".join(parts + ([f"secure ({row.secure})"] if row.secure else [])) or "-"

    cells = [
        (
            rank,
            row.name,
            row.seeds,
            _points(row.worst_10),
            _points(row.mean),
            f"{row.std * 100:.1f}",
            f"{row.jain:.3f}",
            privacy(row),
        )
        for rank, row in enumerate(rows, start=1)
    ]
    cell = {"padding": "1px 6px", "textAlign": "right", "whiteSpace": "nowrap"}
    return html.Table(
        [
            html.Tr(
                [
                    html.Th(c, style=_wrapped(cell) if i in (1, 7) else cell)
                    for i, c in enumerate(columns)
                ]
            )
        ]
        + [
            html.Tr(
                [
                    html.Td(str(c), style=_wrapped(cell) if i in (1, 7) else cell)
                    for i, c in enumerate(row)
                ]
            )
            for row in cells
        ],
        id="ranked",
        style={"fontSize": "12px", "fontFamily": "monospace", "borderCollapse": "collapse"},
    )


def _wrapped(cell: dict[str, str]) -> dict[str, str]:
    """A ranked-table cell of text (the rule, its privacy): left-aligned, may wrap."""
    return {**cell, "textAlign": "left", "whiteSpace": "normal"}


def _overview(runs: dict[str, RunFollower]) -> tuple[Any, ...]:
    """The ranked table and the trade-off scatter of every run."""
    rows = ranking.rule_rows(runs)
    order = list(ranking.group_runs(list(runs)))
    return (_ranking_table(rows), comparison.tradeoff_figure(rows, order))


def _comparison(
    runs: dict[str, RunFollower], baseline: str | None, other: str | None
) -> tuple[Any, ...]:
    """Who gains and who loses under ``other`` against ``baseline`` (variants), the choices.

    A variant with several seeds is the mean over its seeds of each client's accuracy.
    """
    groups = ranking.group_runs(list(runs))
    options = [
        {"label": f"{name} ({len(members)} seeds)" if len(members) > 1 else name, "value": name}
        for name, members in groups.items()
    ]
    if baseline is None or other is None:
        message = "only one run: nothing to compare" if len(groups) < 2 else "choose two"
        return (empty_figure(message, height=120), html.Div(), options, baseline, options, other)
    compared = ranking.compare_rules(
        baseline, [runs[n] for n in groups[baseline]], other, [runs[n] for n in groups[other]]
    )
    gainers, losers = answers.gainers_and_losers(compared)

    def listing(title: str, items: list[tuple[int, float]], colour: str) -> html.Div:
        return html.Div(
            [
                html.H4(title, style={"margin": "6px 0"}),
                html.Ul(
                    [html.Li(f"client {c}: {g * 100:+.1f} points") for c, g in items]
                    or [html.Li("none")],
                    style={"color": colour, "fontSize": "13px"},
                ),
            ]
        )

    summary = (
        f"{len(compared.clients)} clients: {int((compared.gain > 0).sum())} gain, "
        f"{int((compared.gain < 0).sum())} lose under B = {compared.run_b} against "
        f"A = {compared.run_a}"
    )
    return (
        comparison.comparison_figure(compared),
        html.Div(
            [
                html.Div(summary, id="comparison-summary", style={"fontSize": "13px"}),
                listing("Gain most under B", gainers, "#1a7f37"),
                listing("Lose most under B", losers, "#cf222e"),
            ]
        ),
        options,
        baseline,
        options,
        other,
    )


def _standing(run: RunFollower) -> list[Any]:
    """The run's accuracy and fairness, ε, aggregation and source revision, as cards."""
    head = answers.headline(run)
    found = facts.standing(
        run,
        worst_10=head.worst_10 if head else None,
        mean=head.mean if head else None,
        jain=head.jain if head else None,
    )
    return [
        html.Div(
            [
                html.Div(title, style={"fontSize": "12px", "color": "#57606a"}),
                html.Div(value, style={"fontSize": "14px"}),
            ],
            className="standing-card",
            style=_CARD,
        )
        for title, value in found.items()
    ]


def _drops_table(run: RunFollower) -> html.Div:
    rows = figures.drop_rows(run)
    if not rows:
        return html.Div("no reply dropped", style={"fontSize": "12px"})
    return html.Div(
        [
            html.H4(
                "Dropped replies, silenced clients, skipped and failed rounds (latest 50)",
                style={"margin": "6px 0"},
            ),
            html.Table(
                [html.Tr([html.Th(h) for h in ("round", "phase", "node", "reason")])]
                + [html.Tr([html.Td(str(c)) for c in row]) for row in rows],
                style={"fontSize": "12px", "fontFamily": "monospace"},
            ),
        ]
    )


#: The page's views (``dcc.Tabs`` values), the first shown on load.
VIEWS = ("fairness", "rule", "participation", "facts")
