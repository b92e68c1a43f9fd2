"""q-FFL under ``secure-aggregation = "secagg+"`` on a real federation (issue #48).

One SuperLink, its Fleet proxy and three SuperNodes (``deploy/localfed.py``: network
namespaces where they can be made, TLS and SuperNode authentication on, the operator's
``deploy/scripts``) run one round of q-FFL with SecAgg+ through ``flwr run``: every stage
of the protocol crosses the proxy as Fleet messages. The final model must equal the
in-process clear run's of the same seed within the documented quantisation bound
``n (2C + U) / Σ_k round(Q a_k / a_max)`` (U <= C; fairfl.secagg.protocol), and the
round's record must show the three clients in the sum and none lost.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from localfed import LocalFederation, app_run_config, why_no_proxy

pytestmark = pytest.mark.deployment

N_SUPERNODES = 3
C = 8.0  # secagg-clipping-range's default


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFederation]:
    reason = why_no_proxy()
    if reason is not None:
        pytest.skip(reason)
    network = os.environ.get("FAIRFL_DEPLOY_NETWORK", "auto")
    workdir = tmp_path_factory.mktemp("secagg") / "fed"
    with LocalFederation(workdir, supernodes=N_SUPERNODES, network=network) as federation:
        if federation.mode != "netns":
            msg = f"ran on loopback, not in network namespaces: {federation.fallback_reason}"
            warnings.warn(msg, stacklevel=1)
        yield federation


def test_qffl_under_secagg_on_a_real_federation(fed: LocalFederation, tmp_path: Path) -> None:
    overrides = {
        "strategy": "qffl",
        "num-server-rounds": 1,
        "num-partitions": N_SUPERNODES,
        "min-available-nodes": N_SUPERNODES,
        "local-epochs": 1,
        "seed": 7,
    }
    secure = {
        **overrides,
        "secure-aggregation": "secagg+",
        "client-registration": str(fed.registration),
    }
    run = fed.submit_run(secure, name="secagg", timeout=900)
    log = (fed.workdir / "logs" / "flwr-run-secagg.log").read_text(errors="replace")
    assert run.returncode == 0, log[-5000:]
    out = fed.out_dir("secagg")
    (line,) = [json.loads(x) for x in (out / "rounds.jsonl").read_text().splitlines() if x]
    diagnostics = line["train"]["diagnostics"]
    assert diagnostics["secagg-clients"] == N_SUPERNODES, line["train"]
    assert diagnostics["secagg-lost"] == 0, line["train"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["secure-aggregation"] == "secagg+"

    from fairfl.simulation import run_inprocess

    clear_dir = tmp_path / "clear"
    nodes = {
        1001 + p: {"partition-id": p, "num-partitions": N_SUPERNODES, "device": "cpu"}
        for p in range(N_SUPERNODES)
    }
    run_inprocess(app_run_config({**overrides, "out-dir": str(clear_dir)}), node_configs=nodes)
    deployed = np.load(out / "final_model.npz")
    clear = np.load(clear_dir / "final_model.npz")
    bound = N_SUPERNODES * (2 * C + C) / diagnostics["secagg-weight-total"]
    for key in clear.files:
        slack = float(np.spacing(np.abs(clear[key]).max()))  # two float32 roundings
        assert np.abs(deployed[key] - clear[key]).max() <= bound + slack, key
