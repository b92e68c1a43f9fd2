"""The docs' telemetry page: its benchmark figures are those of the committed result."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _section() -> str:
    return (ROOT / "docs/site/howto/send-telemetry.md").read_text(encoding="utf-8")


def test_cost_figures_come_from_the_benchmarks_file_and_the_screenshot_is_shown():
    # The figures are in the generated Benchmarks page (tests/readme/test_readme_benchmarks.py).
    section = _section()
    assert "bench_telemetry.py" in section
    assert '"Telemetry cost" under' in section
    assert (
        "telemetry" in json.loads((ROOT / "docs/results/benchmarks.json").read_text())["benchmarks"]
    )
    assert re.search(r"!\[[^]]*\]\(\.\./\.\./figures/tensorboard\.png\)", section)
    assert (ROOT / "docs/figures/tensorboard.png").stat().st_size > 10_000


def test_the_example_changes_two_lines_of_flowers_quickstart():
    server = (ROOT / "examples/quickstart-telemetry/telemetry_quickstart/server_app.py").read_text()
    marked = [line for line in server.splitlines() if line.endswith(("# added", "# changed"))]
    assert marked == [
        "from fairfl.telemetry import with_telemetry  # added",
        "    strategy = with_telemetry(FedAvg(fraction_train=fraction_train), context)  # changed",
    ]
    assert "+from fairfl.telemetry import with_telemetry" in _section()
