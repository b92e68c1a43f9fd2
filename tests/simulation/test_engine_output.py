"""A run through Flower's engine shows one run id: fairfl's (issue #50).

``flwr run`` prints Flower's run id (its SuperLink's, which the engine stops with the run)
at the start and its log repeats it; fairfl's final line names fairfl's run id (that of
``summary.json``). The relay puts fairfl's in place of Flower's, so the start line and
the final line name the same run. No ``flwr run`` here: its lines are written out.
"""

import io
import re

from fairfl.simulation.engine import final_line, relabel_flower_line, relay_flower_output

RUN_ID = "3f2a9c0d1e4b4f6a8b7c6d5e4f3a2b1c"
FLOWER_OUTPUT = [
    b"Loading project configuration...\n",
    b"Successfully started run 8301764329\n",
    b"\x1b[92mINFO \x1b[0m:      Starting logstream for run_id `8301764329`\n",
    b"\x1b[92mINFO \x1b[0m:      [ROUND 1]\n",
]


def test_the_start_line_and_the_final_line_name_fairfls_run_id_only():
    shown = io.StringIO()
    relay_flower_output(FLOWER_OUTPUT, shown, RUN_ID)
    # fractions shown in %, two decimals: 0.5 -> 50.00, 0.25 -> 25.00, 0.125 -> 12.50
    summary = {
        "run_id": RUN_ID,
        "final_metrics": {
            "num-clients": 4,
            "acc-mean": 0.5,
            "acc-worst-10": 0.25,
            "acc-std": 0.125,
        },
    }
    lines = [*shown.getvalue().splitlines(), final_line(summary)]
    assert lines == [
        "Loading project configuration...",
        f"run {RUN_ID}: started on Flower's simulation engine",
        "\x1b[92mINFO \x1b[0m:      [ROUND 1]",
        f"run {RUN_ID}: final client accuracy: mean 50.00 %, worst-10% 25.00 %, std 12.50",
    ]
    assert "8301764329" not in "\n".join(lines)
    assert set(re.findall(r"run ([0-9a-f]{32})", "\n".join(lines))) == {RUN_ID}


def test_other_lines_pass_unchanged():
    line = "WARNING :   Run 12 of the strategy: started\n"
    assert relabel_flower_line(line, RUN_ID) == line
