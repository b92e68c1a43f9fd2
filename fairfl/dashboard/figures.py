"""Plotly figures of one run over its rounds, and the fairness curves of every run.

Figures of runs side by side (the trade-off scatter, the per-client comparison) are in
:mod:`fairfl.dashboard.comparison`, the run's fact tables in :mod:`fairfl.dashboard.facts`,
what all share in :mod:`fairfl.dashboard.plotting`; no drawing code of our own. Every
function takes :class:`~fairfl.dashboard.follow.RoundData` lists or followers and
returns a ``plotly.graph_objects.Figure`` (or rows for an HTML table). Accuracies are
stored as fractions in [0, 1] and shown in percent through
:func:`fairfl.metrics.in_percent` (curves) or :data:`fairfl.metrics.PERCENT` (per-client
matrices), with axis and colour-bar titles that say "%". Matrices are float32 NumPy
arrays and the fairness curves NumPy arrays too, which Plotly sends to the browser as
base64 binary, not as JSON number lists: that keeps a 1,000-client x 500-round heat map
a few megabytes, and spares Plotly's validators a Python loop per point.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import plotly.graph_objects as go
from numpy.typing import NDArray
from plotly.subplots import make_subplots

from fairfl.dashboard.follow import (
    CURVE_METRICS,
    GROUP_CURVE_METRICS,
    PERSONAL_CURVE_METRICS,
    RoundData,
    RunFollower,
)
from fairfl.dashboard.labels import variant_of
from fairfl.dashboard.plotting import (
    PALETTE,
    count_axis,
    empty_figure,
    round_axis,
    translucent,
)
from fairfl.metrics import PERCENT, in_percent

#: Row titles of the fairness curves (percent where the metric is an accuracy statistic).
CURVE_TITLES = {
    "acc-mean": "Mean accuracy (%)",
    "acc-worst-10": "Worst 10 % (%)",
    "acc-worst-20": "Worst 20 % (%)",
    "acc-std": "Std of accuracy (%)",
    "jain-index": "Jain's index (0-1)",
    "dp-diff": "Demographic-parity gap (0-1)",
    "eo-diff": "Equalised-odds gap (0-1)",
    "personal-acc-mean": "Personal models: mean accuracy (%)",
    "personal-acc-worst-10": "Personal models: worst 10 % (%)",
}

#: What the page says each known rule diagnostic is (others show their key alone).
DIAGNOSTIC_TITLES = {
    "lambda-max": "largest weight λ",
    "lambda-min": "smallest weight λ",
    "lambda-sum": "Σλ (q-FFL: step scale)",
    "lambda-entropy": "entropy of λ",
    "qp-status": "FedMGDA+ QP status",
    "qp-failed": "FedMGDA+ QP failed (1 = yes)",
    "step-size": "FedMGDA+ step size η_t",
    "direction-norm": "FedMGDA+ ‖Σλḡ‖",
    "qffl-h-sum": "q-FFL Σh (step = Σλ)",
    "rcfl-eta": "RC-FL η (next round)",
    "rcfl-eta-sent": "RC-FL η sent",
    "rcfl-eta-star": "RC-FL η* (exact)",
    "rcfl-q": "RC-FL q_i",
    "clusters": "Equitable FL cluster",
    "registry-clusters": "Equitable FL cluster (registry)",
    "num-clusters": "Equitable FL clusters",
    "afl-participant-mass": "AFL λ mass of participants",
    "gifair-lambda": "GiFair λ",
    "term-tilted-loss": "TERM tilted loss",
    "beta-max": "VRed β bound",
}

Sort = Literal["client", "size", "final"]
#: Heat-map row orders: label shown on the page.
SORTS: dict[str, str] = {
    "client": "client id",
    "size": "data size (test samples, smallest first)",
    "final": "final accuracy (worst first)",
}

#: The train diagnostic naming a round weighed by unregistered sample counts far above the
#: round's median (``fairfl.strategies.core.identity.CountBounds.flag``).
COUNT_FLAG = "num-examples-flag"


def _curves(run: RunFollower) -> tuple[NDArray[np.int64], list[dict[str, float]]]:
    evaluated = [r for r in run.rounds if r.metrics]
    rounds = np.array([r.round for r in evaluated], dtype=np.int64)
    return rounds, [in_percent(r.metrics) for r in evaluated]


def seed_mean(
    series: Sequence[tuple[NDArray[np.int64], NDArray[np.float64]]],
) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Mean, minimum and maximum over seeds of one metric, per round.

    Each seed contributes ``(rounds, values)``; a round is shown when every seed
    evaluated it, so the mean never mixes a different set of seeds from round to round.

    Returns
    -------
    rounds, mean, low, high : NDArray
        The rounds all seeds share, and the mean, minimum and maximum there (NaN where a
        seed's value is NaN: that seed's round is not known).
    """
    common = series[0][0]
    for rounds, _ in series[1:]:
        common = np.intersect1d(common, rounds)
    stacked = np.array([values[np.searchsorted(rounds, common)] for rounds, values in series])
    return common, stacked.mean(axis=0), stacked.min(axis=0), stacked.max(axis=0)


def metrics_figure(runs: Mapping[str, RunFollower], seeds: bool = False) -> go.Figure:
    """Mean, worst-10 %, worst-20 %, std (percent) and Jain's index per round.

    Runs whose clients recorded ``group_counts`` add the demographic-parity and
    equalised-odds gaps of the pooled predictions (:data:`GROUP_CURVE_METRICS`); runs
    whose clients recorded a personal model's accuracy (Ditto) add the personal models'
    mean and worst 10 % (:data:`PERSONAL_CURVE_METRICS`).

    One colour per rule variant. A variant with one run is one line; a variant with
    several seeds (``"afl seed 1"``, ``"afl seed 2"``) is its mean over the seeds with a
    band from their minimum to their maximum, and each seed's own line when ``seeds``.
    """
    shown = {name: run for name, run in runs.items() if any(r.metrics for r in run.rounds)}
    if not shown:
        return empty_figure("no round evaluated yet", height=300)
    plotted = CURVE_METRICS + tuple(
        m
        for m in (*GROUP_CURVE_METRICS, *PERSONAL_CURVE_METRICS)
        if any(m in r.metrics for run in shown.values() for r in run.rounds)
    )
    figure = make_subplots(
        rows=len(plotted),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.03,
        subplot_titles=[CURVE_TITLES[m] for m in plotted],
    )
    variants: dict[str, dict[str, RunFollower]] = {}
    for name, run in shown.items():
        variants.setdefault(variant_of(name), {})[name] = run
    all_rounds: set[int] = set()
    for index, (variant, members) in enumerate(variants.items()):
        colour = PALETTE[index % len(PALETTE)]
        curves = {name: _curves(run) for name, run in members.items()}
        for x, _ in curves.values():
            all_rounds.update(x.tolist())
        averaged = len(members) > 1
        for row, metric in enumerate(plotted, start=1):
            values = {
                name: (x, np.array([m.get(metric, math.nan) for m in ms], dtype=np.float64))
                for name, (x, ms) in curves.items()
            }
            if averaged:
                x, mean, low, high = seed_mean(list(values.values()))
                _add_band(figure, variant, colour, x, low, high, row)
                _add_line(
                    figure,
                    f"{variant} (mean of {len(members)} seeds)",
                    variant,
                    colour,
                    x,
                    mean,
                    row,
                    width=2.0,
                    legend=row == 1,
                )
            if seeds or not averaged:
                for name, (x, y) in values.items():
                    _add_line(
                        figure,
                        name,
                        variant,
                        colour,
                        x,
                        y,
                        row,
                        width=1.0 if averaged else 1.5,
                        legend=row == 1 and not averaged,
                        dash="dot" if averaged else None,
                    )
    figure.update_xaxes(**round_axis(sorted(all_rounds)), row=len(plotted), col=1)
    figure.update_layout(
        height=170 * len(plotted) + 60,
        margin={"l": 50, "r": 10, "t": 30, "b": 40},
        legend={"font": {"size": 10}},
        uirevision="metrics",
    )
    return figure


def _add_line(
    figure: go.Figure,
    name: str,
    variant: str,
    colour: str,
    x: NDArray[np.int64],
    y: NDArray[np.float64],
    row: int,
    *,
    width: float,
    legend: bool,
    dash: str | None = None,
) -> None:
    figure.add_trace(
        go.Scatter(
            x=x,
            y=y,
            name=name,
            legendgroup=variant,
            showlegend=legend,
            mode="lines",
            line={"color": colour, "width": width, "dash": dash},
            hovertemplate=f"{name}<br>round %{{x}}<br>%{{y:.2f}}<extra></extra>",
        ),
        row=row,
        col=1,
    )


def _add_band(
    figure: go.Figure,
    variant: str,
    colour: str,
    x: NDArray[np.int64],
    low: NDArray[np.float64],
    high: NDArray[np.float64],
    row: int,
) -> None:
    """A filled band between the seeds' minimum and maximum (no legend entry, no hover)."""
    band = {"legendgroup": variant, "showlegend": False, "hoverinfo": "skip", "mode": "lines"}
    figure.add_trace(go.Scatter(x=x, y=high, line={"width": 0}, **band), row=row, col=1)
    figure.add_trace(
        go.Scatter(
            x=x, y=low, line={"width": 0}, fill="tonexty", fillcolor=translucent(colour), **band
        ),
        row=row,
        col=1,
    )


def client_matrix(
    rounds: Sequence[RoundData],
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float32], NDArray[np.float64]]:
    """Client accuracies as a clients x rounds matrix.

    Returns
    -------
    round_numbers : NDArray[np.int64]
        The evaluated rounds (columns).
    clients : NDArray[np.int64]
        Every client key seen, sorted (rows).
    accuracy : NDArray[np.float32]
        Fractions; NaN where a client was not evaluated in a round.
    sizes : NDArray[np.float64]
        Each client's test samples in the last round that evaluated it (NaN if unknown).
    """
    evaluated = [r for r in rounds if r.clients.size]
    keys = np.unique(np.concatenate([r.clients for r in evaluated])) if evaluated else np.array([])
    clients = keys.astype(np.int64)
    matrix = np.full((clients.size, len(evaluated)), np.nan, dtype=np.float32)
    sizes = np.full(clients.size, np.nan)
    for column, entry in enumerate(evaluated):
        rows = np.searchsorted(clients, entry.clients)
        matrix[rows, column] = entry.accuracy
        sizes[rows] = entry.num_examples
    return np.array([r.round for r in evaluated], dtype=np.int64), clients, matrix, sizes


def client_order(matrix: NDArray[np.floating], sizes: NDArray[np.floating], sort: Sort) -> Any:
    """Row order of the heat map: by client id, by data size or by final accuracy.

    ``size`` puts the smallest test sets first, ``final`` the lowest last-known accuracy
    first (a client's latest evaluated value; clients never evaluated go last); ties
    keep the client-id order.
    """
    if sort not in SORTS:
        raise ValueError(f"sort must be one of {sorted(SORTS)}, got {sort!r}")
    count = matrix.shape[0]
    if sort == "client" or count == 0:
        return np.arange(count)
    if sort == "size":
        key = np.where(np.isnan(sizes), np.inf, sizes)
    else:
        key = np.full(count, np.inf)
        for column in range(matrix.shape[1]):
            known = ~np.isnan(matrix[:, column])
            key[known] = matrix[known, column]
    return np.argsort(key, kind="stable")


def _height(rows: int) -> int:
    return int(max(260, min(900, 16 * rows + 120)))


#: Up to this many rows a client heat map labels each row; beyond, hover names them.
LABELLED_ROWS = 60


def _client_axis(rows: int) -> dict[str, Any]:
    """A heat map's client axis: first row on top; no per-row labels past LABELLED_ROWS.

    A thousand labels on a 900-pixel axis cannot be read, and laying them out is most of
    the browser's work for a large federation.
    """
    axis: dict[str, Any] = {"autorange": "reversed", "type": "category", "automargin": True}
    if rows > LABELLED_ROWS:
        axis.update(showticklabels=False, title={"text": f"{rows} clients (hover for ids)"})
    return axis


def client_heatmap(run: RunFollower, sort: Sort = "final") -> go.Figure:
    """Per-client accuracy (%) over rounds: one row per client, one column per round."""
    round_numbers, clients, matrix, sizes = client_matrix(run.rounds)
    if not clients.size:
        return empty_figure(f"{run.label}: no client evaluated yet")
    order = client_order(matrix, sizes, sort)
    labels = [
        f"client {clients[i]} (n={'?' if np.isnan(sizes[i]) else int(sizes[i])})" for i in order
    ]
    figure = go.Figure(
        go.Heatmap(
            z=matrix[order] * np.float32(PERCENT),
            x=round_numbers,
            y=labels,
            zmin=0,
            zmax=100,
            colorscale="Viridis",
            colorbar={"title": {"text": "accuracy (%)"}},
            hovertemplate="%{y}<br>round %{x}<br>accuracy %{z:.1f} %<extra></extra>",
        )
    )
    figure.update_layout(
        uirevision=run.label,  # keeps zoom and pan across live updates
        height=_height(clients.size),
        margin={"l": 10, "r": 10, "t": 10, "b": 40},
        xaxis=round_axis(round_numbers),
        yaxis=_client_axis(clients.size),
    )
    return figure


def distribution_figure(run: RunFollower) -> go.Figure:
    """Histogram of the client accuracies (%) of the run's latest evaluated round."""
    evaluated = [r for r in run.rounds if r.clients.size]
    if not evaluated:
        return empty_figure(f"{run.label}: no client evaluated yet")
    latest = evaluated[-1]
    figure = go.Figure(
        go.Histogram(
            x=latest.accuracy * PERCENT,
            xbins={"start": 0, "end": 100.001, "size": 5},
            marker={"color": PALETTE[0]},
            hovertemplate="accuracy %{x} %<br>%{y} clients<extra></extra>",
        )
    )
    figure.update_layout(
        uirevision=run.label,  # keeps zoom and pan across live updates
        height=300,
        margin={"l": 50, "r": 10, "t": 40, "b": 40},
        title={
            "text": f"round {latest.round}: {latest.clients.size} clients",
            "font": {"size": 13},
        },
        xaxis={"title": {"text": "client accuracy (%)"}, "range": [0, 100]},
        yaxis=count_axis("clients", latest.clients.size),
        bargap=0.05,
    )
    return figure


def _per_client_matrix(
    rounds: Sequence[RoundData], values: Sequence[Mapping[int, float]]
) -> tuple[list[int], NDArray[np.int64], NDArray[np.float32]]:
    columns = [(r.round, v) for r, v in zip(rounds, values, strict=True) if v]
    clients = np.array(sorted({c for _, v in columns for c in v}), dtype=np.int64)
    matrix = np.full((clients.size, len(columns)), np.nan, dtype=np.float32)
    for column, (_, row) in enumerate(columns):
        keys = np.fromiter(row.keys(), dtype=np.int64, count=len(row))
        matrix[np.searchsorted(clients, keys), column] = np.fromiter(
            row.values(), dtype=np.float64, count=len(row)
        )
    return [r for r, _ in columns], clients, matrix


def weights_heatmap(run: RunFollower) -> go.Figure:
    """The rule's aggregation weights λ_i per client and round (``train.weights``)."""
    round_numbers, clients, matrix = _per_client_matrix(run.rounds, [r.weights for r in run.rounds])
    if not clients.size:
        return empty_figure(f"{run.label}: no aggregation weights recorded yet")
    figure = go.Figure(
        go.Heatmap(
            z=matrix,
            x=round_numbers,
            y=[f"client {c}" for c in clients],
            colorscale="Cividis",
            colorbar={"title": {"text": "weight λ"}},
            hovertemplate="%{y}<br>round %{x}<br>λ %{z:.4f}<extra></extra>",
        )
    )
    figure.update_layout(
        uirevision=run.label,  # keeps zoom and pan across live updates
        height=_height(clients.size),
        margin={"l": 10, "r": 10, "t": 10, "b": 40},
        xaxis=round_axis(round_numbers),
        yaxis=_client_axis(clients.size),
    )
    return figure


def diagnostic_names(run: RunFollower) -> tuple[list[str], list[str]]:
    """The run's scalar and per-client diagnostic keys, in first-seen order."""
    scalars: dict[str, None] = {}
    per_client: dict[str, None] = {}
    for entry in run.rounds:
        scalars.update(dict.fromkeys(entry.scalars))
        per_client.update(dict.fromkeys(entry.per_client))
    return list(scalars), list(per_client)


#: Past this many rounds, numeric series are drawn as lines without a marker per round.
MARKER_ROUNDS = 60


def _line_mode(points: int) -> str:
    return "lines+markers" if points <= MARKER_ROUNDS else "lines"


def _title(key: str) -> str:
    known = DIAGNOSTIC_TITLES.get(key)
    return f"{known} ({key})" if known else key


def diagnostics_figure(run: RunFollower) -> go.Figure:
    """Each scalar rule diagnostic per round (``train.diagnostics``), two per row.

    Numbers are lines; strings (FedMGDA+'s ``qp-status``) are points on a categorical
    axis, so a round whose QP fell back stands out.
    """
    scalars, _ = diagnostic_names(run)
    if not scalars:
        return empty_figure(f"{run.label}: this rule recorded no diagnostics yet")
    columns = 1 if len(scalars) == 1 else 2
    rows = math.ceil(len(scalars) / columns)
    figure = make_subplots(
        rows=rows,
        cols=columns,
        shared_xaxes=True,
        vertical_spacing=min(0.08, 0.4 / rows),
        horizontal_spacing=0.08,
        subplot_titles=[_title(k) for k in scalars],
    )
    for index, key in enumerate(scalars):
        row, column = index // columns + 1, index % columns + 1
        points = [(r.round, r.scalars[key]) for r in run.rounds if key in r.scalars]
        textual = any(isinstance(v, str) for _, v in points)
        figure.add_trace(
            go.Scatter(
                x=[x for x, _ in points],
                y=[str(v) if textual else v for _, v in points],
                mode="markers" if textual else _line_mode(len(points)),
                marker={"size": 5},
                name=key,
                showlegend=False,
                hovertemplate=f"{key}<br>round %{{x}}<br>%{{y}}<extra></extra>",
            ),
            row=row,
            col=column,
        )
        if textual:
            figure.update_yaxes(type="category", row=row, col=column)
    figure.update_xaxes(title_text="round", row=rows)
    figure.update_annotations(font={"size": 12})
    figure.update_layout(
        uirevision=run.label, height=170 * rows + 60, margin={"l": 60, "r": 10, "t": 30, "b": 40}
    )
    return figure


def per_client_figure(run: RunFollower, key: str | None) -> go.Figure:
    """A per-client diagnostic (RC-FL's q_i, Equitable FL's clusters) over rounds."""
    _, names = diagnostic_names(run)
    if not names:
        return empty_figure(f"{run.label}: this rule records no per-client state", height=200)
    key = key if key in names else names[0]
    round_numbers, clients, matrix = _per_client_matrix(
        run.rounds, [r.per_client.get(key, {}) for r in run.rounds]
    )
    figure = go.Figure(
        go.Heatmap(
            z=matrix,
            x=round_numbers,
            y=[f"client {c}" for c in clients],
            colorscale="Turbo" if "cluster" in key else "Magma",
            colorbar={"title": {"text": key}},
            hovertemplate="%{y}<br>round %{x}<br>%{z}<extra></extra>",
        )
    )
    figure.update_layout(
        uirevision=run.label,  # keeps zoom and pan across live updates
        height=_height(clients.size),
        margin={"l": 10, "r": 10, "t": 40, "b": 40},
        title={"text": _title(key), "font": {"size": 13}},
        xaxis=round_axis(round_numbers),
        yaxis=_client_axis(clients.size),
    )
    return figure


def participation_figure(run: RunFollower) -> go.Figure:
    """Sampled, answered and dropped clients per round, for training and evaluation."""
    if not run.rounds:
        return empty_figure(f"{run.label}: no round yet")
    x = [r.round for r in run.rounds]
    series: dict[str, list[float]] = {
        "train sampled": [r.sampled.get("train", math.nan) for r in run.rounds],
        "train aggregated": [math.nan if r.accepted is None else r.accepted for r in run.rounds],
        "train dropped": [len(r.train_dropped) for r in run.rounds],
        "evaluate sampled": [r.sampled.get("evaluate", math.nan) for r in run.rounds],
        "evaluate answered": [int(r.clients.size) for r in run.rounds],
        "evaluate dropped": [len(r.evaluate_dropped) for r in run.rounds],
    }
    bars = len(x) <= MARKER_ROUNDS  # a bar per round only while bars stay readable
    figure = go.Figure()
    for index, (name, values) in enumerate(series.items()):
        colour = PALETTE[index]
        figure.add_trace(
            go.Bar(x=x, y=values, name=name, marker={"color": colour})
            if bars and name.endswith("dropped")
            else go.Scatter(
                x=x,
                y=values,
                name=name,
                mode=_line_mode(len(x)),
                line={"color": colour, "dash": "dot" if "sampled" in name else "solid"},
            )
        )
    figure.update_layout(
        uirevision=run.label,  # keeps zoom and pan across live updates
        height=300,
        margin={"l": 50, "r": 10, "t": 10, "b": 40},
        xaxis=round_axis(x),
        yaxis=count_axis(
            "clients", max((n for v in series.values() for n in v if not math.isnan(n)), default=0)
        ),
        barmode="group",
    )
    return figure


def drop_rows(run: RunFollower, limit: int = 50) -> list[tuple[int, str, str, str]]:
    """The latest dropped replies, skipped, failed and count-flagged rounds, newest first.

    A client the rule used at weight 0 (FairFed's clip, AFL's λ at 0) is listed as
    silenced in each such round.

    Each row is ``(round, phase, node, reason)``.
    """
    rows = [
        (entry.round, phase, node, reason)
        for entry in run.rounds
        for phase, drops in (("train", entry.train_dropped), ("evaluate", entry.evaluate_dropped))
        for node, reason in drops.items()
    ]
    skipped = [
        (e.round, "aggregate", "-", f"round skipped: {e.skipped}") for e in run.rounds if e.skipped
    ]
    flagged = [
        (e.round, "train", "-", f"counts flagged: {e.scalars[COUNT_FLAG]}")
        for e in run.rounds
        if isinstance(e.scalars.get(COUNT_FLAG), str)
    ]
    failed = [(e.round, "train", "-", f"round failed: {e.failed}") for e in run.rounds if e.failed]
    silenced = [
        (e.round, "aggregate", f"client {key}", "silenced: weight 0 in the aggregate")
        for e in run.rounds
        for key in e.silenced
    ]
    return sorted(rows + skipped + flagged + failed + silenced, key=lambda row: -row[0])[:limit]
