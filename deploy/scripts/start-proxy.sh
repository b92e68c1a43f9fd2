#!/usr/bin/env bash
# Start the Fleet proxy in the foreground (exec: its PID is this script's PID): nginx
# terminating the devices' TLS and forwarding only the Fleet API (POST /v1/fleet/...) to
# the SuperLink, which listens on loopback or a private interface (start-superlink.sh).
# The Control and Runtime APIs get 403 here. Run it on the server host, as any user
# (non-privileged port; config, pid and logs in --run-dir). deploy/README.md, "Security
# model", has the layout.
#
# Usage: deploy/scripts/start-proxy.sh [options]
#   --listen ADDR:PORT   device-facing address (default 0.0.0.0:9092)
#   --superlink H:P      the SuperLink (default 127.0.0.1:8000)
#   --superlink-name N   name its certificate must carry (default localhost)
#   --pki DIR            holds ca.crt and the certificate/key presented to devices
#                        (default $FAIRFL_PKI_DIR)
#   --cert PATH          certificate presented to devices (default $PKI/superlink.crt:
#                        its names must include the address devices use)
#   --key PATH           its private key (default $PKI/superlink.key)
#   --max-body SIZE      largest request body, nginx units (default 512m)
#   --run-dir DIR        nginx.conf, pid, temp files ($FLWR_HOME/proxy)
#   --access-log PATH    one line per request (default $RUN_DIR/access.log;
#                        /dev/stdout in a container)
#   --check              write the config, test it with `nginx -t`, and exit
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
PATH="$PATH:/usr/sbin"  # where Debian puts nginx, off a non-root user's PATH
fairfl_need nginx "apt-get install nginx-light"

LISTEN=0.0.0.0:9092; UPSTREAM=127.0.0.1:8000; UPSTREAM_NAME=localhost
PKI="$FAIRFL_PKI_DIR"; CERT=""; KEY=""; MAX_BODY=512m; RUN_DIR="$FLWR_HOME/proxy"; ACCESS_LOG=""; CHECK=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --listen) LISTEN="$2"; shift 2 ;;
    --superlink) UPSTREAM="$2"; shift 2 ;;
    --superlink-name) UPSTREAM_NAME="$2"; shift 2 ;;
    --pki) PKI="$2"; shift 2 ;;
    --cert) CERT="$2"; shift 2 ;;
    --key) KEY="$2"; shift 2 ;;
    --max-body) MAX_BODY="$2"; shift 2 ;;
    --run-dir) RUN_DIR="$2"; shift 2 ;;
    --access-log) ACCESS_LOG="$2"; shift 2 ;;
    --check) CHECK=1; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) fairfl_die "unknown argument $1 (see --help)" ;;
  esac
done
CERT="${CERT:-$PKI/superlink.crt}"; KEY="${KEY:-$PKI/superlink.key}"
for f in "$PKI/ca.crt" "$CERT" "$KEY"; do
  [[ -r "$f" ]] || fairfl_die "$f missing: run deploy/scripts/gen-certs.sh first"
done
# Values end up inside nginx directives: refuse anything that could end one.
for v in "$LISTEN" "$UPSTREAM" "$UPSTREAM_NAME" "$MAX_BODY" "$RUN_DIR" "$PKI" "$CERT" "$KEY" \
         ${ACCESS_LOG:+"$ACCESS_LOG"}; do
  [[ "$v" =~ ^[A-Za-z0-9_./:@+=-]+$ ]] || fairfl_die "unsafe character in '$v'"
done
mkdir -p "$RUN_DIR/tmp"
RUN_DIR="$(cd "$RUN_DIR" && pwd)"
ACCESS_LOG="${ACCESS_LOG:-$RUN_DIR/access.log}"
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
sed -e "s|@RUN_DIR@|$RUN_DIR|g" -e "s|@LISTEN@|$LISTEN|g" -e "s|@UPSTREAM@|$UPSTREAM|g" \
    -e "s|@UPSTREAM_NAME@|$UPSTREAM_NAME|g" -e "s|@MAX_BODY@|$MAX_BODY|g" -e "s|@ACCESS_LOG@|$ACCESS_LOG|g" \
    -e "s|@CA@|$(abs "$PKI/ca.crt")|g" -e "s|@CERT@|$(abs "$CERT")|g" \
    -e "s|@KEY@|$(abs "$KEY")|g" \
    "$FAIRFL_REPO_ROOT/deploy/proxy/nginx.conf.template" > "$RUN_DIR/nginx.conf"
# -e: log to stderr from the start (the default error log is root's).
if [[ "$CHECK" == 1 ]]; then
  exec nginx -e stderr -p "$RUN_DIR" -c "$RUN_DIR/nginx.conf" -t
fi
echo "+ nginx -p $RUN_DIR -c $RUN_DIR/nginx.conf (Fleet API on $LISTEN -> $UPSTREAM)" >&2
exec nginx -e stderr -p "$RUN_DIR" -c "$RUN_DIR/nginx.conf"
