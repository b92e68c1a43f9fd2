"""q-FFL, TERM, AFL and FairFed under ``secure-aggregation = "secagg+"`` through `flwr run .`.

Flower's simulation engine runs fairfl's ServerApp and ClientApp (which carries the
SecAgg+ mod) on 3 SuperNodes; the final model must equal the in-process clear run's of
the same seed within the documented quantisation bound ``n (2C + U) / Σ_k round(Q a_k /
a_max)`` (U <= C; fairfl.secagg.protocol), from C and the weight sum the round recorded
(FairFed's two-round form: the round's ``secagg-bound``, which adds its statistics' error).
The clients train the same in both runners: their seeds come from the run seed, the
round and the partition, not the node id.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from fairfl.simulation import run_inprocess

pytestmark = pytest.mark.integration

C = 8.0  # secagg-clipping-range's default
ADULT = {"dataset": "adult-synthetic", "model": "logreg", "dirichlet-alpha": 0.5}


@pytest.mark.parametrize(
    ("rule", "extra"), [("qffl", {}), ("term", {}), ("afl", {}), ("fairfed", ADULT)]
)
def test_flwr_run_under_secagg_equals_the_clear_run_within_the_bound(
    tmp_path: Path, flwr_sim, rule, extra
):
    config = {
        "strategy": rule,
        "num-partitions": 3,
        "num-server-rounds": 1,
        "local-epochs": 1,
        **extra,
    }
    out = tmp_path / "secure"
    overrides = {**config, "secure-aggregation": "secagg+", "out-dir": str(out)}
    flwr_sim(
        " ".join(f"{k}='{v}'" if isinstance(v, str) else f"{k}={v}" for k, v in overrides.items()),
        supernodes=3,
        timeout=600,
    )
    clear = run_inprocess({**config, "out-dir": str(tmp_path / "clear")})
    secure = np.load(out / "final_model.npz")
    (line,) = [json.loads(x) for x in (out / "rounds.jsonl").read_text().splitlines()]
    diagnostics = line["train"]["diagnostics"]
    assert diagnostics["secagg-clients"] == 3 and diagnostics["secagg-lost"] == 0
    bound = 3 * (2 * C + C) / diagnostics["secagg-weight-total"]
    if rule == "fairfed":  # its two-round form adds its statistics' errors (the how-to)
        assert diagnostics["secagg-bound"] > bound
        bound = diagnostics["secagg-bound"]
    for key, array in clear.arrays.items():
        value = array.numpy()
        slack = float(np.spacing(np.abs(value).max()))  # two float32 roundings
        assert np.abs(secure[key] - value).max() <= bound + slack, key
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["secure-aggregation"] == "secagg+"
