"""examples/quickstart-pytorch-fairfl, a user's Flower app, runs every kind of fair rule.

Each test runs exactly what the example's README says, ``flwr run <example> --stream
-c "strategy='<rule>' num-server-rounds=2"``, on Flower's default local connection and
federation (2 simulated SuperNodes) with a fresh FLWR_HOME. The rules cover the client
reports of ``fairfl.client.fair_train`` that go beyond plain training: q-FFL (h_k),
Equitable FL (activation vector by a hook: the example's model has no ``features()``)
and RC-FL (joint (ω, η) steps). Plain training (FedMGDA+, FedAvg, ...) has no branch of
its own; each run here trains plainly too, and at about a minute of CPU a run it is not
run separately.

The ``flower`` fixture (``conftest.py``) starts Flower's local SuperLink by PID.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.examples.flower_run import flwr_run

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "quickstart-pytorch-fairfl"


@pytest.mark.integration
@pytest.mark.parametrize("rule", ["qffl", "equitable", "rcfl"])
def test_example_runs_the_rule_with_flwr_run(flower, tmp_path, rule):
    code, text = flwr_run(
        EXAMPLE,
        flower,
        tmp_path / "flwr.log",
        "-c",
        f"strategy='{rule}' num-server-rounds=2",
        cwd=tmp_path,
        timeout=300,
    )
    assert code == 0, text[-5000:]
    # `flwr run --stream` exits 0 whatever the run did: the ServerApp's last line says.
    assert f"quickstart-pytorch-fairfl: strategy={rule} aggregated-rounds=[1, 2]" in text, text[
        -5000:
    ]
    assert "dropped reply" not in text
    # The app reports each node's partition id: per-client state is keyed by device.
    assert "reports no 'partition-id'" not in text
    accuracy = re.search(r"eval-acc=\{1: [0-9.]+, 2: ([0-9.]+)\}", text)
    assert accuracy is not None, text[-3000:]
    assert float(accuracy.group(1)) > 0.1  # better than chance on 10 digits
