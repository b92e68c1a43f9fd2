#!/usr/bin/env bash
# Start a SuperNode on a device, in the foreground (exec). Its node config tells the
# fairfl ClientApp which data partition is this device's and where to train:
#   partition-id, num-partitions (required), data-root, device (optional).
#
# Usage: deploy/scripts/start-supernode.sh --superlink HOST:PORT --partition-id I
#            --num-partitions N [options] [-- extra flower-supernode args]
#   --superlink HOST:PORT  the SuperLink's Fleet proxy (start-proxy.sh, port 9092 by
#                          default; HOST must match a name/IP in its certificate)
#   --partition-id I       this device's partition, 0 <= I < N
#   --num-partitions N     how many partitions the data set is cut into
#   --data-root DIR        where this device keeps data sets (node-config data-root)
#   --device DEV           cpu, cuda, cuda:1, ... or auto (node-config device)
#   --ditto-state-dir DIR  where Ditto keeps this device's personal models, so that a
#                          restarted SuperNode keeps them (node-config ditto-state-dir)
#   --secagg-state-dir DIR where FairFed under SecAgg+ keeps this device's weight, so
#                          that a restarted SuperNode keeps it (node-config
#                          secagg-state-dir)
#   --key PATH             private key registered with the SuperLink
#                          (default $FAIRFL_PKI_DIR/supernodes/supernode-<I+1>)
#   --ca PATH              CA certificate (default $FAIRFL_PKI_DIR/ca.crt)
#   --port PORT            local port of this SuperNode's Runtime API, used by its
#                          ClientApps (default 9094; one per SuperNode on a host)
#   --host ADDR            address of that Runtime API (default 127.0.0.1)
#   --isolation MODE       subprocess (default) or process (start-superexec.sh runs
#                          the ClientApps, e.g. in another container)
#   --superexec-secret FILE  with process isolation, the secret this SuperNode's own
#                          SuperExec must present (default KEY.superexec.secret, made
#                          with the key by gen-supernode-key.sh)
#   --no-superexec-secret  process isolation without SuperExec authentication
#   --insecure             no TLS, no authentication (development only)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
fairfl_need flower-supernode "install flwr, or set FAIRFL_VENV"

SUPERLINK=""; PID=""; NPART=""; DATA_ROOT=""; DEVICE=""; DITTO_DIR=""; SECAGG_DIR=""; KEY=""; CA="$FAIRFL_PKI_DIR/ca.crt"
PORT=9094; HOST=127.0.0.1; ISOLATION=subprocess; INSECURE=0; SECRET=""; USE_SECRET=1; EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --superlink) SUPERLINK="$2"; shift 2 ;;
    --partition-id) PID="$2"; shift 2 ;;
    --num-partitions) NPART="$2"; shift 2 ;;
    --data-root) DATA_ROOT="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    --ditto-state-dir) DITTO_DIR="$2"; shift 2 ;;
    --secagg-state-dir) SECAGG_DIR="$2"; shift 2 ;;
    --key) KEY="$2"; shift 2 ;;
    --ca) CA="$2"; shift 2 ;;
    --port) PORT="$2"; shift 2 ;;
    --host) HOST="$2"; shift 2 ;;
    --isolation) ISOLATION="$2"; shift 2 ;;
    --insecure) INSECURE=1; shift ;;
    --superexec-secret) SECRET="$2"; shift 2 ;;
    --no-superexec-secret) USE_SECRET=0; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    *) fairfl_die "unknown argument $1 (see --help)" ;;
  esac
done
[[ -n "$SUPERLINK" && -n "$PID" && -n "$NPART" ]] \
  || fairfl_die "--superlink, --partition-id and --num-partitions are required"
[[ "$PID" =~ ^[0-9]+$ && "$NPART" =~ ^[0-9]+$ && "$PID" -lt "$NPART" ]] \
  || fairfl_die "need 0 <= partition-id < num-partitions (got $PID, $NPART)"

# Node config: TOML values, so strings are quoted.
NODE_CONFIG="partition-id=$PID num-partitions=$NPART"
[[ -n "$DATA_ROOT" ]] && NODE_CONFIG+=" data-root=\"$DATA_ROOT\""
[[ -n "$DEVICE" ]] && NODE_CONFIG+=" device=\"$DEVICE\""
[[ -n "$DITTO_DIR" ]] && NODE_CONFIG+=" ditto-state-dir=\"$DITTO_DIR\""
[[ -n "$SECAGG_DIR" ]] && NODE_CONFIG+=" secagg-state-dir=\"$SECAGG_DIR\""

ARGS=(--superlink "$SUPERLINK" --node-config "$NODE_CONFIG" --isolation "$ISOLATION"
      --host "$HOST" --port "$PORT")
KEY="${KEY:-$FAIRFL_PKI_DIR/supernodes/supernode-$((PID + 1))}"
if [[ "$INSECURE" == 1 ]]; then
  ARGS+=(--insecure)
else
  [[ -r "$CA" ]] || fairfl_die "CA certificate $CA not readable"
  [[ -r "$KEY" ]] || fairfl_die "private key $KEY not readable (gen-supernode-key.sh)"
  ARGS+=(--root-certificates "$CA" --auth-supernode-private-key "$KEY")
fi
if [[ "$ISOLATION" == process && "$USE_SECRET" == 1 ]]; then
  SECRET="${SECRET:-$KEY.superexec.secret}"
  [[ -s "$SECRET" ]] || fairfl_die "SuperExec secret $SECRET missing: run deploy/scripts/gen-supernode-key.sh (or give --no-superexec-secret)"
  ARGS+=(--superexec-auth-secret-file "$SECRET")
fi
echo "+ flower-supernode ${ARGS[*]} ${EXTRA[*]}" >&2
exec flower-supernode "${ARGS[@]}" "${EXTRA[@]}"
