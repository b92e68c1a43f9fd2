#!/bin/sh
# One-shot registration of SuperNode public keys, run by the `supernode-register`
# service of docker-compose.yml (in the SuperLink image: POSIX sh, since the official
# images may be Alpine). Keys already registered are skipped, so `up` can be repeated.
#
# Usage: register-supernodes.sh SUPERLINK_HOST:PORT CA_CERT PUBKEY...
set -eu
[ "$#" -ge 3 ] || { echo "usage: $0 SUPERLINK CA PUBKEY..." >&2; exit 2; }
SUPERLINK="$1"; CA="$2"; shift 2
export FLWR_HOME="${FLWR_HOME:-/tmp/flwr-register}"
export FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1
mkdir -p "$FLWR_HOME"
cat > "$FLWR_HOME/config.toml" <<TOML
[superlink]
default = "compose"

[superlink.compose]
address = "$SUPERLINK"
root-certificates = "$CA"
TOML
status=0
for key in "$@"; do
  name="$(basename "$key" .pub)"
  if out="$(flwr supernode register "$key" compose --name "$name" 2>&1)"; then
    echo "registered $name"
  elif echo "$out" | grep -qi "already"; then
    echo "already registered: $name"
  else
    echo "failed to register $name: $out" >&2; status=1
  fi
done
flwr supernode list compose || status=1
exit "$status"
