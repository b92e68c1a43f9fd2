#!/usr/bin/env bash
# Register SuperNode public keys with a SuperLink that runs with --enable-supernode-auth,
# and write the client registration the ServerApp binds replies with. Only registered
# SuperNodes may connect; others exit (flwr exit code 305). Keys already registered are
# reported and skipped. Ends by listing the SuperNodes the SuperLink knows.
#
# The client registration (FILE, default $FAIRFL_PKI_DIR/clients.toml, which
# submit-run.sh passes as run config client-registration) maps each key's SSH
# fingerprint (ssh-keygen -lf) to the partition id it may speak for, and with
# --run-config each partition's sample count, so that a SuperNode can neither claim
# another's partition nor weigh itself by a forged num-examples. A key is given as
# PUBKEY.pub=PARTITION; supernode-K.pub (gen-supernode-key.sh's names, and
# start-supernode.sh's default key for partition K-1) may leave out =PARTITION.
#
# Usage: deploy/scripts/register-supernodes.sh [--connection NAME] [--registration FILE]
#            [--run-config 'KEY=VALUE ...'] [--no-registration] [--no-register]
#            PUBKEY.pub[=PARTITION]...
#   --connection NAME   Flower connection profile in $FLWR_HOME/config.toml (default: tls;
#                       see flwr-home.sh)
#   --registration FILE where to write the client registration (default above)
#   --run-config STR    the run's data settings (dataset, partitioner, num-partitions,
#                       seed, ...; Flower's --run-config syntax): the registration then
#                       holds each partition's train-split size as fairfl cuts the data
#   --no-registration   register the keys only; write no client registration
#   --no-register       only write FILE; register no key (Kubernetes: the Job registers)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

CONN=tls; KEYS=(); REGISTRATION="$FAIRFL_PKI_DIR/clients.toml"; WRITE=1; REGISTER=1; DATA=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --connection) CONN="$2"; shift 2 ;;
    --registration) REGISTRATION="$2"; shift 2 ;;
    --run-config) DATA="$2"; shift 2 ;;
    --no-registration) WRITE=0; shift ;;
    --no-register) REGISTER=0; shift ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    -*) fairfl_die "unknown option $1" ;;
    *) KEYS+=("$1"); shift ;;
  esac
done
[[ ${#KEYS[@]} -gt 0 ]] || fairfl_die "no public key given"
[[ "$REGISTER" == 1 || "$WRITE" == 1 ]] || fairfl_die "--no-register with --no-registration does nothing"
[[ "$WRITE" == 1 || -z "$DATA" ]] || fairfl_die "--run-config needs the registration (drop --no-registration)"
[[ "$REGISTER" == 0 ]] || fairfl_need flwr "install flwr, or set FAIRFL_VENV"
status=0
if [[ "$WRITE" == 1 ]]; then
  fairfl_need ssh-keygen "install openssh-client (ssh-keygen prints the key fingerprints)"
  entries=("[partitions]"); partitions=()
  for item in "${KEYS[@]}"; do
    if [[ "$item" == *=* ]]; then
      partition="${item##*=}"
    elif [[ "$(basename "$item")" =~ ^supernode-([1-9][0-9]*)\.pub$ ]]; then
      partition=$((BASH_REMATCH[1] - 1))
    else
      fairfl_die "give $item as PUBKEY.pub=PARTITION (or --no-registration to write no client registration)"
    fi
    [[ "$partition" =~ ^(0|[1-9][0-9]*)$ ]] || fairfl_die "partition of $item must be an integer >= 0"
    fingerprint="$(ssh-keygen -lf "${item%=*}" | awk '{print $2}')"
    entries+=("\"$fingerprint\" = $partition"); partitions+=("$partition")
  done
  if [[ -n "$DATA" ]]; then
    fairfl_need python "install fairfl, or set FAIRFL_VENV"
    # The same cut of the data the SuperNodes make (fairfl.data.partition_sizes).
    counts="$(python - "$DATA" "${partitions[@]}" <<'PY'
import sys

from flwr.common.config import parse_config_args

from fairfl.data import partition_sizes
from fairfl.settings import RunSettings

settings = RunSettings.from_run_config(parse_config_args([sys.argv[1]]))
sizes = partition_sizes(**settings.data_kwargs())
print("[num-examples]")
for partition in sys.argv[2:]:
    if int(partition) >= len(sizes):
        sys.exit(f"partition {partition} is outside num-partitions={len(sizes)}")
    print(f'"{partition}" = {sizes[int(partition)]}')
PY
)" || fairfl_die "--run-config: cannot compute the partitions' sample counts"
    entries+=("$counts")
  fi
  mkdir -p "$(dirname "$REGISTRATION")"
  printf '%s\n' "# fairfl client registration: SuperNode key fingerprint = partition id" \
    "${entries[@]}" > "$REGISTRATION.tmp"
  mv "$REGISTRATION.tmp" "$REGISTRATION"  # a reader never sees half a file
  echo "wrote $REGISTRATION (${#KEYS[@]} keys); submit-run.sh passes it as client-registration"
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
