#!/usr/bin/env bash
# Build the documentation site strictly into build/docs/ (every warning an error, broken
# cross-references fail), then check its internal links; `serve` serves the built site
# on 127.0.0.1 (port: $DOCS_PORT, default 8000).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=.venv/bin/python
[ -x "$PYTHON" ] || PYTHON=python3
if [ "${1:-}" = serve ]; then
  [ -f build/docs/index.html ] || bash "$0"
  exec "$PYTHON" -m http.server "${DOCS_PORT:-8000}" --bind 127.0.0.1 --directory build/docs
fi
export FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
export FLWR_HOME="${FLWR_HOME:-$PWD/.flwr-home}"
# autosummary's stubs are rewritten each build; stale ones (a removed module) would warn.
rm -rf docs/site/_generated/api
"$PYTHON" -m sphinx -b html -W --keep-going -n -q -d build/docs-doctrees docs/site build/docs
# Internal links only (linkcheck_ignore in conf.py skips http(s) links: no network in CI).
"$PYTHON" -m sphinx -b linkcheck -W --keep-going -n -q -d build/docs-doctrees docs/site \
  build/docs-linkcheck
echo "docs: build/docs/index.html"
