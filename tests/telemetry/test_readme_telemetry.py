"""README's Telemetry section: its benchmark figures are those of the committed result."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("## Telemetry")
    return text[start : text.index("\n## ", start + 1)]


def test_benchmark_figures_match_the_result_file():
    result = json.loads((ROOT / "docs/results/telemetry/bench_telemetry.json").read_text())
    section = _section()
    jsonl, all_sinks = result["record_ms"]["jsonl"], result["record_ms"]["all"]
    assert f"takes {jsonl:.1f} ms with `rounds.jsonl` alone" in section
    assert f"{all_sinks:.1f} ms with all four sinks" in section
    assert f"{all_sinks - jsonl:.1f} ms added per round = {result['record_added_pct']:.2f} %" in (
        section
    )
    assert result["record_added_pct"] <= 5.0
    assert "bench_telemetry.py" in section
    assert re.search(r"!\[[^]]*\]\(docs/figures/tensorboard\.png\)", section)
    assert (ROOT / "docs/figures/tensorboard.png").stat().st_size > 10_000


def test_the_example_changes_two_lines_of_flowers_quickstart():
    server = (ROOT / "examples/quickstart-telemetry/telemetry_quickstart/server_app.py").read_text()
    marked = [line for line in server.splitlines() if line.endswith(("# added", "# changed"))]
    assert marked == [
        "from fairfl.telemetry import with_telemetry  # added",
        "    strategy = with_telemetry(FedAvg(fraction_train=fraction_train), context)  # changed",
    ]
    assert "+from fairfl.telemetry import with_telemetry" in _section()
