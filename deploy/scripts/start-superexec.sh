#!/usr/bin/env bash
# Start a SuperExec in the foreground (exec). Needed only with --isolation process: it
# runs the ServerApp (pointed at the SuperLink) or the ClientApps (pointed at one
# SuperNode's Runtime API) wherever fairfl and its dependencies are installed, e.g. in
# a container or on a GPU host next to the SuperNode.
#
# Usage: deploy/scripts/start-superexec.sh --runtime-api HOST:PORT [options]
#   --runtime-api HOST:PORT  SuperLink address (ServerApps) or SuperNode --port (ClientApps)
#   --ca PATH                verify the Runtime API's TLS certificate with this CA
#                            (the SuperLink's API is TLS when the SuperLink is)
#   --insecure               plain HTTP (a SuperNode's local Runtime API, by default)
#   --secret FILE            the secret its SuperLink/SuperNode verifies (required:
#                            superexec.secret for the ServerApp's, the SuperNode's
#                            KEY.superexec.secret for ClientApps')
#   --no-secret              the SuperLink/SuperNode runs without SuperExec
#                            authentication (--no-superexec-secret)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
fairfl_need flower-superexec "install flwr, or set FAIRFL_VENV"

API=""; CA=""; INSECURE=0; SECRET=""; USE_SECRET=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runtime-api) API="$2"; shift 2 ;;
    --ca) CA="$2"; shift 2 ;;
    --insecure) INSECURE=1; shift ;;
    --secret) SECRET="$2"; shift 2 ;;
    --no-secret) USE_SECRET=0; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) fairfl_die "unknown argument $1 (see --help)" ;;
  esac
done
[[ -n "$API" ]] || fairfl_die "--runtime-api is required"
ARGS=(--runtime-api-address "$API")
if [[ "$INSECURE" == 1 ]]; then ARGS+=(--insecure)
elif [[ -n "$CA" ]]; then ARGS+=(--root-certificates "$CA")
else fairfl_die "give --ca PATH or --insecure"; fi
if [[ "$USE_SECRET" == 1 ]]; then
  [[ -n "$SECRET" ]] || fairfl_die "give --secret FILE (or --no-secret)"
  [[ -s "$SECRET" ]] || fairfl_die "SuperExec secret $SECRET missing or empty"
  ARGS+=(--superexec-auth-secret-file "$SECRET")
fi
echo "+ flower-superexec ${ARGS[*]}" >&2
exec flower-superexec "${ARGS[@]}"
