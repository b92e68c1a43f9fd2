"""The comparison of every run in a real browser (headless Debian Chromium, Selenium).

Three rules written as ``fairfl compare`` lays them out (FedAvg and AFL with three seeds,
q-FFL with one; 12 clients, 5 rounds) in a 1280 x 800 window: the ranked table and the
trade-off scatter are in the first screen without scrolling, the who-gains view opens on
FedAvg as the baseline against the best-ranked rule (each a mean over its seeds), and
its choice goes into the address, which a reload restores. Screenshots of each go into
the test's temporary folder, and into docs/figures with ``FAIRFL_REFRESH_FIGURES=1``.
The dashboard runs in a thread the test stops.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fairfl.dashboard import DashboardServer, create_app
from fairfl.dashboard.browser import COMPARED_JS, RENDERED_JS, choose, wait_until
from tests.dashboard.conftest import write_comparison

pytestmark = pytest.mark.integration

FIGURES = Path(__file__).resolve().parents[2] / "docs" / "figures"
CLIENTS = 12
ROUNDS = 5
SEEDS = {"fedavg": 3, "afl": 3, "qffl": 1}


def accuracies(rule: str, seed: int, number: int) -> list[float]:
    """FedAvg: client i at min(1, 0.05 i + 0.1 r); AFL: all at 0.5 + 0.02 r; q-FFL: 0.55.

    Each seed adds 0.01 to every client.
    """
    if rule == "fedavg":
        values = [min(1.0, 0.05 * i + 0.1 * number) for i in range(CLIENTS)]
    elif rule == "afl":
        values = [0.5 + 0.02 * number] * CLIENTS
    else:
        values = [0.55] * CLIENTS
    return [round(v + 0.01 * seed, 6) for v in values]


@pytest.fixture
def comparison(tmp_path):
    return write_comparison(tmp_path, SEEDS, ROUNDS, accuracies, baseline="fedavg")


def shoot(browser, tmp_path: Path, name: str) -> None:
    """Save a screenshot in the test's folder (docs/figures with FAIRFL_REFRESH_FIGURES=1)."""
    refresh = os.environ.get("FAIRFL_REFRESH_FIGURES") == "1"
    path = (FIGURES if refresh else tmp_path) / name
    assert browser.save_screenshot(str(path)) and path.stat().st_size > 10_000


#: The bottom edges of the ranked table and the trade-off plot, the window's inner height
#: and how far the page is scrolled.
FOLD_JS = """
const table = document.getElementById('ranked');
const plot = document.querySelector('#tradeoff .js-plotly-plot');
if (!table || !plot || !plot._fullData || !plot._fullData.length) return null;
return [table.getBoundingClientRect().bottom, plot.getBoundingClientRect().bottom,
        innerWidth, innerHeight, scrollY];
"""

RANKED_JS = """
return Array.from(document.querySelectorAll('#ranked tr')).slice(1)
  .map(row => Array.from(row.children).map(cell => cell.textContent));
"""

#: The trade-off plot's AFL mean over seeds: x, y and the x error bars.
AFL_MEAN_JS = """
const gd = document.querySelector('#tradeoff .js-plotly-plot');
const mean = gd._fullData.find(t => t.name === 'afl (3 seeds)');
return [mean.x[0], mean.y[0], mean.error_x.array[0], mean.error_x.arrayminus[0],
        gd._fullData.filter(t => t.legendgroup === 'afl').length];
"""


def value_of(browser, dropdown_id: str) -> str:
    """The value a Dash dropdown shows (its selected option's text)."""
    return browser.execute_script(
        f"return document.getElementById('{dropdown_id}').textContent || ''"
    )


def text(browser, element_id: str) -> str:
    return browser.execute_script(
        f"return (document.getElementById('{element_id}') || {{}}).textContent || ''"
    )


def test_the_page_opens_on_the_ranked_runs_and_the_baseline_comparison(
    comparison, browser, tmp_path
):
    # a viewport of exactly 1280 x 800 CSS pixels (the window's size includes no chrome)
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False},
    )
    server = DashboardServer(create_app([comparison], interval_s=1.0), port=0).start()
    try:
        browser.get(server.url)
        wait_until(browser, RENDERED_JS, timeout=60)
        table, plot, width, height, scrolled = wait_until(browser, FOLD_JS, timeout=30)
        assert (width, height, scrolled) == (1280, 800, 0)
        assert table <= height and plot <= height, (table, plot, height)
        # Round 5. AFL: everyone at 0.6 + 0.01 s: worst 10 % 61 % over seeds 0-2, std 0,
        # Jain 1. q-FFL: 55 %. FedAvg: client 0 worst at 0.5 + 0.01 s (51 %); its mean is
        # (8.25 + 1) / 12 + 0.01 = 78.1 %.
        rows = browser.execute_script(RANKED_JS)
        assert [row[1] for row in rows] == ["afl", "qffl", "fedavg"]
        assert rows[0][2:7] == ["3", "61.0 %", "61.0 %", "0.0", "1.000"]
        assert rows[2][2:5] == ["3", "51.0 %", "78.1 %"]
        # AFL's mean over seeds at (61, 61) with error bars from 60 to 62 on each axis;
        # its three seeds are points of their own
        x, y, up, down, traces = browser.execute_script(AFL_MEAN_JS)
        assert (x, y, up, down, traces) == pytest.approx((61, 61, 1, 1, 2))
        shoot(browser, tmp_path, "dashboard-ranked.png")

        # The per-client view: FedAvg (the comparison's baseline) against AFL, the best
        # ranked, each client's mean over the three seeds: 0.6 - min(1, 0.05 i + 0.5)
        wait_until(browser, COMPARED_JS, timeout=30)
        assert value_of(browser, "baseline").startswith("fedavg")
        assert value_of(browser, "compare-with").startswith("afl")
        gainers = text(browser, "gainers")
        assert (
            "12 clients: 2 gain, 9 lose under B = afl (mean of 3 seeds) against "
            "A = fedavg (mean of 3 seeds)" in gainers
        )
        assert "client 0: +10.0 points" in gainers and "client 11: -40.0 points" in gainers
        search = browser.execute_script("return location.search")
        assert search == "?run=fedavg+seed+0&baseline=fedavg&compare=afl"
        browser.execute_script("document.getElementById('baseline').scrollIntoView()")
        shoot(browser, tmp_path, "dashboard-baseline.png")

        # Another baseline: the address follows; a reload restores it
        choose(browser, "baseline", "qffl")
        wait_until(browser, "return location.search.includes('baseline=qffl')", timeout=30)
        assert browser.execute_script("return location.search") == (
            "?run=fedavg+seed+0&baseline=qffl&compare=afl"
        )
        wait_until(
            browser,
            "return document.getElementById('address').textContent"
            ".endsWith('?run=fedavg+seed+0&baseline=qffl&compare=afl')",
            timeout=30,
        )
        browser.refresh()
        wait_until(browser, RENDERED_JS, timeout=60)
        wait_until(browser, COMPARED_JS, timeout=30)
        assert value_of(browser, "baseline").startswith("qffl")
        # q-FFL gives every client 55 %, AFL 61 % on average over its seeds: all gain 6
        gainers = text(browser, "gainers")
        assert "12 clients: 12 gain, 0 lose under B = afl (mean of 3 seeds) against A = qffl" in (
            gainers
        )
        browser.execute_script("document.getElementById('baseline').scrollIntoView()")
        shoot(browser, tmp_path, "dashboard-url.png")
    finally:
        server.stop()
