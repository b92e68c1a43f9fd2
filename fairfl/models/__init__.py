"""Model zoo: logistic regression, MLP, CNN and ResNet-18-GN, split into features and head.

Every model is a `FairModel`: ``forward(x) == classifier(features(x))``, where
`features` gives the penultimate-layer activations that Equitable FL clusters on.
No model has BatchNorm or any other buffer, so every state tensor is a float
parameter that aggregation rules may average. `build_model` makes one by name from
a seed; `model_to_arrays` and `arrays_to_model` move its state to and from numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fairfl._lazy import lazy_names
from fairfl.models.names import MODELS

if TYPE_CHECKING:
    from fairfl.models.arrays import arrays_to_model, model_to_arrays
    from fairfl.models.base import FairModel
    from fairfl.models.cnn import CNN
    from fairfl.models.linear import MLP, LogisticRegression
    from fairfl.models.registry import build_model
    from fairfl.models.resnet import ResNet18GN

#: Where each torch-backed name lives; loaded on first use (PEP 562), so that reading
#: MODELS (a run config's check) does not import torch.
_HOMES = {
    "arrays_to_model": "fairfl.models.arrays",
    "model_to_arrays": "fairfl.models.arrays",
    "FairModel": "fairfl.models.base",
    "CNN": "fairfl.models.cnn",
    "MLP": "fairfl.models.linear",
    "LogisticRegression": "fairfl.models.linear",
    "build_model": "fairfl.models.registry",
    "ResNet18GN": "fairfl.models.resnet",
}

__all__ = [
    "CNN",
    "MLP",
    "MODELS",
    "FairModel",
    "LogisticRegression",
    "ResNet18GN",
    "arrays_to_model",
    "build_model",
    "model_to_arrays",
]

__getattr__, __dir__ = lazy_names(__name__, _HOMES)
