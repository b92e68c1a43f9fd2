#!/usr/bin/env bash
# Register SuperNode public keys with a SuperLink that runs with --enable-supernode-auth.
# Only registered SuperNodes may connect; others exit (flwr exit code 305). Keys already
# registered are reported and skipped. Ends by listing the SuperNodes the SuperLink knows.
#
# With --registration FILE, each key is given as PUBKEY.pub=PARTITION and FILE is written:
# the client registration the ServerApp reads (run config client-registration), mapping
# each key's SSH fingerprint (ssh-keygen -lf) to the partition id it may speak for.
#
# Usage: deploy/scripts/register-supernodes.sh [--connection NAME] [--registration FILE]
#            [--no-register] PUBKEY.pub[=PARTITION]...
#   --connection NAME   Flower connection profile in $FLWR_HOME/config.toml (default: tls;
#                       see flwr-home.sh)
#   --registration FILE write the client registration (every key needs =PARTITION)
#   --no-register       only write FILE; register no key (Kubernetes: the Job registers)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

CONN=tls; KEYS=(); REGISTRATION=""; REGISTER=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --connection) CONN="$2"; shift 2 ;;
    --registration) REGISTRATION="$2"; shift 2 ;;
    --no-register) REGISTER=0; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) fairfl_die "unknown option $1" ;;
    *) KEYS+=("$1"); shift ;;
  esac
done
[[ ${#KEYS[@]} -gt 0 ]] || fairfl_die "no public key given"
[[ "$REGISTER" == 1 || -n "$REGISTRATION" ]] || fairfl_die "--no-register needs --registration FILE"
[[ "$REGISTER" == 0 ]] || fairfl_need flwr "install flwr, or set FAIRFL_VENV"
status=0
if [[ -n "$REGISTRATION" ]]; then
  fairfl_need ssh-keygen "install openssh-client (ssh-keygen prints the key fingerprints)"
  entries=("[partitions]")
  for item in "${KEYS[@]}"; do
    [[ "$item" == *=* ]] || fairfl_die "--registration: give $item as PUBKEY.pub=PARTITION"
    partition="${item##*=}"
    [[ "$partition" =~ ^(0|[1-9][0-9]*)$ ]] || fairfl_die "partition of $item must be an integer >= 0"
    fingerprint="$(ssh-keygen -lf "${item%=*}" | awk '{print $2}')"
    entries+=("\"$fingerprint\" = $partition")
  done
  printf '%s\n' "# fairfl client registration: SuperNode key fingerprint = partition id" \
    "${entries[@]}" > "$REGISTRATION"
  echo "wrote $REGISTRATION (${#KEYS[@]} keys); run with -c client-registration=$REGISTRATION"
fi
[[ "$REGISTER" == 1 ]] || exit 0
for item in "${KEYS[@]}"; do
  key="${item%=*}"
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
