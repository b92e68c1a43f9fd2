"""Client side: the fairfl ClientApp and helpers other ClientApps can call."""

from fairfl.client.training import (
    activation_vector,
    evaluate,
    mean_loss,
    pick_device,
    train_local,
)

__all__ = ["activation_vector", "evaluate", "mean_loss", "pick_device", "train_local"]
