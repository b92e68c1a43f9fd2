"""docs/results/afl-liar-curve.json (experiments/afl_liar_curve.py): the threat model's numbers.

The Markdown table beside the JSON is rendered from it, one seed's run reruns to the
committed shares, and the threat model quotes the table's loss-clip-mad=3 row.
"""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results" / "afl-liar-curve.json"


def _load(name: str):
    # liar_share first: the curve script imports it from its own folder.
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


_load("liar_share")
afl_liar_curve = _load("afl_liar_curve")


@pytest.fixture(scope="module")
def committed():
    return json.loads(RESULTS.read_text())


def test_the_table_is_rendered_from_the_committed_json(committed):
    assert RESULTS.with_suffix(".md").read_text() == afl_liar_curve.render(committed)


def test_a_seed_reruns_to_the_committed_shares(committed):
    rerun = afl_liar_curve.curves([0])
    kept = [row for row in committed["rows"] if row["seed"] == 0]
    assert rerun == kept


def mean_shares(rows, lie):
    """The liar's mean share (%) over the seeds at rounds 1, 5, 20 and 50."""
    curves = [row["shares"] for row in rows if row["lie"] == lie]
    return [round(100 * sum(c[k - 1] for c in curves) / len(curves)) for k in (1, 5, 20, 50)]


def test_the_threat_model_quotes_the_clip_rows(committed):
    clipped = [row for row in committed["rows"] if row["defence"] == "loss-clip-mad=3"]
    liar, honest = mean_shares(clipped, "loss x10"), mean_shares(clipped, "clean")
    text = " ".join((ROOT / "docs/site/explanation/threat-model.md").read_text().split())
    assert (
        f"is {liar[0]} % at round 1, {liar[1]} % at round 5, {liar[2]} % at round 20 and "
        f"{liar[3]} % at round 50, against {honest[0]} %, {honest[1]} %, {honest[2]} % and "
        f"{honest[3]} % for the same client honest"
    ) in text
    assert "python experiments/afl_liar_curve.py --out docs/results/afl-liar-curve.json" in text
