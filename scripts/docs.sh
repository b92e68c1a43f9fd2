#!/usr/bin/env bash
# Build the documentation site strictly into build/docs/ (every warning an error: broken
# cross-references, and internal links of the built HTML that lead to no file or anchor,
# checked by docs/site/_ext/check_links.py); `serve` serves the built site on 127.0.0.1
# (port: $DOCS_PORT, default 8000). Executed blocks' outputs are cached outside the
# checkout, by their program and everything they run ($FAIRFL_DOCS_CACHE, default
# ~/.cache/fairfl-docs): a build with nothing changed runs no block again. On a fresh
# clone (no .venv, or one without Sphinx) it runs scripts/setup.sh first.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=.venv/bin/python
# A fresh clone: set up .venv (fairfl with every extra and the docs tools) first.
if ! { [ -x "$PYTHON" ] && "$PYTHON" -c "import sphinx, myst_parser, numpydoc, furo" 2>/dev/null; }; then
  echo "docs: Sphinx is not in .venv yet: bash scripts/setup.sh"
  bash scripts/setup.sh
fi
if [ "${1:-}" = serve ]; then
  [ -f build/docs/index.html ] || bash "$0"
  exec "$PYTHON" -m http.server "${DOCS_PORT:-8000}" --bind 127.0.0.1 --directory build/docs
fi
# Equations render offline from Debian's MathJax; the strict build refuses a CDN.
if [ ! -f /usr/share/javascript/mathjax/MathJax.js ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "docs: installing Debian's libjs-mathjax (equations render offline)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq libjs-mathjax >/dev/null 2>&1 \
      || { apt-get update -qq && apt-get install -y -qq libjs-mathjax >/dev/null; }
  else
    echo "docs: MathJax is not installed: sudo apt-get install libjs-mathjax" >&2
    exit 2
  fi
fi
export FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
export FLWR_HOME="${FLWR_HOME:-$PWD/.flwr-home}"
"$PYTHON" -m sphinx -b html -W --keep-going -n -q -d build/docs-doctrees docs/site build/docs
echo "docs: build/docs/index.html"
