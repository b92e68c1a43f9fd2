"""The dashboard's curves of Ditto's personal models."""

import pytest

from fairfl.dashboard.figures import CURVE_TITLES
from fairfl.dashboard.follow import parse_entry
from fairfl.metrics import in_percent


def test_dashboard_plots_the_personal_models_curves():
    clients = [
        {"node_id": n, "partition_id": n, "num_examples": 10, "eval_acc": a, "eval_loss": 1.0}
        | {"personal_eval_acc": p, "personal_eval_loss": 0.5}
        for n, a, p in [(0, 0.5, 0.9), (1, 0.7, 0.6)]
    ]
    parsed = parse_entry({"round": 1, "clients": clients})
    # Two clients: mean (0.9 + 0.6) / 2 = 0.75; the worst 10 % is the worst one, 0.6.
    assert parsed.metrics["personal-acc-mean"] == pytest.approx(0.75, abs=1e-15)
    assert parsed.metrics["personal-acc-worst-10"] == pytest.approx(0.6, abs=1e-15)
    assert parsed.metrics["acc-mean"] == pytest.approx(0.6, abs=1e-15)
    assert in_percent(parsed.metrics)["personal-acc-mean"] == pytest.approx(75.0)
    assert "Personal models: mean accuracy (%)" in CURVE_TITLES.values()
