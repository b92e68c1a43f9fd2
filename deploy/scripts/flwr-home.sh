#!/usr/bin/env bash
# Write the Flower connection profiles of this project into $FLWR_HOME/config.toml
# (project-local: <repo>/.flwr-home unless FLWR_HOME is set), so that
#   flwr run . simulation   runs Flower's simulation engine on this machine
#   flwr run . local        submits to an insecure SuperLink on 127.0.0.1:8000 (dev only)
#   flwr run . tls          submits to a TLS SuperLink (real federation)
#   flwr run . docker       submits to the SuperLink of docker-compose.yml
# Use the profiles with the same FLWR_HOME: `source deploy/scripts/env.sh` first, or
# `export FLWR_HOME=<repo>/.flwr-home`.
#
# Usage: deploy/scripts/flwr-home.sh [options]
#   --superlink HOST:PORT  address of the TLS SuperLink (default 127.0.0.1:8000)
#   --ca PATH              CA certificate that signed the SuperLink's certificate
#                          (default $FAIRFL_PKI_DIR/ca.crt); stored as an absolute path
#   --docker-port PORT     host port docker-compose publishes the SuperLink on
#                          (default $FAIRFL_SUPERLINK_PORT or 8000)
#   --default NAME         profile used by a bare `flwr run .` (default: simulation)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

SUPERLINK="127.0.0.1:8000"; CA="$FAIRFL_PKI_DIR/ca.crt"
DOCKER_PORT="${FAIRFL_SUPERLINK_PORT:-8000}"; DEFAULT="simulation"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --superlink) SUPERLINK="$2"; shift 2 ;;
    --ca) CA="$2"; shift 2 ;;
    --docker-port) DOCKER_PORT="$2"; shift 2 ;;
    --default) DEFAULT="$2"; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) fairfl_die "unknown argument $1 (see --help)" ;;
  esac
done
# flwr reads root-certificates relative to the current directory: store it absolute.
CA="$(cd "$(dirname "$CA")" 2>/dev/null && pwd)/$(basename "$CA")" || fairfl_die "no directory for $CA"
mkdir -p "$FLWR_HOME"
cat > "$FLWR_HOME/config.toml" <<TOML
# Flower connection profiles of fairfl; written by deploy/scripts/flwr-home.sh.
[superlink]
default = "$DEFAULT"

# Flower's simulation engine on this machine (flwr starts a local SuperLink itself).
[superlink.simulation]
address = ":local:"

# A SuperLink started with --insecure on this machine (development only).
[superlink.local]
address = "127.0.0.1:8000"
insecure = true

# A real federation: TLS to the SuperLink, whose certificate is signed by this CA.
[superlink.tls]
address = "$SUPERLINK"
root-certificates = "$CA"

# The SuperLink of docker-compose.yml, published on this host.
[superlink.docker]
address = "127.0.0.1:$DOCKER_PORT"
root-certificates = "$CA"
TOML
echo "$FLWR_HOME/config.toml"
