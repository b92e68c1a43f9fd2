"""README figures that come from docs/results files agree with those files."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_import_time_figures_match_the_benchmark_result():
    result = json.loads((ROOT / "docs/results/import-time/import-time.json").read_text())
    best, ratio = result["best_ms"], result["ratio_to_baseline"]
    sentence = re.search(
        r"`flwr\.serverapp\.strategy` ([\d,]+) ms, `fairfl\.strategies` ([\d,]+) ms "
        r"\(\*\*([\d.]+)×: goal (met|missed)\*\*\),\s+`fairfl\.client` ([\d,]+) ms \(([\d.]+)×",
        README,
    )
    assert sentence, "the import-time sentence is missing from the README"
    flwr_ms, fairfl_ms, fairfl_x, verdict, client_ms, client_x = sentence.groups()
    assert int(flwr_ms.replace(",", "")) == round(best["flwr.serverapp.strategy"])
    assert int(fairfl_ms.replace(",", "")) == round(best["fairfl.strategies"])
    assert int(client_ms.replace(",", "")) == round(best["fairfl.client"])
    assert float(fairfl_x) == round(ratio["fairfl.strategies"], 2)
    assert float(client_x) == round(ratio["fairfl.client"], 1)
    assert verdict == ("met" if result["goal_met"] else "missed")
