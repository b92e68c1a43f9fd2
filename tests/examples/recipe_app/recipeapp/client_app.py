"""ClientApp: fair_train on 8 fixed samples."""

from __future__ import annotations

import torch
from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from torch import nn

from fairfl.client import fair_train

app = ClientApp()


class Net(nn.Module):
    """A linear classifier of 2 features into 2 classes."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits."""
        return self.fc(x)


def sgd(model: nn.Module, batches: list, loss_fn: nn.Module, config: dict) -> float:
    """One epoch of plain SGD at the config's lr; the last batch's loss."""
    optimizer = torch.optim.SGD(model.parameters(), lr=float(config["lr"]))
    for batch in batches:
        optimizer.zero_grad()
        loss = loss_fn(model(batch["x"]), batch["y"])
        loss.backward()
        optimizer.step()
    return loss.item()


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Reply what the round's rule asks for."""
    partition = int(context.node_config["partition-id"])
    generator = torch.Generator().manual_seed(partition)
    x = torch.randn(8, 2, generator=generator)
    batches = [{"x": x[:4], "y": (x[:4, 0] > 0).long()}, {"x": x[4:], "y": (x[4:, 0] > 0).long()}]
    content = fair_train(msg, Net(), batches, nn.CrossEntropyLoss(), sgd, partition_id=partition)
    return Message(content=content, reply_to=msg)
