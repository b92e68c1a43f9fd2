# Shared environment for the deploy/ scripts: source it, don't run it.
#
# - puts the project's virtual environment (if any) first on PATH, so that
#   flower-superlink, flower-supernode, flower-superexec and flwr are the pinned ones;
# - keeps Flower's state and connection profiles in a project-local FLWR_HOME;
# - turns off Flower's telemetry, update check and runtime `uv sync` of app
#   dependencies (fairfl and its dependencies are installed where apps run).
#
# Every variable can be set beforehand to override the default.

FAIRFL_REPO_ROOT="${FAIRFL_REPO_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
export FAIRFL_REPO_ROOT

# A venv given explicitly, else the repo's .venv when it exists, else whatever is on PATH.
FAIRFL_VENV="${FAIRFL_VENV:-}"
if [[ -z "$FAIRFL_VENV" && -x "$FAIRFL_REPO_ROOT/.venv/bin/flower-superlink" ]]; then
  FAIRFL_VENV="$FAIRFL_REPO_ROOT/.venv"
fi
if [[ -n "$FAIRFL_VENV" ]]; then
  export PATH="$FAIRFL_VENV/bin:$PATH"
fi

export FLWR_HOME="${FLWR_HOME:-$FAIRFL_REPO_ROOT/.flwr-home}"
export FLWR_TELEMETRY_ENABLED=0
export FLWR_DISABLE_UPDATE_CHECK=1
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
# Certificates and keys made by gen-certs.sh (private keys never leave their host).
export FAIRFL_PKI_DIR="${FAIRFL_PKI_DIR:-$FLWR_HOME/pki}"

fairfl_die() { echo "error: $*" >&2; exit 2; }
fairfl_need() { command -v "$1" >/dev/null 2>&1 || fairfl_die "'$1' not found on PATH${2:+ ($2)}"; }
