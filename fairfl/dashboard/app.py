"""The dashboard's web page (Dash), its access check, and a server that can be stopped.

:func:`create_app` builds a Dash app over a :class:`~fairfl.dashboard.follow.Registry`.
The page has four views (``dcc.Tabs``): fairness and clients (opened first), rule state,
participation, config and hardware. A ``dcc.Interval`` asks the server every
``interval_s`` seconds whether anything changed (the server then reads only the new
bytes of each ``rounds.jsonl``); when something did, the open view's figures of
:mod:`fairfl.dashboard.figures` are rebuilt and redrawn, and another view's are built
when it is opened. A page load therefore builds, sends and draws the first view only.

plotly.js comes from ``assets/plotly-cartesian.min.js``: plotly.js's own cartesian
bundle (``plotly.js-cartesian-dist-min`` on npm, MIT licence beside it), which has every
trace the page draws (scatter, bar, histogram, heatmap) in 1.5 MB where the full
``plotly.min.js`` that Plotly ships is 4.8 MB; the browser spends most of a cold page
load evaluating plotly.js. It is used only while its version is the one the installed
Plotly was made for (:func:`cartesian_bundle_matches`); otherwise the page falls back to
Plotly's full bundle, with a warning. To refresh it for a new Plotly::

    v=$(python -c "import plotly.offline as o; print(o.get_plotlyjs_version())")
    npm pack "plotly.js-cartesian-dist-min@$v"

and copy ``package/plotly-cartesian.min.js`` from the archive into ``assets/``.

Access (:func:`install_guard`): bound to loopback (the default, 127.0.0.1) the page
needs no token, but requests whose ``Host`` header is not a loopback name are refused
(403), so a web page elsewhere cannot reach it by DNS rebinding. Bound to any other
address, every request must carry the token: ``?token=...`` once (answered with a
redirect that sets an HttpOnly, SameSite=Strict cookie, and drops the token from the
address), the cookie afterwards, or an ``Authorization: Bearer ...`` header; anything
else gets 401. The page is plain HTTP: use an SSH tunnel (``deploy/README.md``) or a
TLS proxy in front of it, as the token travels in clear otherwise.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs

import dash
from dash import Dash, Input, Output, State, dcc, html
from dash.exceptions import PreventUpdate
from flask import Flask, Response, redirect, request
from plotly.offline import get_plotlyjs_version
from werkzeug.serving import WSGIRequestHandler, make_server
from werkzeug.wrappers import Response as WerkzeugResponse

from fairfl.dashboard import answers, figures
from fairfl.dashboard.follow import COMPLETED, FAILED, RUNNING, WAITING, Registry, RunFollower
from fairfl.telemetry.config import is_loopback

#: Name of the cookie that carries proof of the token after ``?token=``.
COOKIE = "fairfl_dashboard"
#: Host names a loopback-bound dashboard answers to.
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")
#: Default port (Dash's).
DEFAULT_PORT = 8050

#: Files Dash serves under ``/assets/`` (its ``.js`` files load with the page).
ASSETS = Path(__file__).with_name("assets")
#: plotly.js's cartesian bundle (see the module docstring).
CARTESIAN_BUNDLE = ASSETS / "plotly-cartesian.min.js"

logger = logging.getLogger(__name__)

_SECTION = {"marginTop": "28px", "marginBottom": "6px", "fontSize": "18px"}
_HEADLINE = {"display": "flex", "gap": "14px", "flexWrap": "wrap", "margin": "8px 0"}
_CARD = {"border": "1px solid #d0d7de", "borderRadius": "6px", "padding": "6px 12px"}
_NOTE = {"color": "#9a3412", "fontFamily": "monospace", "fontSize": "12px"}


def check_binding(host: str, *, allow_remote: bool, token: str | None) -> None:
    """Refuse a non-loopback ``host`` without ``allow_remote`` and a token.

    Raises
    ------
    ValueError
        Naming the option that is missing.
    """
    if is_loopback(host):
        return
    if not allow_remote:
        raise ValueError(
            f"--host {host} is not a loopback address: pass --allow-remote (with a token) "
            "to serve other machines, or use an SSH tunnel (deploy/README.md)"
        )
    if not token:
        raise ValueError(f"--host {host} with --allow-remote needs a token, got none")


def bundle_version(path: Path) -> str | None:
    """The plotly.js version a bundle names in its licence header (``v4.1.1``), or None."""
    try:
        with path.open("rb") as handle:
            head = handle.read(300).decode("ascii", "replace")
    except OSError:
        return None
    match = re.search(r"\* plotly\.js \([^)]*\) v(\d+\.\d+\.\d+)", head)
    return match.group(1) if match else None


def cartesian_bundle_matches(path: Path = CARTESIAN_BUNDLE) -> bool:
    """Whether ``path`` is the plotly.js version the installed Plotly's figures are for."""
    return bundle_version(path) == get_plotlyjs_version()


def _proof(token: str) -> str:
    return hmac.new(token.encode(), b"fairfl-dashboard-cookie", hashlib.sha256).hexdigest()


def install_guard(server: Flask, *, token: str | None, loopback: bool) -> None:
    """Check every request before Dash sees it (see the module docstring)."""
    proof = _proof(token) if token else None

    @server.before_request
    def _guard() -> WerkzeugResponse | None:
        if loopback and request.host.rsplit(":", 1)[0] not in LOOPBACK_NAMES:
            return Response("fairfl dashboard: unknown Host header\n", status=403)
        if token is None or proof is None:
            return None
        given = request.args.get("token")
        if given is not None:
            if not hmac.compare_digest(given.encode(), token.encode()):
                return Response("fairfl dashboard: wrong token\n", status=401)
            rest = [f"{k}={v}" for k, v in request.args.items(multi=True) if k != "token"]
            response = redirect(request.path + ("?" + "&".join(rest) if rest else ""))
            response.set_cookie(COOKIE, proof, httponly=True, samesite="Strict")
            return response
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer ") and hmac.compare_digest(
            header.removeprefix("Bearer ").encode(), token.encode()
        ):
            return None
        cookie = request.cookies.get(COOKIE, "")
        if cookie and hmac.compare_digest(cookie.encode(), proof.encode()):
            return None
        return Response(
            "fairfl dashboard: token required (open the URL with ?token=..., or send "
            "'Authorization: Bearer <token>')\n",
            status=401,
        )


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


def create_app(
    folders: Sequence[Path],
    *,
    interval_s: float = 2.0,
    token: str | None = None,
    loopback: bool = True,
) -> Dash:
    """The dashboard over ``folders`` (out-dirs or ``fairfl compare`` folders).

    Parameters
    ----------
    folders : Sequence[Path]
        Folders to follow; each may not exist yet.
    interval_s : float (default: 2.0)
        Seconds between two checks for new rounds (the page's ``dcc.Interval``).
    token : str | None
        Required on every request when given (see :func:`install_guard`).
    loopback : bool (default: True)
        Whether the server is bound to loopback (then only loopback Host headers pass).

    Raises
    ------
    ValueError
        If ``interval_s`` is not positive or no folder is given.
    """
    if not interval_s > 0:
        raise ValueError(f"interval_s must be > 0, got {interval_s}")
    registry = Registry([Path(f) for f in folders], min_interval=min(0.5, interval_s / 2))
    cartesian = cartesian_bundle_matches()
    if not cartesian:
        logger.warning(
            "dashboard: %s is plotly.js %s, the installed Plotly wants %s: serving Plotly's "
            "full plotly.min.js instead (slower page loads)",
            CARTESIAN_BUNDLE.name,
            bundle_version(CARTESIAN_BUNDLE),
            get_plotlyjs_version(),
        )
    app = Dash(
        __name__,
        title="fairfl dashboard",
        update_title=None,  # type: ignore[arg-type]  # None turns it off (Dash docs)
        serve_locally=True,
        assets_folder=str(ASSETS),
        assets_ignore="" if cartesian else re.escape(CARTESIAN_BUNDLE.name),
        include_assets_files=True,
    )
    install_guard(app.server, token=token, loopback=loopback)
    # Dash checks callbacks against this one, so setting the layout reads nothing yet
    app.validation_layout = _layout(interval_s, (None, [], [], [], None))  # type: ignore[assignment]
    app.layout = lambda: _layout(interval_s, _head(registry, None))  # per page load
    _register_callbacks(app, registry)
    figures.warm_up()
    app.registry = registry  # type: ignore[attr-defined]  # for tests and the benchmark
    return app


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
            html.H2("fairfl dashboard", style={"margin": "4px 0"}),
            html.Div(sources, id="sources", style={"fontSize": "13px"}),
            html.Div(notes, id="notes"),
            dcc.Location(id="url"),
            dcc.Interval(id="tick", interval=int(interval_s * 1000)),
            dcc.Store(id="version", data=version),
            dcc.Store(id="shown"),
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
                                "Who gains, who loses: this run against another", style=_SECTION
                            ),
                            dcc.Dropdown(
                                id="compare-with",
                                placeholder="compare each client with another run...",
                                style={"width": "420px"},
                            ),
                            html.Div(
                                [
                                    html.Div(
                                        dcc.Graph(id="comparison", **graph),
                                        style={"flex": "3 1 500px"},
                                    ),
                                    html.Div(id="gainers", style={"flex": "2 1 300px"}),
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
                            html.Div(id="runs-table"),
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


def _runs_table(runs: dict[str, RunFollower]) -> html.Div:
    """Every run's headline, worst 10 % first (shown when there is more than one run)."""
    heads = [h for h in map(answers.headline, runs.values()) if h is not None]
    if len(heads) < 2:
        return html.Div()
    heads.sort(key=lambda h: (h.worst_10, h.run))
    columns = ("run", "round", "worst client", "worst 10 %", "mean", "Δ worst 10 %", "Δ mean")
    rows = [
        (
            h.run,
            h.round,
            f"{h.worst_client}: {_points(h.worst_accuracy)}",
            _points(h.worst_10),
            _points(h.mean),
            f"{h.change_worst_10 * 100:+.1f}",
            f"{h.change_mean * 100:+.1f}",
        )
        for h in heads
    ]
    return html.Div(
        [
            html.H3(
                "Every run at a glance (worst 10 % first; Δ in points since the first "
                "evaluated round)",
                style=_SECTION,
            ),
            html.Table(
                [html.Tr([html.Th(c) for c in columns])]
                + [html.Tr([html.Td(str(c)) for c in row]) for row in rows],
                id="runs-glance",
                style={"fontSize": "12px", "fontFamily": "monospace"},
            ),
        ]
    )


def _comparison(
    run: RunFollower, runs: dict[str, RunFollower], other: str | None
) -> tuple[Any, ...]:
    """The per-client comparison with ``other``, its gainers and losers, the run choices."""
    options = [{"label": name, "value": name} for name in runs if name != run.label]
    if other is None:
        message = "choose a run above" if options else "only one run: nothing to compare"
        return (figures.empty_figure(message, height=120), html.Div(), options)
    comparison = answers.compare_clients(run, runs[other])
    gainers, losers = answers.gainers_and_losers(comparison)

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
        f"{len(comparison.clients)} clients: {int((comparison.gain > 0).sum())} gain, "
        f"{int((comparison.gain < 0).sum())} lose under B = {other} against A = {run.label}"
    )
    return (
        figures.comparison_figure(comparison),
        html.Div(
            [
                html.Div(summary, id="comparison-summary", style={"fontSize": "13px"}),
                listing("Gain most under B", gainers, "#1a7f37"),
                listing("Lose most under B", losers, "#cf222e"),
            ]
        ),
        options,
    )


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
    "metrics": ("fairness", (("metrics", "figure"), ("runs-table", "children"))),
    "heatmap": ("fairness", (("client-heatmap", "figure"),)),
    "distribution": ("fairness", (("distribution", "figure"),)),
    "comparison": (
        "fairness",
        (("comparison", "figure"), ("gainers", "children"), ("compare-with", "options")),
    ),
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
    "participation": ("participation", (("participation", "figure"), ("drops", "children"))),
    "facts": ("facts", (("facts", "children"),)),
}


def _part_keys(
    version: int,
    name: str | None,
    run: RunFollower | None,
    sort: str,
    key: str | None,
    other: str | None,
    seeds: bool,
) -> dict[str, list[Any]]:
    """What each part of :data:`_PARTS` depends on; a part whose key is unchanged is kept."""
    of_run = [name, run.version if run is not None else None]
    return {
        "count": of_run,
        "headline": of_run,
        "metrics": [version, seeds],
        "comparison": [version, name, other],
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
        other: str | None,
        seeds: list[str] | None,
        shown: dict[str, list[Any]] | None,
        search: str | None,
    ) -> tuple[Any, ...]:
        runs = registry.runs()
        picked: Any = dash.no_update
        if dash.ctx.triggered_id is None:  # first load: ?run=NAME picks the run
            asked = parse_qs((search or "").lstrip("?")).get("run", [None])[0]
            if asked in runs and asked != selected:
                selected = picked = asked
        run = runs.get(selected) if selected else None
        if run is not None:
            _, names = figures.diagnostic_names(run)
            key = key if key in names else (names[0] if names else None)
        other = other if other in runs and other != selected else None
        each_seed = "seeds" in (seeds or [])
        keys = _part_keys(version, selected, run, sort, key, other, each_seed)
        shown = dict(shown or {})
        values: list[Any] = []
        for part, (part_view, outputs) in _PARTS.items():
            built = None
            if part_view in (None, view) and shown.get(part) != keys[part]:
                built = _build(part, registry, runs, run, _Choices(sort, key, other, each_seed))
            if built is None:
                values.extend([dash.no_update] * len(outputs))
            else:
                values.extend(built)
                shown[part] = keys[part]
        if all(value is dash.no_update for value in (*values, picked)):
            raise PreventUpdate
        return (*values, shown, picked)


class _Choices(NamedTuple):
    """What the user chose on the page besides the run and the view."""

    sort: str
    key: str | None
    other: str | None
    seeds: bool


def _build(
    part: str,
    registry: Registry,
    runs: dict[str, RunFollower],
    run: RunFollower | None,
    choices: _Choices,
) -> tuple[Any, ...] | None:
    """The outputs of one part of :data:`_PARTS`; None when it needs a run and has none."""
    if part == "metrics":
        return (figures.metrics_figure(runs, seeds=choices.seeds), _runs_table(runs))
    if run is None:
        return None
    if part == "count":
        return (f"rounds received: {len(run.rounds)} · status: {run.status}",)
    if part == "headline":
        return (_headline(answers.headline(run)),)
    if part == "comparison":
        return _comparison(run, runs, choices.other)
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
        return (figures.participation_figure(run), _drops_table(run))
    if part == "facts":
        manifest = next((s.manifest for s in registry.sources if run in s.runs.values()), None)
        return ([_table(title, rows) for title, rows in figures.run_facts(run, manifest).items()],)
    raise ValueError(f"unknown part {part!r}")


class _QuietHandler(WSGIRequestHandler):
    """Werkzeug's request handler without a log line per request (the page polls)."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Log nothing."""


class DashboardServer:
    """A dashboard served by Werkzeug in a background thread, stopped by :meth:`stop`.

    Parameters
    ----------
    app : Dash
        From :func:`create_app`.
    host : str
        Address to bind (see :func:`check_binding`).
    port : int
        Port; 0 picks a free one (read :attr:`port`).

    Raises
    ------
    OSError
        If it cannot listen there (a port in use, an address not of this host).
    """

    def __init__(self, app: Dash, host: str = "127.0.0.1", port: int = DEFAULT_PORT):
        self.app = app
        self.host = host
        try:
            self._server = make_server(
                host, port, app.server, threaded=True, request_handler=_QuietHandler
            )
        except SystemExit as error:  # Werkzeug exits when it cannot bind
            raise OSError(f"cannot listen on {host}:{port} (port in use?)") from error
        self.port = int(self._server.server_port)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The page's address (IPv6 hosts in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def start(self) -> DashboardServer:
        """Serve in a daemon thread; returns self."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fairfl-dashboard", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until :meth:`stop` is called from another."""
        self._server.serve_forever()

    def stop(self) -> None:
        """Stop the thread's serving (if started), close the socket, join the thread."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> DashboardServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
