"""Figures of runs side by side: the mean-against-worst-10 % trade-off, client by client.

:func:`tradeoff_figure` puts each rule variant of :func:`~fairfl.dashboard.ranking.rule_rows`
at its mean accuracy against its worst 10 % (fairlearn's model comparison: performance
against fairness), a point per run coloured by its variant, and the variant's mean over
seeds with error bars from the seeds' minimum to their maximum.
:func:`comparison_figure` puts each client's accuracy under a baseline against another
variant.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from fairfl.dashboard.answers import ClientComparison
from fairfl.dashboard.plotting import PALETTE, empty_figure
from fairfl.dashboard.ranking import RuleRow
from fairfl.metrics import PERCENT


def tradeoff_figure(
    rows: Sequence[RuleRow], order: Sequence[str] = (), height: int = 330
) -> go.Figure:
    """Mean accuracy (%, y) against worst 10 % (%, x): a point per run, grouped by variant.

    A variant with several seeds adds its mean over them as a larger diamond, with error
    bars from the smallest to the largest seed on both axes; up and to the right is
    better on both. A variant's colour is its place in ``order`` (the variants in the
    order the page lists runs, as the fairness curves colour them), so it keeps its
    colour while the ranking changes; variants not in ``order`` follow.
    """
    if not rows:
        return empty_figure("no run evaluated a client yet", height=height)
    places = list(order) + [row.name for row in rows if row.name not in order]
    figure = go.Figure()
    for row in rows:
        colour = PALETTE[places.index(row.name) % len(PALETTE)]
        worst = np.array([h.worst_10 for h in row.members]) * PERCENT
        mean = np.array([h.mean for h in row.members]) * PERCENT
        several = row.seeds > 1
        figure.add_trace(
            go.Scatter(
                x=worst,
                y=mean,
                mode="markers",
                name=row.name,
                legendgroup=row.name,
                showlegend=not several,
                text=[h.run for h in row.members],
                marker={
                    "color": colour,
                    "size": 7 if several else 11,
                    "opacity": 0.55 if several else 1.0,
                },
                hovertemplate="%{text}<br>worst 10 % %{x:.1f} %<br>mean %{y:.1f} %<extra></extra>",
            )
        )
        if several:
            x, y = row.worst_10 * PERCENT, row.mean * PERCENT
            figure.add_trace(
                go.Scatter(
                    x=[x],
                    y=[y],
                    mode="markers",
                    name=f"{row.name} ({row.seeds} seeds)",
                    legendgroup=row.name,
                    marker={
                        "color": colour,
                        "size": 13,
                        "symbol": "diamond",
                        "line": {"width": 1, "color": "black"},
                    },
                    error_x={
                        "type": "data",
                        "symmetric": False,
                        "array": [worst.max() - x],
                        "arrayminus": [x - worst.min()],
                        "color": colour,
                    },
                    error_y={
                        "type": "data",
                        "symmetric": False,
                        "array": [mean.max() - y],
                        "arrayminus": [y - mean.min()],
                        "color": colour,
                    },
                    hovertemplate=(
                        f"{row.name}: mean of {row.seeds} seeds"
                        "<br>worst 10 % %{x:.1f} %<br>mean %{y:.1f} %<extra></extra>"
                    ),
                )
            )
    figure.update_layout(
        height=height,
        margin={"l": 55, "r": 10, "t": 10, "b": 45},
        xaxis={"title": {"text": "worst 10 % of clients (%)"}},
        yaxis={"title": {"text": "mean client accuracy (%)"}},
        legend={"font": {"size": 10}},
        uirevision="tradeoff",
    )
    return figure


def comparison_figure(comparison: ClientComparison) -> go.Figure:
    """Each client's latest accuracy (%) under run A (x) against run B (y).

    Points above the diagonal gain under B, below it lose; colour is the change in
    points. Hover names the client.
    """
    if not comparison.clients.size:
        return empty_figure(
            f"no client evaluated by both {comparison.run_a} and {comparison.run_b}"
        )
    a = comparison.accuracy_a * PERCENT
    b = comparison.accuracy_b * PERCENT
    gain = b - a
    reach = float(max(np.abs(gain).max(), 1.0))
    figure = go.Figure(
        [
            go.Scatter(
                x=[0, 100],
                y=[0, 100],
                mode="lines",
                line={"color": "grey", "dash": "dash", "width": 1},
                hoverinfo="skip",
                showlegend=False,
            ),
            go.Scatter(
                x=a,
                y=b,
                mode="markers",
                text=[f"client {c}" for c in comparison.clients.tolist()],
                marker={
                    "size": 9,
                    "color": gain,
                    "colorscale": "RdYlGn",
                    "cmin": -reach,
                    "cmax": reach,
                    "colorbar": {"title": {"text": "B - A (points)"}},
                    "line": {"width": 0.5, "color": "black"},
                },
                showlegend=False,
                hovertemplate=(
                    "%{text}<br>A %{x:.1f} %<br>B %{y:.1f} %<br>"
                    "change %{marker.color:+.1f} points<extra></extra>"
                ),
            ),
        ]
    )
    figure.update_layout(
        height=380,
        margin={"l": 60, "r": 10, "t": 30, "b": 50},
        title={
            "text": f"{comparison.clients.size} clients evaluated by both",
            "font": {"size": 13},
        },
        xaxis={"title": {"text": f"A: {comparison.run_a} (%)"}, "range": [-3, 103]},
        yaxis={"title": {"text": f"B: {comparison.run_b} (%)"}, "range": [-3, 103]},
        uirevision=f"{comparison.run_a}|{comparison.run_b}",
    )
    return figure
