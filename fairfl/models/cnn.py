"""A small convolutional network for 8x8 digits, 28x28 MNIST and 32x32 CIFAR images."""

from __future__ import annotations

from torch import Tensor, nn

from fairfl.models.base import FairModel, check_int

# Spatial size the convolutional part is pooled to, so the head has the same shape
# for every input size: an 8x8 image is 4x4 after the max-pool, so nothing is lost
# there; 28x28 and 32x32 images are averaged from 14x14 and 16x16.
_POOLED_SIZE = 4


class CNN(FairModel):
    """Two 3x3 convolutions and a two-layer head.

    Architecture: conv3x3(32) → ReLU → max-pool 2 → conv3x3(64) → ReLU → adaptive
    average pool to 4x4 → flatten (1024) → Linear(1024, hidden) → ReLU [features]
    → Linear(hidden, num_classes). Convolutions are padded, and ``ceil_mode`` on the
    max-pool keeps odd sizes, so any image of at least 1x1 works.

    Parameters
    ----------
    input_shape : tuple[int, int, int]
        ``(channels, height, width)`` of one image.
    num_classes : int
        Number of classes, at least 2.
    hidden : int (default: 128)
        Width of the penultimate layer, which is ``feature_dim``.

    Raises
    ------
    ValueError
        If ``hidden`` < 1; otherwise see `FairModel` (``input_shape`` must be 3-d).

    """

    def __init__(
        self, input_shape: tuple[int, ...], num_classes: int, *, hidden: int = 128
    ) -> None:
        super().__init__(input_shape, num_classes, image=True)
        self.feature_dim = check_int("hidden", hidden, minimum=1)
        channels = self.input_shape[0]
        self.conv = nn.Sequential(
            nn.Conv2d(channels, 32, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2, ceil_mode=True),
            nn.Conv2d(32, 64, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(_POOLED_SIZE),
            nn.Flatten(),
        )
        self.head = nn.Sequential(
            nn.Linear(64 * _POOLED_SIZE * _POOLED_SIZE, self.feature_dim),
            nn.ReLU(),
        )
        self.fc = nn.Linear(self.feature_dim, self.num_classes)

    def features(self, x: Tensor) -> Tensor:
        """Return the ReLU output of the first linear layer. See `FairModel.features`."""
        self.check_input(x)
        out: Tensor = self.head(self.conv(x))
        return out

    def classifier(self, h: Tensor) -> Tensor:
        """Return the output layer's logits. See `FairModel.classifier`."""
        out: Tensor = self.fc(h)
        return out
