"""The client objectives as client steps (issue 51): FedProx's and PropFair's keys.

``proximal-mu`` and ``propfair-m`` switch on steps of phase ``objective`` in the
registry; fair_train trains with the objective the steps set and has no branch of its
own on those keys: a step registered under another key that sets the same objective
trains the same weights, bit for bit.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from fairfl.client import fair_train
from fairfl.client.steps import CLIENT_STEPS, ClientRound, ClientStep
from fairfl.contract import keys
from tests.client.test_adapter import global_model, loader, message, sgd_epochs


def test_the_objective_keys_switch_on_objective_steps():
    for key in (keys.PROXIMAL_MU, keys.PROPFAIR_M):
        assert CLIENT_STEPS[key].phase == "objective"
        assert CLIENT_STEPS[key].when == "present"  # proximal-mu = 0 still switches it


def _half_mu(round_: ClientRound) -> dict[str, float]:
    round_.objective = replace(round_.objective, proximal_mu=0.5, config_keys=("my-prox",))
    return {}


def _trained(config: dict[str, float]) -> dict[str, torch.Tensor]:
    model = global_model()
    sent = global_model()
    fair_train(message(sent, lr=0.3, **config), model, loader(), nn.CrossEntropyLoss(), sgd_epochs)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_fair_train_minimises_the_objective_a_step_sets(monkeypatch):
    monkeypatch.setattr(CLIENT_STEPS, "_steps", dict(CLIENT_STEPS._steps))
    CLIENT_STEPS.register(ClientStep("my-prox", _half_mu, phase="objective", when="present"))
    by_fedprox_key = _trained({keys.PROXIMAL_MU: 0.5})
    by_own_step = _trained({"my-prox": 1.0})
    plain = _trained({})
    for key, value in by_fedprox_key.items():
        assert torch.equal(value, by_own_step[key])
    # The term moved the weights: the two are not plain training.
    assert any(not torch.equal(v, plain[k]) for k, v in by_fedprox_key.items())
