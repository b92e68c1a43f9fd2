"""Fairness telemetry: one per-round record, many sinks, a verifiable ledger.

- :class:`~fairfl.telemetry.stream.RecordStream`: chains each round's record into the
  ledger and feeds every sink (:mod:`fairfl.telemetry.sinks`: ``rounds.jsonl``,
  TensorBoard, MLflow, W&B, Prometheus), chosen by the ``telemetry`` run-config key.
- :func:`~fairfl.telemetry.wrapper.with_telemetry`: the same for any Flower strategy.
- :func:`~fairfl.telemetry.ledger.verify_ledger`: ``fairfl verify <out-dir>``.

The trackers' libraries are the optional extra ``fairfl[telemetry]``; each is
imported only when its sink opens. The wrapper (which imports Flower's strategies) is
imported on first use, so :mod:`fairfl.settings`, which the ClientApp reads, pulls in
only the light :mod:`fairfl.telemetry.config`.
"""

from __future__ import annotations

from typing import Any

from fairfl.telemetry.config import TelemetrySettings
from fairfl.telemetry.ledger import LedgerReport, verify_ledger

__all__ = [
    "LedgerReport",
    "MissingExtraError",
    "RecordStream",
    "RoundRecord",
    "Sink",
    "TelemetrySettings",
    "TelemetryStrategy",
    "build_sinks",
    "verify_ledger",
    "with_telemetry",
]

_LAZY = {
    "MissingExtraError": "fairfl.telemetry.sinks",
    "RoundRecord": "fairfl.telemetry.sinks",
    "Sink": "fairfl.telemetry.sinks",
    "build_sinks": "fairfl.telemetry.sinks",
    "RecordStream": "fairfl.telemetry.stream",
    "TelemetryStrategy": "fairfl.telemetry.wrapper",
    "with_telemetry": "fairfl.telemetry.wrapper",
}


def __getattr__(name: str) -> Any:
    """Import the sinks, the stream and the wrapper when first asked for."""
    if name not in _LAZY:
        raise AttributeError(f"module 'fairfl.telemetry' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)
