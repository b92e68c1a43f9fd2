#!/usr/bin/env bash
# Make one SuperNode's authentication key pair: an EC P-384 private key in OpenSSH
# format (what `flower-supernode --auth-supernode-private-key` reads) and its `.pub`
# (what `flwr supernode register` takes). Run it on the device itself, so that the
# private key never leaves it; send only NAME.pub to the SuperLink's operator.
# Also makes NAME.superexec.secret (kept when present): the secret this SuperNode and
# its own ClientApp SuperExec share in process isolation (--superexec-auth-secret-file
# on both); it never leaves the device either.
#
# Usage: deploy/scripts/gen-supernode-key.sh [--out DIR] [--force] NAME
#   --out DIR   where to write NAME and NAME.pub (default: $FAIRFL_PKI_DIR/supernodes)
#   --force     replace an existing key pair (the old public key must then be
#               unregistered: `flwr supernode unregister`)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

OUT="$FAIRFL_PKI_DIR/supernodes"; FORCE=0; NAME=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --force) FORCE=1; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) fairfl_die "unknown option $1" ;;
    *) NAME="$1"; shift ;;
  esac
done
[[ -n "$NAME" ]] || fairfl_die "usage: $0 [--out DIR] [--force] NAME"
[[ "$NAME" =~ ^[A-Za-z0-9._-]+$ ]] || fairfl_die "bad key name '$NAME'"
mkdir -p "$OUT"
KEY="$OUT/$NAME"
if [[ ! -s "$KEY.superexec.secret" ]]; then
  (umask 077; python3 -c 'import secrets; print(secrets.token_hex(32), end="")' \
    > "$KEY.superexec.secret")
fi
if [[ -e "$KEY" && "$FORCE" == 0 ]]; then
  echo "kept existing $KEY" >&2
  exit 0
fi
rm -f "$KEY" "$KEY.pub"
umask 077
if [[ "${FAIRFL_KEYGEN:-}" != python ]] && command -v ssh-keygen >/dev/null 2>&1; then
  ssh-keygen -q -t ecdsa -b 384 -N "" -C "$NAME" -f "$KEY"
else
  # Same result with the `cryptography` package (a dependency of flwr); also used when
  # FAIRFL_KEYGEN=python.
  python3 - "$KEY" "$NAME" <<'PY'
import sys
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
path, name = sys.argv[1], sys.argv[2]
key = ec.generate_private_key(ec.SECP384R1())
open(path, "wb").write(key.private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
    serialization.NoEncryption()))
pub = key.public_key().public_bytes(
    serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
open(path + ".pub", "wb").write(pub + b" " + name.encode() + b"\n")
PY
fi
chmod 600 "$KEY"; chmod 644 "$KEY.pub"
echo "wrote $KEY and $KEY.pub" >&2
