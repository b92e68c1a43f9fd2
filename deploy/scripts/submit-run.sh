#!/usr/bin/env bash
# Submit a fairfl run to a SuperLink with `flwr run` and stream its log until it ends.
#
# Usage: deploy/scripts/submit-run.sh [options] [-- extra flwr run args]
#   --connection NAME   Flower connection profile (default: tls; see flwr-home.sh)
#   --strategy NAME     aggregation rule, run-config `strategy` (default: fedavg)
#   --rounds N          run-config `num-server-rounds`
#   --out-dir DIR       run-config `out-dir`: where the ServerApp writes rounds.jsonl
#                       and summary.json, on the host (or container) running the
#                       ServerApp; use an absolute path
#   -c KEY=VALUE        any other run-config override (repeatable; strings in TOML
#                       quotes: -c "dataset='digits'")
#   --app DIR           the Flower app to submit (default: the repository root)
#   --no-stream         return once the run is submitted (prints the run id)
#   --registration FILE run-config `client-registration`: the client registration as
#                       the ServerApp's host sees it (default: $FAIRFL_PKI_DIR/clients.toml,
#                       which register-supernodes.sh writes; on the docker profile
#                       /app/registration/clients.toml, where compose's one-shot writes it)
#   --no-registration   run without one knowingly (client-registration='none'): any
#                       registered SuperNode may then claim any free partition and count
#
# Except on the insecure `local` profile, the run is marked node-auth=true (SuperNodes
# authenticate; Flower does not tell a ServerApp so) and bound to the client
# registration: the ServerApp refuses to start with node-auth and no registration.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
fairfl_need flwr "install flwr, or set FAIRFL_VENV"

CONN=tls; APP="$FAIRFL_REPO_ROOT"; STREAM=(--stream); CFG=(); EXTRA=()
REGISTRATION=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --connection) CONN="$2"; shift 2 ;;
    --strategy) CFG+=("strategy='$2'"); shift 2 ;;
    --rounds) CFG+=("num-server-rounds=$2"); shift 2 ;;
    --out-dir) CFG+=("out-dir='$2'"); shift 2 ;;
    -c|--run-config) CFG+=("$2"); shift 2 ;;
    --app) APP="$2"; shift 2 ;;
    --no-stream) STREAM=(--format json); shift ;;
    --registration) REGISTRATION="$2"; shift 2 ;;
    --no-registration) REGISTRATION=none; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) fairfl_die "unknown argument $1 (see --help)" ;;
  esac
done
if [[ -z "$REGISTRATION" && "$CONN" == docker ]]; then
  REGISTRATION=/app/registration/clients.toml
fi
REGISTRATION="${REGISTRATION:-$FAIRFL_PKI_DIR/clients.toml}"
if [[ "$CONN" != local ]]; then
  # A key given with -c wins (Flower refuses a key given twice).
  given=" ${CFG[*]:-}"
  [[ "$given" == *" node-auth="* ]] || CFG+=("node-auth=true")
  [[ "$given" == *" client-registration="* ]] || CFG+=("client-registration='$REGISTRATION'")
fi
ARGS=("$APP" "$CONN" "${STREAM[@]}")
[[ ${#CFG[@]} -gt 0 ]] && ARGS+=(--run-config "${CFG[*]}")
echo "+ flwr run ${ARGS[*]} ${EXTRA[*]}" >&2
exec flwr run "${ARGS[@]}" "${EXTRA[@]}"
