"""q-FFL, TERM, AFL and FairFed under ``secure-aggregation = "secagg+"`` through `flwr run .`.

Flower's simulation engine runs fairfl's ServerApp and ClientApp (which carries the
SecAgg+ mod) on 3 SuperNodes; the final model must equal the in-process clear run's of
the same seed within the documented quantisation bound ``n (2C + U) / Σ_k round(Q a_k /
a_max)`` (U <= C; fairfl.secagg.protocol), from C and the weight sum the round recorded
(FairFed's two-round form: the round's ``secagg-bound``, which adds its statistics' error).
The clients train the same in both runners: their seeds come from the run seed, the
round and the partition, not the node id.

With ``dp = "distributed"`` besides (issue #49), TERM's run through the engine records
ε and the clients' noise, and its model is the clear run's plus noise of the recorded size.
"""

import json
from pathlib import Path

import dp_accounting
import numpy as np
import pytest

from fairfl.simulation import run_inprocess
from fairfl.simulation.engine import toml_overrides

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


def test_flwr_run_with_distributed_dp_records_epsilon_and_noises_the_trained_model(
    tmp_path: Path, flwr_sim
):
    # C = 10 keeps every update unclipped (one epoch of logistic regression moves it far
    # less), so the secure model is the clear one plus the noise; C_s = 40 >= C (1 + 6 z).
    config = {
        "strategy": "term",
        "num-partitions": 3,
        "num-server-rounds": 1,
        "local-epochs": 1,
        "model": "logreg",
    }
    z, clipping, delta = 0.5, 10.0, 1e-5
    out = tmp_path / "dp"
    private = {
        **config,
        "secure-aggregation": "secagg+",
        "secagg-clipping-range": 40.0,
        "dp": "distributed",
        "dp-noise-multiplier": z,
        "dp-clipping-norm": clipping,
        "out-dir": str(out),
    }
    flwr_sim(toml_overrides(private), supernodes=3, timeout=600)
    (line,) = [json.loads(x) for x in (out / "rounds.jsonl").read_text().splitlines()]
    diagnostics = line["train"]["diagnostics"]
    assert diagnostics["dp-calibration"] == "distributed"
    assert diagnostics["dp-survivors"] == diagnostics["dp-expected-survivors"] == 3
    assert diagnostics["dp-noise-multiplier-effective"] == pytest.approx(z)
    # ε: dp-accounting's RDP accountant for one Gaussian round of z at q = 1.
    accountant = dp_accounting.rdp.RdpAccountant()
    accountant.compose(dp_accounting.GaussianDpEvent(z))
    epsilon = accountant.get_epsilon(delta)
    assert diagnostics["dp-epsilon"] == pytest.approx(epsilon, rel=1e-9)
    privacy = json.loads((out / "summary.json").read_text())["privacy"]
    assert privacy["dp"] == "distributed" and privacy["released_rounds"] == 1
    assert privacy["epsilon"] == pytest.approx(epsilon, rel=1e-9)
    # The model: the clear run's (it trained) plus the summed noise over R = Σ r̂_k, with
    # R = secagg-weight-total / Q: σ = √3 σ_c / R (dp-aggregate-noise-std = √3 σ_c).
    clear = run_inprocess({**config, "out-dir": str(tmp_path / "clear")})
    secure = np.load(out / "final_model.npz")
    weight_sum = diagnostics["secagg-weight-total"] / 4194304  # secagg-quantization-range
    sigma = diagnostics["dp-aggregate-noise-std"] / weight_sum
    deviation = np.concatenate(
        [(secure[key] - array.numpy()).ravel() for key, array in clear.arrays.items()]
    )
    assert np.isfinite(deviation).all() and deviation.size == 650  # 64 x 10 + 10
    # 650 draws: the sample std within 12 % of σ (4.3 of its standard errors of 2.8 %),
    # their mean within 4 standard errors of 0.
    assert np.std(deviation) == pytest.approx(sigma, rel=0.12)
    assert abs(np.mean(deviation)) < 4 * sigma / np.sqrt(deviation.size)
