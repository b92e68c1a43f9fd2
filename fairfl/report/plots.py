"""Comparison plots as small PNGs (matplotlib, Agg backend; no display needed).

- :func:`plot_curves`: mean and worst-10% client accuracy per round, one line per rule
  variant (mean over seeds, shaded ± std for up to 6 variants).
- :func:`plot_distribution`: each variant's final client accuracies, sorted (the curve
  of rank-wise means over seeds), as Malekmohammadi & Yu's Figure 1 shows them.
- :func:`plot_tradeoff`: mean against worst-10% client accuracy, a point per variant
  (mean over seeds, ± std bars): the trade-off a fair rule or its q is chosen on.
- :func:`plot_weights`: one run's aggregation weights λ_i per round and client
  (``train.weights`` of ``rounds.jsonl``), a heat map.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from numpy.typing import NDArray

from fairfl.metrics import PERCENT
from fairfl.report.results import RunResult, metric_curve, weight_matrix

#: Pixels per inch of the PNGs: sharp enough to read in a paper or on a high-density
#: screen (the 256-colour palette of :func:`save_png` keeps the files small).
DPI = 150

#: Seed bands (± std) are drawn only up to this many variants; beyond, they hide the lines.
SHADE_MAX_VARIANTS = 6


def save_png(fig: Figure, path: Path) -> Path:
    """Save a figure as a small PNG: 256-colour palette, optimised (a third of the size)."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    buffer.seek(0)
    with Image.open(buffer) as image:
        image.convert("RGB").quantize(colors=256).save(path, format="PNG", optimize=True)
    return path


def _legend_beside(ax: Axes) -> None:
    """A legend to the right of ``ax``, if it holds a labelled line (none: no warning)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)


def _colours(count: int) -> list[tuple[float, float, float, float]]:
    cmap = plt.get_cmap("tab10" if count <= 10 else "tab20")
    return [cmap(i % cmap.N) for i in range(count)]


def _styles(count: int) -> list[str]:
    # A new line style for each round of colours, so 20+ variants stay distinguishable.
    return [("-", "--", "-.", ":")[(i // 10) % 4] for i in range(count)]


def _seed_mean_curve(
    runs: Sequence[RunResult], metric: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rounds, mean and std over seeds of a metric (rounds common to all finished seeds)."""
    curves = [metric_curve(run, metric) for run in runs if run.evaluated_rounds()]
    if not curves:
        return np.array([]), np.array([]), np.array([])
    length = min(len(r) for r, _ in curves)
    rounds = curves[0][0][:length]
    values = np.vstack([v[:length] for _, v in curves])
    with np.errstate(invalid="ignore"):
        return rounds, np.nanmean(values, axis=0), np.nanstd(values, axis=0)


def plot_curves(
    groups: Mapping[str, Sequence[RunResult]],
    path: Path,
    *,
    metrics: Sequence[tuple[str, str]] = (
        ("acc-mean", "mean accuracy (%)"),
        ("acc-worst-10", "worst-10% accuracy (%)"),
    ),
    title: str = "",
) -> Path:
    """Per-round curves of ``metrics`` for every variant, side by side; returns ``path``.

    ``metrics`` are ``(key, axis label)`` pairs of accuracy statistics (fractions in the
    records), plotted in percent: the label says "%".
    """
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics) + 1.8, 3.4), dpi=DPI)
    axes = np.atleast_1d(axes)
    colours = _colours(len(groups))
    styles = _styles(len(groups))
    for ax, (metric, ylabel) in zip(axes, metrics, strict=True):
        for (label, runs), colour, style in zip(groups.items(), colours, styles, strict=True):
            rounds, mean, std = _seed_mean_curve(runs, metric)
            if rounds.size == 0:
                continue
            mean, std = PERCENT * mean, PERCENT * std
            ax.plot(rounds, mean, style, color=colour, lw=1.3, label=label)
            if len(runs) > 1 and len(groups) <= SHADE_MAX_VARIANTS:
                ax.fill_between(rounds, mean - std, mean + std, color=colour, alpha=0.12, lw=0)
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds are whole numbers
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    _legend_beside(axes[-1])
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save_png(fig, path)


def sorted_accuracy_curve(runs: Sequence[RunResult]) -> NDArray[np.float64]:
    """Final client accuracies (fractions) sorted ascending, averaged rank by rank over seeds.

    Seeds with another number of clients than the first finished seed are left out.
    """
    curves = [np.sort(np.array(list(run.final_accuracies().values()))) for run in runs if run.ok]
    if not curves:
        return np.array([])
    size = curves[0].size
    mean: NDArray[np.float64] = np.mean(np.vstack([c for c in curves if c.size == size]), axis=0)
    return mean


def plot_distribution(
    groups: Mapping[str, Sequence[RunResult]], path: Path, *, title: str = ""
) -> Path:
    """Sorted final client accuracies per variant (lowest client first); returns ``path``."""
    fig, ax = plt.subplots(figsize=(6.2, 3.4), dpi=DPI)
    colours = _colours(len(groups))
    styles = _styles(len(groups))
    for (label, runs), colour, style in zip(groups.items(), colours, styles, strict=True):
        curve = sorted_accuracy_curve(runs)
        if curve.size == 0:
            continue
        ranks = (np.arange(curve.size) + 0.5) / curve.size * PERCENT
        ax.plot(ranks, PERCENT * curve, style, color=colour, lw=1.3, marker=".", ms=3, label=label)
    ax.set_xlabel("client percentile (sorted by final test accuracy)")
    ax.set_ylabel("final test accuracy (%)")
    ax.grid(alpha=0.3)
    _legend_beside(ax)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return save_png(fig, path)


def plot_tradeoff(
    groups: Mapping[str, Sequence[RunResult]], path: Path, *, title: str = ""
) -> Path:
    """Mean against worst-10% final client accuracy per variant; returns ``path``.

    A point is the mean over the variant's finished seeds, its bars ± one std (none for
    one seed); up and to the right is better on both. Variants without finite values
    are left out.
    """
    fig, ax = plt.subplots(figsize=(6.2, 4.2), dpi=DPI)
    colours = _colours(len(groups))
    markers = ("o", "s", "^", "D", "v", "P", "X", "*")
    for i, ((label, runs), colour) in enumerate(zip(groups.items(), colours, strict=True)):
        finals = [run.final_metrics() for run in runs if run.ok]
        pairs = np.array(
            [(m.get("acc-mean", np.nan), m.get("acc-worst-10", np.nan)) for m in finals],
            dtype=np.float64,
        ).reshape(-1, 2)
        pairs = pairs[np.isfinite(pairs).all(axis=1)]
        if pairs.size == 0:
            continue
        (x, y), (dx, dy) = PERCENT * pairs.mean(axis=0), PERCENT * pairs.std(axis=0)
        ax.errorbar(
            x,
            y,
            xerr=dx if len(pairs) > 1 else None,
            yerr=dy if len(pairs) > 1 else None,
            fmt=markers[(i // 10) % len(markers)],
            color=colour,
            ms=5,
            capsize=2,
            lw=1,
            label=label,
        )
    ax.set_xlabel("mean client accuracy (%)")
    ax.set_ylabel("worst-10% client accuracy (%)")
    ax.grid(alpha=0.3)
    _legend_beside(ax)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return save_png(fig, path)


def _weights_panel(
    ax: Axes,
    fig: Figure,
    rounds: NDArray[np.int64],
    clients: Sequence[int],
    values: NDArray[np.float64],
    *,
    label: str,
    ratio: bool,
) -> None:
    finite = values[np.isfinite(values)]
    low = float(finite.min()) if finite.size else 0.0
    high = float(finite.max()) if finite.size else 1.0
    if ratio:  # centred on 1: the rule weighs the client as FedAvg does
        from matplotlib.colors import TwoSlopeNorm

        norm: Normalize = TwoSlopeNorm(vcenter=1.0, vmin=min(low, 0.999), vmax=max(high, 1.001))
        cmap = "RdBu_r"
    elif low < 0:  # VRed's weights can be negative ([Malekmohammadi & Yu 2024] Lemma 1)
        bound = max(abs(low), abs(high))
        norm, cmap = Normalize(-bound, bound), "RdBu_r"
    else:  # scaled to the weights' own range: q-FFL's 0.045-0.05 must not look flat
        norm = weight_colour_range(low, high)
        cmap = "viridis"
    image = ax.imshow(
        np.ma.masked_invalid(values),
        aspect="auto",
        interpolation="nearest",
        cmap=cmap,
        norm=norm,
        extent=(rounds[0] - 0.5, rounds[-1] + 0.5, len(clients) - 0.5, -0.5),
    )
    step = max(1, len(clients) // 10)
    ax.set_yticks(range(0, len(clients), step), [str(c) for c in clients[::step]], fontsize=7)
    ax.set_xlabel("round")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.colorbar(image, ax=ax, label=label, pad=0.02)


def weight_colour_range(low: float, high: float) -> Normalize:
    """Colours spanning non-negative weights from their smallest to their largest value.

    Equal weights (``low == high``) get a range of ±5 % around them, so they show as one
    colour rather than an error.
    """
    if high <= low:
        spread = 0.05 * abs(high) or 1.0
        return Normalize(low - spread, high + spread)
    return Normalize(low, high)


def plot_weights(
    run: RunResult, path: Path, *, reference: RunResult | None = None, title: str = ""
) -> Path | None:
    """Heat map of one run's aggregation weights λ (client x round); None if it has none.

    With a ``reference`` run (FedAvg on the same seed: the same partition, so its
    weights are n_i / N), a second panel shows ``λ_i / λ_i^ref``, the rule's re-weighting
    of each client relative to FedAvg (1: as FedAvg; colour map centred on 1).
    """
    rounds, clients, weights = weight_matrix(run)
    if rounds.size == 0:
        return None
    ratio = None
    if reference is not None:
        ref_rounds, ref_clients, ref_weights = weight_matrix(reference)
        if ref_clients == clients and ref_rounds.size:
            common = [j for j, r in enumerate(rounds) if r in set(ref_rounds.tolist())]
            ref_index = {r: j for j, r in enumerate(ref_rounds.tolist())}
            ref = np.stack([ref_weights[:, ref_index[int(rounds[j])]] for j in common], axis=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = weights[:, common] / ref
            ratio_rounds = rounds[common]
    panels = 1 if ratio is None else 2
    height = min(5.0, 1.2 + 0.12 * len(clients))
    fig, axes = plt.subplots(1, panels, figsize=(5.2 * panels, height), dpi=DPI, squeeze=False)
    _weights_panel(axes[0, 0], fig, rounds, clients, weights, label="weight λ", ratio=False)
    axes[0, 0].set_ylabel("client (partition)")
    if ratio is not None and reference is not None:  # a ratio needs the reference
        _weights_panel(
            axes[0, 1],
            fig,
            ratio_rounds,
            clients,
            ratio,
            label=f"λ / λ of {reference.label}",
            ratio=True,
        )
        axes[0, 1].set_title(f"relative to {reference.label}, same seed", fontsize=9)
    fig.suptitle(title or f"aggregation weights: {run.label}, seed {run.seed}", fontsize=10)
    fig.tight_layout()
    return save_png(fig, path)
