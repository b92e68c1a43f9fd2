#!/usr/bin/env bash
# Create .venv and install fairfl with its dev tools. Idempotent; safe on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# Bytecode is compiled at install (pip's default), not left to the first import: where
# PYTHONDONTWRITEBYTECODE is set (this machine sets it) no import would write it, and
# every process would compile torch from source again (tried: the unit phase slowed by
# half and a 60 s test timed out).
# torch first, pinned to the wheels this project is tested with (CPU and CUDA builds alike).
.venv/bin/python -m pip install --quiet "torch==2.14.1" "torchvision==0.29.1"
.venv/bin/python -m pip install --quiet -e ".[all,dev]"
.venv/bin/python -c "import fairfl.strategies, fairfl.server, fairfl.client; print('fairfl ready')"
