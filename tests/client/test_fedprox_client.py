"""FedProx's client half: the proximal term fairfl's clients add for ``proximal-mu``.

The gradient of (μ/2) ‖w − w^t‖² is μ (w − w^t) (FedProx, Li et al., MLSys 2020): on a
tiny model whose own loss has no gradient, that is the whole gradient, and one SGD step
of the ClientApp's ``train_local`` moves w by −η μ (w − w^t) more than without the term.
"""

import numpy as np
import pytest
import torch
from flwr.app import ConfigRecord
from torch import nn

from fairfl.client.objectives import local_objective, objective_loss
from fairfl.client.training import train_local
from fairfl.strategies.fedprox import FedProx

MU = 0.3


def tiny_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(2, 2).double()


def fedprox_config() -> ConfigRecord:
    return ConfigRecord({"lr": 0.1, **FedProx(mu=MU).train_config(1)})


def test_the_proximal_gradient_is_mu_times_the_drift():
    model = tiny_model()
    anchor = [p.detach().clone() for p in model.parameters()]

    def no_loss(outputs, targets):
        return 0.0 * outputs.sum()  # the task loss has no gradient: the term's alone

    loss = objective_loss(no_loss, fedprox_config(), model)  # w^t = the weights now
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.add_(0.5 * (i + 1))  # w − w^t = 0.5 for the weights, 1.0 for the bias
    value = loss(model(torch.ones(1, 2, dtype=torch.float64)), torch.zeros(1))
    value.backward()
    # (μ/2) ‖w − w^t‖² = 0.15 (4 · 0.25 + 2 · 1) = 0.45; its gradient μ (w − w^t) = 0.15, 0.3.
    assert value.item() == pytest.approx(0.45, rel=1e-12)
    for p, a in zip(model.parameters(), anchor, strict=True):
        np.testing.assert_allclose(p.grad.numpy(), (MU * (p - a)).detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(model.bias.grad.numpy(), [0.3, 0.3], rtol=1e-12)


def test_the_clientapp_step_adds_minus_lr_mu_drift():
    # train_local with the config's μ (as the ClientApp calls it) against μ = 0, from w
    # with anchor w^t: one full batch, one epoch, lr 0.1.
    x = np.array([[1.0, -1.0], [0.5, 2.0]], dtype=np.float64)
    y = np.array([0, 1])
    mu = local_objective(fedprox_config()).proximal_mu
    assert mu == MU
    models = []
    for proximal_mu in (mu, 0.0):
        model = tiny_model()
        anchor = [p.detach().clone() - 0.2 for p in model.parameters()]  # w − w^t = 0.2
        train_local(
            model,
            x,
            y,
            epochs=1,
            batch_size=2,
            lr=0.1,
            device=torch.device("cpu"),
            seed=0,
            proximal_mu=proximal_mu,
            anchor=anchor,
        )
        models.append([p.detach().numpy() for p in model.parameters()])
    for with_term, without in zip(*models, strict=True):
        np.testing.assert_allclose(with_term - without, -0.1 * MU * 0.2, rtol=1e-10)
