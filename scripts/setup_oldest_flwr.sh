#!/usr/bin/env bash
# Build .venv-flwr-oldest: the oldest flwr fairfl supports (Fleet API over gRPC), for
# the compatibility phase of scripts/test.sh. Heavy packages (torch, scikit-learn, ...)
# are shared with .venv through a .pth path entry placed *after* this environment's own
# site-packages, so flwr and its pinned dependencies come from here.
set -euo pipefail
cd "$(dirname "$0")/.."
FLWR_OLDEST="${FLWR_OLDEST:-1.33.0}"
OLD=.venv-flwr-oldest
PYTHON="${PYTHON:-python3}"
if ! "$OLD/bin/python" -c "import flwr, xdist, sys; sys.exit(flwr.__version__ != '$FLWR_OLDEST')" 2>/dev/null; then
  rm -rf "$OLD"
  "$PYTHON" -m venv "$OLD"
  "$OLD/bin/python" -m pip install --quiet --upgrade pip
  "$OLD/bin/python" -m pip install --quiet "flwr==$FLWR_OLDEST" pytest pytest-xdist hypothesis packaging
fi
main_site=$(.venv/bin/python -c 'import site; print(site.getsitepackages()[0])')
old_site=$("$OLD/bin/python" -c 'import site; print(site.getsitepackages()[0])')
echo "$main_site" > "$old_site/zz_fairfl_main_venv.pth"
"$OLD/bin/python" -c "import flwr, torch; print('oldest-flwr environment: flwr', flwr.__version__)"
