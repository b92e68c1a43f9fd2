"""FedProx: FedAvg's server step, with ``proximal-mu`` in every train config.

The client half, the proximal gradient μ (w − w^t), is tested in
tests/client/test_fedprox_client.py.
"""

import numpy as np
import pytest
from flwr.serverapp.strategy import FedProx as FlowerFedProx

from fairfl.contract import keys
from fairfl.strategies import FedAvg
from fairfl.strategies.fedprox import FedProx
from fairfl.strategies.registry import STRATEGIES, build_strategy
from tests.conftest import make_reply
from tests.strategies.baseline_helpers import aggregate_round, configure


def replies(seed: int) -> list:
    rng = np.random.default_rng(seed)
    return [
        make_reply(n, [rng.normal(size=(2, 3)), rng.normal(size=3)], {keys.NUM_EXAMPLES: n * 7})
        for n in (1, 2, 3)
    ]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("mu", [0.0, 0.01, 1.0])
def test_the_server_step_is_fedavgs(seed, mu):
    start = [np.zeros((2, 3)), np.ones(3)]
    got, _ = aggregate_round(FedProx(mu=mu), replies(seed), 1, start)
    want, _ = aggregate_round(FedAvg(), replies(seed), 1, start)
    for name in ("0", "1"):
        np.testing.assert_array_equal(got[name].numpy(), want[name].numpy())
    # And by hand: n = (7, 14, 21), p = (1/6, 1/3, 1/2).
    locals_ = [r.content["arrays"]["1"].numpy() for r in replies(seed)]
    expected = locals_[0] / 6 + locals_[1] / 3 + locals_[2] / 2
    np.testing.assert_allclose(got["1"].numpy(), expected, rtol=1e-12)


def test_every_train_config_carries_mu_under_flowers_key():
    ours = configure(FedProx(mu=0.05), [1, 2])
    flowers = configure(FlowerFedProx(proximal_mu=0.05), [1, 2])
    for message in (*ours, *flowers):
        assert message.content["config"][keys.PROXIMAL_MU] == 0.05
    assert keys.PROXIMAL_MU == "proximal-mu"


def test_registry_declaration_and_a_refused_mu():
    assert STRATEGIES["fedprox"].strategy is FedProx
    assert STRATEGIES["fedprox"].defaults() == {"fedprox-mu": 0.01}
    assert build_strategy("fedprox", {"fedprox-mu": 1}).settings() == {"mu": 1.0}
    with pytest.raises(
        ValueError, match=r"^run config fedprox-mu \(rule fedprox\): mu must be >= 0, got -0.5$"
    ):
        build_strategy("fedprox", {"fedprox-mu": -0.5})
    paired = build_strategy("ditto+fedprox", {"fedprox-mu": 0.1, "ditto-lambda": 0.5})
    assert paired.train_config(1)[keys.PROXIMAL_MU] == 0.1
    assert paired.train_config(1)[keys.DITTO_LAMBDA] == 0.5
