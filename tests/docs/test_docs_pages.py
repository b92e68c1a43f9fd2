"""The deployment and dashboard tutorials ran, the paper grids show, the how-tos are listed.

Read from the HTML ``bash scripts/docs.sh`` wrote (the ``built_site`` fixture).
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest


def page_text(path: Path) -> str:
    """The page's HTML with tags removed and entities decoded (whitespace kept)."""
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text(encoding="utf-8")))


def table_row(path: Path, first_cell: str) -> str:
    """The text of the table row whose first cell is ``first_cell`` (cells split by |)."""
    source = path.read_text(encoding="utf-8")
    for row in re.findall(r"<tr.*?</tr>", source, flags=re.DOTALL):
        cells = [
            html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()
            for cell in re.findall(r"<td.*?</td>", row, flags=re.DOTALL)
        ]
        if cells and cells[0] == first_cell:
            return " | ".join(cells)
    raise AssertionError(f"{path.name}: no table row for {first_cell}")


def test_the_tls_tutorial_ran_a_federation_and_stopped_it(built_site):
    text = page_text(built_site / "tutorials" / "deploy-with-tls.html")
    assert "--enable-supernode-auth" in text and "--ssl-certfile" in text
    assert text.count("registered device-") == 2
    rounds = re.findall(r"^round (\d): accuracy \(%\) mean (\d+\.\d\d)", text, flags=re.MULTILINE)
    assert [r for r, _ in rounds] == ["1", "2", "3"]
    final = re.search(
        r"^final: accuracy \(%\) mean (\d+\.\d\d) \| worst-10% (\d+\.\d\d)", text, re.M
    )
    assert final and 0 <= float(final[2]) <= float(final[1]) <= 100
    assert "summary.json: completed, q-FFL" in text
    assert "3 rounds, chain intact" in text
    stopped = re.search(r"^stopped PIDs ((?:\d+ ?){3})$", text, flags=re.MULTILINE)
    assert stopped, "the session did not stop its three processes by PID"


def test_the_fairness_tutorial_read_tensorboard_and_the_dashboard_answers(built_site):
    text = page_text(built_site / "tutorials" / "watch-fairness.html")
    rows = re.findall(r"^\s+(\d)\s+(\d\.\d{3})\s+(\d\.\d{3})\s+(\d\.\d{3})$", text, re.M)
    assert [int(r[0]) for r in rows] == [1, 2, 3, 4, 5]
    for _, mean, worst, jain in rows:
        assert 0 <= float(worst) <= float(mean) <= 1 and 0 < float(jain) <= 1
    assert re.search(r"fairness/: \d+ series", text) and "client-acc/: 10 series" in text
    assert re.search(r"^worst client \d+: \d+\.\d %", text, flags=re.MULTILINE)
    # The text heat map: ten clients, worst-first by their round-5 accuracy.
    heat = re.findall(r"^\s*(\d+)((?:\s+\d+\.\d){5})$", text, flags=re.MULTILINE)
    assert len(heat) == 10
    final = [float(row[1].split()[-1]) for row in heat]
    assert final == sorted(final)


# The grids as the papers print them: paper 000 App. B.2 (VRed, Semi-VRed, q-FFL, TERM,
# PropFair, Δ-FL), paper 001 Table 5 (FedMGDA+'s η, AFL's γ_λ).
PAPER_GRIDS = [
    ("vred", "vred-beta", "0.01, 0.05, 0.1, 0.2, 0.5, 1.0"),
    ("semivred", "semivred-beta", "0.01, 0.05, 0.1, 0.2, 0.5, 1.0"),
    ("qffl", "qffl-q", "0.01, 0.1, 1.0"),
    ("term", "term-alpha", "0.01, 0.1, 0.5, 1.0"),
    ("propfair", "propfair-m", "2.0, 3.0, 4.0, 5.0"),
    ("deltafl", "deltafl-alpha", "0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9"),
    ("fedmgda", "fedmgda-global-lr", "0.5, 1.0, 1.5, 2.0"),
    ("afl", "afl-lambda-lr", "0.01, 0.1, 0.2, 0.5"),
    # No grid in the paper: GiFair's four values are not listed, RC-FL's α not given.
    ("gifair", "gifair-coeff", "the paper gives no grid"),
    ("rcfl", "rcfl-alpha", "the paper gives no grid"),
]


@pytest.mark.parametrize(("rule", "key", "grid"), PAPER_GRIDS)
def test_rule_pages_show_the_papers_grid_or_say_it_gives_none(built_site, rule, key, grid):
    row = table_row(built_site / "_generated" / "rules" / f"{rule}.html", key)
    assert row.endswith(f" | {grid}"), row


#: The how-to topics issue 38 lists -> the page that answers each.
HOWTO_TOPICS = {
    "resume": "resume-a-run",
    "defences against lying clients": "defend-against-lying-clients",
    "GPU clients": "use-a-gpu",
    "a Ray cluster": "run-on-a-ray-cluster",
    "Kubernetes": "run-on-kubernetes",
    "telemetry sinks": "send-telemetry",
    "the ledger and fairfl verify": "verify-a-run",
    "older flwr": "use-an-older-flwr",
    "the compiled Gram kernel": "use-the-compiled-gram-kernel",
}


@pytest.mark.parametrize(("topic", "page"), HOWTO_TOPICS.items())
def test_the_howto_index_lists_every_topic_of_the_issue(built_site, topic, page):
    index = (built_site / "howto" / "index.html").read_text(encoding="utf-8")
    assert f'href="{page}.html"' in index, f"how-to index: no link to {page} ({topic})"
    assert (built_site / "howto" / f"{page}.html").exists()


def test_the_howto_pages_executed_their_sessions(built_site):
    resume = page_text(built_site / "howto" / "resume-a-run.html")
    assert "4 rounds, chain intact" in resume
    verify = page_text(built_site / "howto" / "verify-a-run.html")
    assert "2 rounds, chain intact" in verify
    assert "round 1 was tampered with" in verify and "exit code 1" in verify
