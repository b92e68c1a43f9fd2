"""The page without a browser: what a load and each callback send (Flask's test client).

A page load must build the first view alone ("Fairness and clients"); another view is
built when its tab is opened, and a part is sent again only when what it shows changed.
plotly.js is the cartesian bundle while its version is the installed Plotly's.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from fairfl.dashboard import app as page
from fairfl.dashboard import create_app

#: What the comparison of every run above the views sends when first drawn.
COMPARISON = {"ranking", "tradeoff", "comparison", "gainers", "baseline", "compare-with"}
#: What each view sends the first time it is drawn (besides the round count).
FAIRNESS = {"metrics", "client-heatmap", "distribution"}
RULE = {"weights", "diagnostics", "per-client-key", "per-client"}
OTHERS = {"standing", "participation", "drops", "facts"}


def train_record(weights: list[float]) -> dict[str, Any]:
    return {
        "accepted": len(weights),
        "dropped": {},
        "weights": [
            {"node_id": 1001 + i, "partition_id": i, "weight": w} for i, w in enumerate(weights)
        ],
        "diagnostics": {"lambda-max": max(weights), "rcfl-q": {"1001": 1.5, "1002": 2.0}},
    }


@pytest.fixture
def folder(tmp_path, line, lines):
    """Two runs below one folder: ``a`` with two rounds, ``b`` with one."""
    for name, count in (("a", 2), ("b", 1)):
        run = tmp_path / name
        run.mkdir()
        train = train_record([0.75, 0.25])
        entries = [line(n, [0.5, 0.25], train=train) for n in range(1, count + 1)]
        (run / "rounds.jsonl").write_bytes(lines(*entries))
    return tmp_path


class Page:
    """Calls the page's callbacks as the browser does, through Flask's test client."""

    def __init__(self, folder, **values: Any):
        # a 20 ms interval: the registry reads the disk again after 10 ms
        self.client = create_app([folder], interval_s=0.02).server.test_client()
        self.dependencies = self.client.get("/_dash-dependencies").get_json()
        self.values: dict[str, Any] = {"view": "fairness", "sort": "client", **values}

    def layout(self) -> dict[str, dict[str, Any]]:
        """Every component of the page that has an id, by id: its props."""
        found: dict[str, dict[str, Any]] = {}

        def walk(node: Any) -> None:
            if isinstance(node, list):
                for child in node:
                    walk(child)
            elif isinstance(node, dict) and "props" in node:
                props = node["props"]
                if "id" in props:
                    found[props["id"]] = props
                walk(props.get("children"))

        walk(self.client.get("/_dash-layout").get_json())
        return found

    def call(self, trigger: str, changed: list[str]) -> dict[str, Any] | None:
        """Run the callback whose first input is ``trigger``; its outputs, None for 204.

        The outputs it sets are kept as the page's values (as the browser would).
        """
        (dependency,) = [d for d in self.dependencies if d["inputs"][0]["id"] == trigger]
        outputs = [
            {"id": o.split(".")[0], "property": o.split(".")[1]}
            for o in dependency["output"].strip(".").split("...")
        ]
        key = {"data": "{}", "value": "{}", "search": "{}", "n_intervals": "{}"}
        single = not dependency["output"].startswith("..")  # one output: not in a list
        body = {
            "output": dependency["output"],
            "outputs": outputs[0] if single else outputs,
            "inputs": [
                {**i, "value": self.values.get(key[i["property"]].format(i["id"]))}
                for i in dependency["inputs"]
            ],
            "state": [
                {**s, "value": self.values.get(key[s["property"]].format(s["id"]))}
                for s in dependency["state"]
            ],
            "changedPropIds": changed,
        }
        answer = self.client.post("/_dash-update-component", json=body)
        if answer.status_code == 204:
            return None
        assert answer.status_code == 200, answer.data[:500]
        response = answer.get_json()["response"]
        for component, props in response.items():
            for prop, value in props.items():
                if prop in ("data", "value"):
                    self.values[component] = value
        return response

    def draw(self, *changed: str) -> set[str] | None:
        """The ids the draw callback sent (None: nothing to send)."""
        response = self.call("version", list(changed))
        return None if response is None else set(response)


def start(folder, **values: Any) -> Page:
    """A page as a browser gets it: its layout's values, then the first draw."""
    visit = Page(folder, **values)
    layout = visit.layout()
    visit.values.update(version=layout["version"]["data"], run=layout["run"]["value"])
    return visit


def test_a_page_load_builds_the_first_view_only(folder):
    visit = start(folder)
    assert visit.values["run"] == "a"  # the first run with rounds
    sent = visit.draw()
    assert sent == COMPARISON | FAIRNESS | {"round-count", "headline", "shown"}
    assert not sent & (RULE | OTHERS)


def test_the_layout_arrives_with_the_runs_on_disk(folder):
    layout = Page(folder).layout()
    assert layout["version"]["data"] == 1  # read once, when the page was asked for
    assert [o["value"] for o in layout["run"]["options"]] == ["a", "b"]
    assert layout["run"]["value"] == "a"
    assert "2 runs" in str(layout["sources"]["children"])


def test_other_views_are_built_when_opened_and_parts_only_when_stale(folder):
    visit = start(folder)
    visit.draw()
    visit.values["view"] = "rule"
    assert visit.draw("view.value") == RULE | {"shown"}
    assert visit.values["per-client-key"] == "rcfl-q"  # the first per-client diagnostic
    assert visit.draw("view.value") is None  # nothing changed: nothing sent
    visit.values["view"] = "participation"
    assert visit.draw("view.value") == {"standing", "participation", "drops", "shown"}
    visit.values["view"] = "fairness"
    assert visit.draw("view.value") is None  # still what it drew first
    visit.values["sort"] = "final"
    assert visit.draw("sort.value") == {"client-heatmap", "shown"}  # the rows' order alone


def test_another_run_redraws_the_open_view(folder):
    visit = start(folder)
    visit.draw()
    visit.values["run"] = "b"
    sent = visit.draw("run.value")
    # the fairness curves and the comparison cover every run: unchanged, not sent again
    assert sent == {"client-heatmap", "distribution", "round-count", "headline", "shown"}


def test_run_in_the_address_picks_the_run(folder):
    visit = start(folder, url="?run=b")
    response = visit.call("version", [])
    assert response["run"]["value"] == "b"
    assert response["round-count"]["children"].startswith("rounds received: 1 ")


def test_poll_answers_only_when_the_disk_changed(folder, line, lines):
    visit = start(folder)
    assert visit.call("tick", ["tick.n_intervals"]) is None
    with (folder / "b" / "rounds.jsonl").open("ab") as handle:
        handle.write(lines(line(2, [1.0, 1.0])))
    time.sleep(0.05)  # past the registry's 10 ms between reads
    sent = visit.call("tick", ["tick.n_intervals"])
    assert {"version", "sources", "notes", "run"} == set(sent)
    assert visit.values["version"] == 2 and visit.values["run"] == "a"
    assert sent["sources"]  # the page's head is sent with the new version


def test_bundle_version_reads_the_licence_header(tmp_path):
    bundle = tmp_path / "bundle.js"
    bundle.write_text("/**\n* plotly.js (cartesian - minified) v4.1.1\n* Copyright\n*/\n(")
    assert page.bundle_version(bundle) == "4.1.1"
    bundle.write_text("/* some other script v4.1.1 */")
    assert page.bundle_version(bundle) is None
    assert page.bundle_version(tmp_path / "missing.js") is None
    # the bundle in the package is plotly.js 4.1.1's (plotly.js-cartesian-dist-min@4.1.1)
    assert page.bundle_version(page.CARTESIAN_BUNDLE) == "4.1.1"


def test_the_cartesian_bundle_is_served_only_for_its_plotly(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(page, "get_plotlyjs_version", lambda: "4.1.1")
    client = create_app([tmp_path]).server.test_client()
    assert "/assets/plotly-cartesian.min.js" in client.get("/").get_data(as_text=True)
    assert client.get("/assets/plotly-cartesian.min.js").status_code == 200

    monkeypatch.setattr(page, "get_plotlyjs_version", lambda: "9.0.0")
    with caplog.at_level(logging.WARNING, logger="fairfl.dashboard.app"):
        client = create_app([tmp_path]).server.test_client()
    assert "plotly-cartesian" not in client.get("/").get_data(as_text=True)
    assert "is plotly.js 4.1.1, the installed Plotly wants 9.0.0" in caplog.text


@pytest.fixture
def two_rules(tmp_path, line, lines):
    """FedAvg (clients at 50, 25, 75 %) and q-FFL (everyone at 50 %), one round each."""
    for name, accuracies in (("qffl", [0.5, 0.5, 0.5]), ("fedavg", [0.5, 0.25, 0.75])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "rounds.jsonl").write_bytes(lines(line(1, accuracies)))
    return tmp_path


def test_the_comparison_opens_on_the_baseline_against_the_best_ranked_rule(two_rules):
    visit = start(two_rules)
    first = visit.call("version", [])
    # FedAvg is the baseline although listed second; q-FFL ranks first (worst 10 % of 3
    # clients is the worst one: 50 % against FedAvg's 25 %)
    assert visit.values["baseline"] == "fedavg" and visit.values["compare-with"] == "qffl"
    assert [o["value"] for o in first["baseline"]["options"]] == ["fedavg", "qffl"]
    text = str(first["gainers"]["children"])
    # client 1 gains 25 points under qffl, client 2 loses 25; client 0 is unchanged
    assert "3 clients: 1 gain, 1 lose under B = qffl against A = fedavg" in text
    assert "client 1: +25.0 points" in text and "client 2: -25.0 points" in text
    # the ranked table: q-FFL first; FedAvg's mean (50 + 25 + 75) / 3 = 50 %, its std
    # sqrt((0 + 625 + 625) / 3) = 20.4 points, Jain 150² / (3 (2500 + 625 + 5625)) = 0.857
    table = str(first["ranking"]["children"])
    assert table.index("qffl") < table.index("fedavg")
    assert "'20.4'" in table and "'0.857'" in table and "'1.000'" in table
    # the headline of the run shown (FedAvg, first with rounds): client 1 worst at 25 %
    assert "client 1: 25.0 %" in str(first["headline"]["children"])


def test_the_choices_go_into_the_address_and_come_back_from_it(two_rules):
    visit = start(two_rules)
    visit.call("version", [])
    response = visit.call("run", ["baseline.value"])
    assert response["url"]["search"] == "?run=fedavg&baseline=fedavg&compare=qffl"
    assert response["address"]["children"].endswith(": ?run=fedavg&baseline=fedavg&compare=qffl")
    # a reload of an address with the roles swapped opens on them
    again = start(two_rules, url="?run=qffl&baseline=qffl&compare=fedavg")
    first = again.call("version", [])
    assert again.values["baseline"] == "qffl" and again.values["compare-with"] == "fedavg"
    assert first["run"]["value"] == "qffl"
    assert "under B = fedavg against A = qffl" in str(first["gainers"]["children"])
    # a choice no longer on disk falls back to the defaults
    stale = start(two_rules, url="?baseline=gone")
    stale.call("version", [])
    assert stale.values["baseline"] == "fedavg"
