"""The dashboard says whether a run was securely aggregated (issue #48)."""

from __future__ import annotations

from fairfl.dashboard import facts
from fairfl.dashboard.follow import RunFollower


def test_the_run_facts_say_how_the_run_aggregated(tmp_path):
    run = RunFollower(tmp_path, "qffl")
    run.planned_config = {"strategy": "qffl", "secure-aggregation": "secagg+"}
    assert facts.run_facts(run, None)["Run"]["aggregation"] == (
        "secure (secagg+): the server read only the sum of the clients' updates"
    )
    run.planned_config = {"strategy": "qffl"}  # a run from before the key: in the clear
    assert facts.run_facts(run, None)["Run"]["aggregation"].startswith("in the clear")
