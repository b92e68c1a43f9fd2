"""The model zoo's names, without importing torch (the run config is checked against them)."""

from __future__ import annotations

MODELS: tuple[str, ...] = ("logreg", "binary-logreg", "mlp", "cnn", "resnet18gn")
"""Names accepted by :func:`fairfl.models.build_model`."""
