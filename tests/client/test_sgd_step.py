"""The client's plain SGD step is torch.optim.SGD's step, bit for bit.

fairfl's client takes its own step (``fairfl.client.training.sgd_step``) because creating
any ``torch.optim`` optimizer imports ``torch._dynamo`` (~0.9 s per ClientApp process).
The reference here is ``torch.optim.SGD`` itself with its defaults (momentum 0,
dampening 0, weight decay 0, no Nesterov), the only options fairfl's clients use.
"""

import numpy as np
import torch
from torch import nn

from fairfl.client.training import sgd_step, train_local, zero_grad


def mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))


def batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(8, 6, generator=generator), torch.randint(0, 3, (8,), generator=generator)


def assert_bitwise_equal(a: nn.Module, b: nn.Module) -> None:
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), name


def test_twenty_steps_equal_torch_optim_sgd_bit_for_bit():
    ours, reference = mlp(), mlp()
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.37)
    parameters = list(ours.parameters())
    for step in range(20):
        x, y = batch(step)
        zero_grad(parameters)
        nn.functional.cross_entropy(ours(x), y).backward()
        sgd_step(parameters, 0.37)
        optimizer.zero_grad()
        nn.functional.cross_entropy(reference(x), y).backward()
        optimizer.step()
        assert_bitwise_equal(ours, reference)
    assert not torch.equal(ours[0].weight, mlp()[0].weight)  # the steps did move it


def test_two_step_sizes_equal_two_param_groups():
    # RC-FL's optimizer: model at lr, eta at lr_eta, one torch.optim.SGD with two groups.
    ours, reference = mlp(1), mlp(1)
    eta_ours = torch.tensor(0.5, requires_grad=True)
    eta_ref = torch.tensor(0.5, requires_grad=True)
    optimizer = torch.optim.SGD(
        [{"params": list(reference.parameters()), "lr": 0.2}, {"params": [eta_ref], "lr": 0.03}]
    )
    parameters = list(ours.parameters())
    for step in range(5):
        x, y = batch(10 + step)
        zero_grad([*parameters, eta_ours])
        (nn.functional.cross_entropy(ours(x), y) * eta_ours**2).backward()
        sgd_step(parameters, 0.2)
        sgd_step([eta_ours], 0.03)
        optimizer.zero_grad()
        (nn.functional.cross_entropy(reference(x), y) * eta_ref**2).backward()
        optimizer.step()
        assert_bitwise_equal(ours, reference)
        assert torch.equal(eta_ours, eta_ref)


def test_parameters_without_gradient_are_left_alone():
    # w = [1, 2] with ∇ = [0.5, -1] and lr 0.1: w ← [1 - 0.05, 2 + 0.1] = [0.95, 2.1]
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    frozen = torch.tensor([3.0], requires_grad=True)
    w.grad = torch.tensor([0.5, -1.0])
    sgd_step([w, frozen], 0.1)
    assert torch.equal(w.detach(), torch.tensor([1.0, 2.0]) - 0.1 * torch.tensor([0.5, -1.0]))
    np.testing.assert_allclose(w.detach().numpy(), [0.95, 2.1], rtol=1e-7)
    assert frozen.grad is None and frozen.item() == 3.0


def test_train_local_equals_a_torch_optim_sgd_loop():
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(37, 6, generator=generator).numpy()
    y = torch.randint(0, 3, (37,), generator=generator).numpy()
    ours, reference = mlp(2), mlp(2)
    train_local(ours, x, y, epochs=2, batch_size=5, lr=0.1, device=torch.device("cpu"), seed=9)
    # The same loop with torch.optim.SGD: same shuffling generator, same batches.
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    order_generator = torch.Generator().manual_seed(9)
    inputs, labels = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(2):
        order = torch.randperm(37, generator=order_generator)
        for start in range(0, 37, 5):
            index = order[start : start + 5]
            optimizer.zero_grad()
            nn.functional.cross_entropy(reference(inputs[index]), labels[index]).backward()
            optimizer.step()
    assert_bitwise_equal(ours, reference)
