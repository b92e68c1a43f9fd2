"""What every figure of the dashboard shares: the palette, axes of rounds and counts, blanks.

:func:`empty_figure` stands in for a figure with nothing to draw yet; :func:`round_axis`
and :func:`count_axis` give integer ticks; :func:`warm_up` loads Plotly's validators once
at server start. The figures themselves are in :mod:`fairfl.dashboard.figures` (one
run over rounds), :mod:`fairfl.dashboard.comparison` (runs and rules side by side) and
:mod:`fairfl.dashboard.facts` (the tables of a run's facts).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from numpy.typing import NDArray
from plotly.colors import qualitative
from plotly.subplots import make_subplots

#: Colours of runs and series, in order.
PALETTE = qualitative.Plotly + qualitative.Dark24


def empty_figure(message: str, height: int = 260) -> go.Figure:
    """A blank figure that says ``message`` (nothing to draw yet)."""
    figure = go.Figure()
    figure.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    figure.update_layout(
        height=height,
        xaxis={"visible": False},
        yaxis={"visible": False},
        margin={"l": 20, "r": 20, "t": 20, "b": 20},
    )
    return figure


def warm_up() -> None:
    """Build one figure of each kind, so the first page load does not pay Plotly's imports.

    Plotly loads its trace and layout validators on first use (about a second on a busy
    2-core machine); a server calls this once at start.
    """
    make_subplots(rows=2, cols=1).add_trace(go.Scatter(x=[0], y=[0]), row=1, col=1)
    for trace in (go.Heatmap(z=[[0.0]]), go.Histogram(x=[0.0]), go.Bar(x=[0], y=[0])):
        go.Figure(trace).update_layout(height=100).to_plotly_json()


def round_axis(rounds: Sequence[int] | NDArray[np.int64]) -> dict[str, Any]:
    """An x axis of rounds with integer ticks only (a tick per round up to 10 rounds).

    Plotly's automatic ticks put 0.5-round steps on a short run.
    """
    axis: dict[str, Any] = {"title": {"text": "round"}, "tickformat": "d"}
    if len(rounds) <= INTEGER_TICKS:
        axis.update(tickmode="linear", tick0=1, dtick=1)
    return axis


#: Up to this many rounds (or clients on a count axis) an axis gets a tick for each.
INTEGER_TICKS = 10


def count_axis(title: str, largest: float) -> dict[str, Any]:
    """A y axis of counts (clients) from zero, integer ticks only."""
    axis: dict[str, Any] = {"title": {"text": title}, "rangemode": "tozero", "tickformat": "d"}
    if not math.isfinite(largest) or largest <= INTEGER_TICKS:
        axis.update(tickmode="linear", tick0=0, dtick=1)
    return axis


def translucent(colour: str, alpha: float = 0.18) -> str:
    """``#rrggbb`` as ``rgba(r, g, b, alpha)`` (a band must not hide the lines under it)."""
    red, green, blue = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({red}, {green}, {blue}, {alpha})"
