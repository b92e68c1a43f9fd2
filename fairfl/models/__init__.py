"""Model zoo: logistic regression, MLP, CNN and ResNet-18-GN, split into features and head.

Every model is a `FairModel`: ``forward(x) == classifier(features(x))``, where
`features` gives the penultimate-layer activations that Equitable FL clusters on.
No model has BatchNorm or any other buffer, so every state tensor is a float
parameter that aggregation rules may average. `build_model` makes one by name from
a seed; `model_to_arrays` and `arrays_to_model` move its state to and from numpy.
"""

from fairfl.models.arrays import arrays_to_model, model_to_arrays
from fairfl.models.base import FairModel
from fairfl.models.cnn import CNN
from fairfl.models.linear import MLP, LogisticRegression
from fairfl.models.registry import MODELS, build_model
from fairfl.models.resnet import ResNet18GN

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
