"""The comparison figures: whole-number rounds, legends only with lines, weights' own colours."""

from __future__ import annotations

import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from PIL import Image

from fairfl.report import plots
from fairfl.report.results import group_by_label, load_runs
from tests.report.test_report_build import write_run


@pytest.fixture
def figures(monkeypatch) -> list[plt.Figure]:
    """The figures the plot functions would save, kept open for the test to read."""
    kept: list[plt.Figure] = []

    def keep(fig: plt.Figure, path: Path) -> Path:
        kept.append(fig)
        return path

    monkeypatch.setattr(plots, "save_png", keep)
    yield kept
    for fig in kept:
        plt.close(fig)


def _groups(folder: Path, rounds: int):
    write_run(folder / "runs" / "fedavg" / "seed-0", [[0.2 + 0.1 * r, 0.5] for r in range(rounds)])
    return group_by_label(load_runs(folder))


def test_round_axes_tick_whole_rounds_only(tmp_path, figures):
    plots.plot_curves(_groups(tmp_path, rounds=3), tmp_path / "curves.png")
    for ax in figures[0].axes:
        shown = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert shown and all(float(t).is_integer() for t in shown), shown


def test_no_legend_warning_when_no_variant_has_a_curve(tmp_path, figures):
    (tmp_path / "runs" / "fedavg" / "seed-0").mkdir(parents=True)
    (tmp_path / "runs" / "fedavg" / "seed-0" / "rounds.jsonl").write_text("")
    groups = group_by_label(load_runs(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib: "No artists with labels found..."
        plots.plot_curves(groups, tmp_path / "curves.png")
        plots.plot_distribution(groups, tmp_path / "distribution.png")
    assert all(ax.get_legend() is None for fig in figures for ax in fig.axes)


def test_weight_colours_span_the_weights_range_not_zero_to_max():
    # q-FFL's weights on digits lie in 0.045-0.05: scaled from 0 they are one colour.
    norm = plots.weight_colour_range(0.045, 0.05)
    assert (norm.vmin, norm.vmax) == (0.045, 0.05)
    assert norm(0.045) == 0.0 and norm(0.05) == 1.0 and norm(0.0475) == pytest.approx(0.5)
    equal = plots.weight_colour_range(0.25, 0.25)
    assert equal.vmin < 0.25 < equal.vmax and equal(0.25) == pytest.approx(0.5)


def test_figures_are_saved_at_150_dpi(tmp_path):
    path = plots.plot_curves(_groups(tmp_path, rounds=2), tmp_path / "curves.png")
    width, height = Image.open(path).size
    # plot_curves: figsize (4.2 * 2 + 1.8, 3.4) inches for two metrics.
    assert (width, height) == (round(10.2 * 150), round(3.4 * 150))
