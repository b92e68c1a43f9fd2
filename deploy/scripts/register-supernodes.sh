#!/usr/bin/env bash
# Register SuperNode public keys with a SuperLink that runs with --enable-supernode-auth.
# Only registered SuperNodes may connect; others exit (flwr exit code 305). Keys already
# registered are reported and skipped. Ends by listing the SuperNodes the SuperLink knows.
#
# Usage: deploy/scripts/register-supernodes.sh [--connection NAME] PUBKEY.pub...
#   --connection NAME   Flower connection profile in $FLWR_HOME/config.toml (default: tls;
#                       see flwr-home.sh)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
fairfl_need flwr "install flwr, or set FAIRFL_VENV"

CONN=tls; KEYS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --connection) CONN="$2"; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    -*) fairfl_die "unknown option $1" ;;
    *) KEYS+=("$1"); shift ;;
  esac
done
[[ ${#KEYS[@]} -gt 0 ]] || fairfl_die "no public key given"
status=0
for key in "${KEYS[@]}"; do
  name="$(basename "$key" .pub)"
  if out="$(flwr supernode register "$key" "$CONN" --name "$name" 2>&1)"; then
    echo "registered $name ($key)"
  elif grep -qi "already" <<<"$out"; then
    echo "already registered: $name ($key)"
  else
    echo "failed to register $name ($key):" >&2; echo "$out" >&2; status=1
  fi
done
flwr supernode list "$CONN" || status=1
exit "$status"
