"""Deployment tests: make ``deploy/localfed.py`` importable as ``localfed``."""

from __future__ import annotations

import sys
from pathlib import Path

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
if str(DEPLOY) not in sys.path:
    sys.path.insert(0, str(DEPLOY))
