"""Ditto's personal models and FairFed's group gaps in the dashboard, in a real browser.

Two finished runs, written as the runners write ``rounds.jsonl``: a Ditto run whose
clients report a personal model beside the global one, and a FairFed run whose
clients report ``group-counts``. The fairness view's curves gain a row (subplot) per
personal and group metric, drawn at the values worked by hand below. The dashboard
runs in a thread the test stops.
"""

from __future__ import annotations

import pytest

from fairfl.dashboard import DashboardServer, create_app
from fairfl.dashboard.browser import RENDERED_JS, wait_until

pytestmark = pytest.mark.integration

# Ditto: global accuracies (0.5, 0.7), personal (0.9, 0.6): personal mean 75 %, and with
# two clients the worst 10 % is the worst client, 60 %.
PERSONAL = [0.9, 0.6]
# FairFed: two clients' counts, cell 4a + 2y + ŷ. Pooled: A=0 (5, 1, 1, 3), A=1 (1, 2, 1, 4).
# Selection rates 4/10 and 6/8: demographic-parity gap 0.35. TPR 3/4 and 4/5 (gap 0.05),
# FPR 1/6 and 2/3 (gap 0.5): equalised-odds gap max(0.05, 0.5) = 0.5.
COUNTS = [[3, 1, 1, 1, 1, 1, 0, 2], [2, 0, 0, 2, 0, 1, 1, 2]]
EXPECTED = {
    "Personal models: mean accuracy (%)": ("ditto", 75.0),
    "Personal models: worst 10 % (%)": ("ditto", 60.0),
    "Demographic-parity gap (0-1)": ("fairfed", 0.35),
    "Equalised-odds gap (0-1)": ("fairfed", 0.5),
}

#: {subplot title: {trace name: its y values}} of the fairness view's curves: the
#: titles are the layout's annotations in row order, and row k's traces use axis y<k>.
SUBPLOTS_JS = """
const gd = document.querySelector('#metrics .js-plotly-plot');
if (!gd || !gd._fullLayout || !gd.layout.annotations) return null;
const out = {};
gd.layout.annotations.forEach((note, i) => {
  const axis = i === 0 ? 'y' : 'y' + (i + 1);
  const traces = gd._fullData.filter(t => (t.yaxis || 'y') === axis);
  out[note.text] = Object.fromEntries(traces.map(t => [t.name, Array.from(t.y)]));
});
return out;
"""


def _write_run(folder, line, lines, extra_of_client):
    folder.mkdir(parents=True)
    entries = []
    for number in (1, 2):
        entry = line(number, [0.5, 0.7])
        for i, client in enumerate(entry["clients"]):
            client.update(extra_of_client(i))
        entries.append(entry)
    (folder / "rounds.jsonl").write_bytes(lines(*entries))


def test_personal_and_group_rows_appear(tmp_path, browser, line, lines):
    ditto, fairfed = tmp_path / "ditto", tmp_path / "fairfed"
    _write_run(
        ditto,
        line,
        lines,
        lambda i: {"personal_eval_acc": PERSONAL[i], "personal_eval_loss": 0.5},
    )
    _write_run(fairfed, line, lines, lambda i: {"group_counts": COUNTS[i]})
    server = DashboardServer(create_app([ditto, fairfed], interval_s=0.5), port=0).start()
    try:
        browser.get(server.url)
        wait_until(browser, RENDERED_JS, timeout=60)
        subplots = wait_until(browser, SUBPLOTS_JS, timeout=30)
        for title, (run, value) in EXPECTED.items():
            assert title in subplots, sorted(subplots)
            # The run that recorded the metric is drawn flat at its value, both rounds;
            # the other run has no value in that row.
            assert subplots[title][run] == pytest.approx([value, value], abs=1e-9), title
            other = "fairfed" if run == "ditto" else "ditto"
            assert all(v is None for v in subplots[title].get(other, [])), title
        shot = tmp_path / "dashboard-personal-group.png"
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    finally:
        server.stop()
