"""Flower's PyTorch quickstart with fairfl's telemetry wrapper."""
