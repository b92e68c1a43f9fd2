#!/usr/bin/env bash
# Start a SuperLink in the foreground (exec: its PID is this script's PID), with TLS,
# SuperNode authentication and a state database unless told otherwise. Run it on the
# server host; register the SuperNodes' public keys next (register-supernodes.sh).
# It listens on loopback: its one port serves the Fleet, Control and Runtime APIs, so
# devices reach only the Fleet API, through start-proxy.sh; the operator runs `flwr`
# on this host (or through an SSH tunnel to it). deploy/README.md, "Security model".
#
# Usage: deploy/scripts/start-superlink.sh [options] [-- extra flower-superlink args]
#   --pki DIR           holds superlink.crt, superlink.key, ca.crt (default $FAIRFL_PKI_DIR)
#   --host ADDR         address to listen on (default 127.0.0.1; a private interface
#                       when the ServerApp's SuperExec runs on another host/container;
#                       never one devices can reach)
#   --port PORT         the one HTTP(S) port for Fleet, Control and Runtime APIs (8000)
#   --database PATH     SQLite state database (default $FLWR_HOME/superlink/state.db);
#                       ":memory:" keeps state in memory only
#   --isolation MODE    subprocess (default: the SuperLink runs ServerApps itself) or
#                       process (a separate start-superexec.sh runs them)
#   --superexec-secret FILE  with process isolation, the secret SuperExecs must
#                       present (default $PKI/superexec.secret, made by gen-certs.sh;
#                       flwr ignores it in subprocess isolation)
#   --no-superexec-secret    process isolation without SuperExec authentication
#   --no-auth           accept any SuperNode (TLS stays on)
#   --insecure          no TLS and no SuperNode authentication (development only)
#   --log-file PATH     also write the log to PATH
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
fairfl_need flower-superlink "install flwr, or set FAIRFL_VENV"

PKI="$FAIRFL_PKI_DIR"; HOST=127.0.0.1; PORT=8000; DB="$FLWR_HOME/superlink/state.db"
ISOLATION=subprocess; AUTH=1; TLS=1; SECRET=""; USE_SECRET=1; LOG_FILE=""; EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --pki) PKI="$2"; shift 2 ;;
    --host) HOST="$2"; shift 2 ;;
    --port) PORT="$2"; shift 2 ;;
    --database) DB="$2"; shift 2 ;;
    --isolation) ISOLATION="$2"; shift 2 ;;
    --superexec-secret) SECRET="$2"; shift 2 ;;
    --no-superexec-secret) USE_SECRET=0; shift ;;
    --no-auth) AUTH=0; shift ;;
    --insecure) TLS=0; AUTH=0; shift ;;
    --log-file) LOG_FILE="$2"; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) fairfl_die "unknown argument $1 (see --help)" ;;
  esac
done

ARGS=(--host "$HOST" --port "$PORT" --isolation "$ISOLATION" --disable-runtime-dependency-installation)
if [[ "$TLS" == 1 ]]; then
  for f in ca.crt superlink.crt superlink.key; do
    [[ -r "$PKI/$f" ]] || fairfl_die "$PKI/$f missing: run deploy/scripts/gen-certs.sh first"
  done
  ARGS+=(--ssl-ca-certfile "$PKI/ca.crt" --ssl-certfile "$PKI/superlink.crt" --ssl-keyfile "$PKI/superlink.key")
else
  ARGS+=(--insecure)
fi
[[ "$AUTH" == 1 ]] && ARGS+=(--enable-supernode-auth)
if [[ "$DB" != ":memory:" ]]; then
  mkdir -p "$(dirname "$DB")"
  ARGS+=(--database "$DB")
fi
if [[ "$ISOLATION" == process && "$USE_SECRET" == 1 ]]; then
  SECRET="${SECRET:-$PKI/superexec.secret}"
  [[ -s "$SECRET" ]] || fairfl_die "SuperExec secret $SECRET missing: run deploy/scripts/gen-certs.sh (or give --no-superexec-secret)"
  ARGS+=(--superexec-auth-secret-file "$SECRET")
fi
[[ -n "$LOG_FILE" ]] && ARGS+=(--log-file "$LOG_FILE")
echo "+ flower-superlink ${ARGS[*]} ${EXTRA[*]}" >&2
exec flower-superlink "${ARGS[@]}" "${EXTRA[@]}"
