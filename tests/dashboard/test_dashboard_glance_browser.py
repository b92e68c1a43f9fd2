"""What the dashboard answers first, in a real browser (headless Debian Chromium).

Two rules x three seeds, 12 clients, 5 rounds, written as ``fairfl compare`` lays them
out: the headline names the worst client, the heat map starts worst-first, each rule is
one mean line over its seeds (each seed on demand), and round ticks are integers. The
comparison of the runs above them (ranked table, trade-off, who gains and who loses) is
tested in ``test_dashboard_comparison_browser.py``. The dashboard runs in a thread the
test stops.
"""

from __future__ import annotations

import pytest

from fairfl.dashboard import DashboardServer, create_app
from fairfl.dashboard.browser import RENDERED_JS, wait_until
from tests.dashboard.conftest import write_comparison

pytestmark = pytest.mark.integration

CLIENTS = 12
ROUNDS = 5


def accuracies(rule: str, seed: int, number: int) -> list[float]:
    """FedAvg: client i at 0.05 i + 0.1 r (client 0 worst); AFL: everyone at 0.5 + 0.02 r."""
    if rule == "fedavg":
        values = [min(1.0, 0.05 * i + 0.1 * number) for i in range(CLIENTS)]
    else:
        values = [0.5 + 0.02 * number] * CLIENTS
    return [round(v + 0.01 * seed, 6) for v in values]


@pytest.fixture
def comparison(tmp_path):
    return write_comparison(tmp_path, {"fedavg": 3, "afl": 3}, ROUNDS, accuracies)


def text(browser, element_id: str) -> str:
    return browser.execute_script(
        f"return (document.getElementById('{element_id}') || {{}}).textContent || ''"
    )


LEGEND_JS = """
const gd = document.querySelector('#metrics .js-plotly-plot');
return gd ? gd._fullData.filter(t => t.showlegend).map(t => t.name) : [];
"""

TICKS_JS = """
const gd = document.querySelector('#metrics .js-plotly-plot');
return gd._fullLayout.xaxis5._vals.map(v => v.text);
"""


HEATMAP_JS = """
const gd = document.querySelector('#client-heatmap .js-plotly-plot');
if (!gd || !gd._fullData || !gd._fullData.length) return null;
return String(gd._fullData[0].y[0]);
"""


def test_the_page_answers_who_is_worst_off(comparison, browser, tmp_path):
    browser.set_window_size(1400, 1000)
    server = DashboardServer(create_app([comparison], interval_s=1.0), port=0).start()
    try:
        browser.get(server.url + "?run=fedavg+seed+0")
        wait_until(browser, RENDERED_JS, timeout=60)
        # headline: client 0 is worst in round 5 at 0.5 (it was at 0.1 in round 1)
        headline = text(browser, "headline")
        assert "client 0: 50.0 %" in headline and "+40.0 points since round 1" in headline
        # worst 10 % of 12 clients is the worst one; the mean of min(1, 0.05 i + 0.5) over
        # i = 0..11 is (sum of 0.5 .. 1.0 for i <= 10, then 1.0) / 12 = (8.25 + 1) / 12
        assert "worst 10 %50.0 %" in headline and "mean77.1 %" in headline
        # the heat map starts with the worst client
        first = wait_until(browser, HEATMAP_JS, timeout=30)
        assert first.startswith("client 0 (")
        # one mean line per rule; each seed's line only on demand
        assert sorted(wait_until(browser, LEGEND_JS, timeout=30)) == [
            "afl (mean of 3 seeds)",
            "fedavg (mean of 3 seeds)",
        ]
        ticks = browser.execute_script(TICKS_JS)
        assert ticks == ["1", "2", "3", "4", "5"], ticks
        browser.save_screenshot(str(tmp_path / "glance.png"))
        browser.find_element("css selector", "#seeds input").click()
        wait_until(
            browser,
            LEGEND_JS.replace("return gd ?", "return gd && gd._fullData.length > 40 ?"),
            timeout=30,
        )
        shot = tmp_path / "seeds.png"
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    finally:
        server.stop()
