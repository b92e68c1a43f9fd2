"""The dashboard in a real browser (headless Debian Chromium through Selenium).

The first test follows an in-process federation while it runs, then opens every tab
(each draws when first opened), re-sorts the heat map and checks that plotly.js came
from the cartesian bundle; the second feeds a folder that appears late, with a
malformed and a truncated line. Each starts the dashboard in a thread it stops, and the
run in a subprocess it ends by PID.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from plotly.offline import get_plotlyjs_version

from fairfl.dashboard import DashboardServer, create_app
from fairfl.dashboard.browser import HEATMAP_ROWS_JS, RENDERED_JS, open_view, rows_js, wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = 4
ROUNDS = 6

# An in-process federation whose train replies each take 0.1 s more, so that a round
# lasts at least the page's refresh interval (0.5 s) even on a fast machine.
RUN = textwrap.dedent(
    f"""
    import sys, time
    from fairfl.simulation import run_inprocess

    def paced(instruction, reply):
        if instruction.metadata.message_type == "train":
            time.sleep(0.1)
        return reply

    config = {{"num-partitions": {CLIENTS}, "num-server-rounds": {ROUNDS}, "local-epochs": 1}}
    run_inprocess({{**config, "out-dir": sys.argv[1]}}, reply_filter=paced)
    """
)


def text_of(driver, element_id: str) -> str:
    return driver.execute_script(TEXT_JS.format(element_id))


def shows(element_id: str, text: str) -> str:
    """A script that is true once the element's text contains ``text``."""
    return TEXT_JS.format(element_id) + f".includes({text!r})"


TEXT_JS = "return ((document.getElementById('{}') || {{}}).textContent || '')"


def rounds_in(status_line: str) -> int:
    """The round count of the page's status line (-1 before the first round)."""
    match = re.search(r"rounds received: (\d+)", status_line)
    return int(match.group(1)) if match else -1


def test_page_follows_a_running_federation(tmp_path, browser):
    out = tmp_path / "run"  # does not exist yet: the run creates it
    log = (tmp_path / "run.log").open("wb")
    run = subprocess.Popen(
        [sys.executable, "-c", RUN, str(out)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
    )
    server = DashboardServer(create_app([out], interval_s=0.5), port=0).start()
    try:
        browser.get(server.url)
        seen: list[int] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            # Count and status from one read: the page may update between two reads.
            status_line = text_of(browser, "round-count")
            count = rounds_in(status_line)
            if count > 0 and (not seen or count != seen[-1]):
                seen.append(count)
            if "status: completed" in status_line:
                break
            assert run.poll() in (None, 0), (tmp_path / "run.log").read_text()[-2000:]
            time.sleep(0.2)
        assert "status: completed" in text_of(browser, "round-count"), seen
        # the count grew while the run went on: several values, increasing, up to the end
        assert len(seen) >= 3 and seen == sorted(seen) and seen[-1] == ROUNDS, seen
        wait_until(browser, RENDERED_JS, timeout=30)
        assert wait_until(browser, HEATMAP_ROWS_JS, timeout=30) == CLIENTS
        assert "1 of 1 runs finished" in text_of(browser, "sources")
        shot = tmp_path / "dashboard-live.png"
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
        check_views(browser, out)
    finally:
        server.stop()
        if run.poll() is None:
            run.kill()
        run.wait(timeout=30)
        log.close()


#: The paths of what the page loaded (without their ``?m=...`` cache keys).
LOADED_JS = "return performance.getEntriesByType('resource').map(e => new URL(e.name).pathname)"


def first_row_is(prefix: str) -> str:
    """A script that is true once the client heat map's first row label starts so."""
    return (
        "const gd = document.querySelector('#client-heatmap .js-plotly-plot');"
        f"return !!gd && String(gd._fullData[0].y[0]).startsWith({prefix!r})"
    )


def check_views(browser, out: Path) -> None:
    """plotly.js is the cartesian bundle; every tab draws; the heat map re-sorts."""
    loaded = browser.execute_script(LOADED_JS)
    assert "/assets/plotly-cartesian.min.js" in loaded, loaded
    assert not any(path.endswith("/plotly.min.js") for path in loaded), loaded
    assert browser.execute_script("return window.Plotly.version") == get_plotlyjs_version()
    open_view(browser, "rule")
    # FedAvg's weights: one row per client; its scalar diagnostics drawn alongside
    assert wait_until(browser, rows_js("weights"), timeout=30) == CLIENTS
    assert browser.execute_script("return !!document.querySelector('#client-heatmap')") is False
    open_view(browser, "participation")
    assert "no reply dropped" in text_of(browser, "drops")
    open_view(browser, "facts")
    wait_until(browser, shows("facts", f"planned rounds{ROUNDS}"), timeout=30)
    open_view(browser, "fairness")
    assert wait_until(browser, HEATMAP_ROWS_JS, timeout=30) == CLIENTS
    # sort by final accuracy: the worst client of the last round first (ties by id)
    last = json.loads((out / "rounds.jsonl").read_text().splitlines()[-1])
    worst = min(last["clients"], key=lambda c: (c["eval_acc"], c["partition_id"]))
    browser.find_element("css selector", "#sort input[value='final']").click()
    wait_until(browser, first_row_is(f"client {worst['partition_id']} ("), timeout=30)


def test_late_folder_with_malformed_and_truncated_lines(tmp_path, browser, line, lines):
    folder = tmp_path / "later"
    server = DashboardServer(create_app([folder], interval_s=0.5), port=0).start()
    try:
        browser.get(server.url)
        wait_until(browser, shows("sources", "waiting for the folder to appear"), timeout=30)
        third = lines(line(3, [0.25, 0.5, 1.0]))
        folder.mkdir()
        (folder / "rounds.jsonl").write_bytes(
            lines(line(1, [0.0, 0.5, 1.0]), line(2, [0.5, 0.5, 1.0]))
            + b'{"round": 9, "clients": [\n'  # a killed writer's half line, then more
            + third[:30]
        )
        wait_until(browser, shows("round-count", "rounds received: 2"), timeout=30)
        wait_until(browser, shows("notes", "last line incomplete"), timeout=30)
        assert rounds_in(text_of(browser, "round-count")) == 2
        notes = text_of(browser, "notes")
        assert "2 line(s) of rounds.jsonl not shown" in notes
        assert "rounds.jsonl:3: skipped: not valid JSON" in notes
        assert "rounds.jsonl:4: last line incomplete (30 bytes without a newline)" in notes
        assert wait_until(browser, HEATMAP_ROWS_JS, timeout=30) == 3
        with (folder / "rounds.jsonl").open("ab") as handle:
            handle.write(third[30:])
        wait_until(browser, shows("round-count", "rounds received: 3"), timeout=30)
        notes = text_of(browser, "notes")
        assert "1 line(s) of rounds.jsonl not shown" in notes and "incomplete" not in notes
        shot = tmp_path / "dashboard-notes.png"
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    finally:
        server.stop()
