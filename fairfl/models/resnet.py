"""ResNet-18 with GroupNorm in place of BatchNorm, as in the PropFair and Semi-VRed code.

BatchNorm's running statistics are not parameters, and averaging them across
clients with non-IID data is ill-defined; GroupNorm has no buffers, so every state
tensor is a float parameter that aggregation rules may average.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor, nn

from fairfl.models.base import FairModel

# Groups per GroupNorm layer, as in the PropFair and Semi-VRed reference code.
GROUPNORM_GROUPS = 2


class ResNet18GN(FairModel):
    """Torchvision's ResNet-18 with ``GroupNorm(2, c)`` normalisation, no pre-training.

    Built with ``torchvision.models.resnet18(norm_layer=..., num_classes=C)``, so the
    layers, their initialisation and their state-dict keys (``conv1.weight``,
    ``layer1.0.bn1.weight``, ``fc.bias``, ...) are torchvision's. The "bn" layers
    are GroupNorm. The stem is ImageNet's (7x7 stride-2 convolution, then a 3x3
    stride-2 max-pool), kept for 32x32 inputs as the reference code does; only its
    input channels follow ``input_shape``. Smaller images work too (an 8x8 image is
    1x1 from ``layer2`` on).

    `features` returns the 512 values after global average pooling; `classifier`
    is the final ``fc`` layer.

    Parameters
    ----------
    input_shape : tuple[int, int, int]
        ``(channels, height, width)`` of one image.
    num_classes : int
        Number of classes, at least 2.

    Raises
    ------
    ValueError
        See `FairModel` (``input_shape`` must be 3-d).

    """

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__(input_shape, num_classes, image=True)
        # Imported here: torchvision costs seconds per ClientApp process otherwise.
        from torchvision.models import resnet18

        net = resnet18(
            weights=None,
            num_classes=self.num_classes,
            norm_layer=functools.partial(nn.GroupNorm, GROUPNORM_GROUPS),
        )
        channels = self.input_shape[0]
        if channels != net.conv1.in_channels:
            # Same layer and initialisation as torchvision's stem, other input channels.
            net.conv1 = nn.Conv2d(channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
            nn.init.kaiming_normal_(net.conv1.weight, mode="fan_out", nonlinearity="relu")
        # Take torchvision's submodules as our own so state-dict keys match its ResNet.
        self.conv1 = net.conv1
        self.bn1 = net.bn1
        self.relu = net.relu
        self.maxpool = net.maxpool
        self.layer1 = net.layer1
        self.layer2 = net.layer2
        self.layer3 = net.layer3
        self.layer4 = net.layer4
        self.avgpool = net.avgpool
        self.fc = net.fc
        self.feature_dim = self.fc.in_features

    def features(self, x: Tensor) -> Tensor:
        """Return the globally average-pooled ``layer4`` output, shape ``(batch, 512)``.

        See `FairModel.features`.
        """
        self.check_input(x)
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return torch.flatten(self.avgpool(x), 1)

    def classifier(self, h: Tensor) -> Tensor:
        """Return the ``fc`` layer's logits. See `FairModel.classifier`."""
        out: Tensor = self.fc(h)
        return out
