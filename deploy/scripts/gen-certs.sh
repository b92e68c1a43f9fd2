#!/usr/bin/env bash
# Make the keys of a TLS federation with SuperNode authentication:
#   ca.crt / ca.key                  a private certificate authority (keep ca.key offline)
#   superlink.crt / superlink.key    the SuperLink's server certificate, signed by the CA,
#                                    valid for every name/address SuperNodes and the
#                                    flwr CLI use to reach it (subject alternative names)
#   supernodes/<name>, <name>.pub    SuperNode key pairs (EC P-384, OpenSSH format), when
#                                    asked for; devices can instead make their own with
#                                    gen-supernode-key.sh
#   superexec.secret                 shared secret between the SuperLink and its
#                                    SuperExecs in process isolation (optional hardening)
#   supernodes/<name>.superexec.secret  the same for SuperNode <name> and its SuperExec
#                                    (made with the key pair, by gen-supernode-key.sh)
# Distribute ca.crt to every device and to whoever runs `flwr`; superlink.* stay on the
# server host.
#
# Usage: deploy/scripts/gen-certs.sh [options]
#   --out DIR          output directory (default: $FAIRFL_PKI_DIR = $FLWR_HOME/pki)
#   --san NAME         a subject alternative name for the SuperLink certificate;
#                      repeatable; "DNS:x" / "IP:y", or bare (IPs are recognised).
#                      Default: localhost, 127.0.0.1, ::1 and this host's name.
#                      Given SANs are added to those defaults.
#   --supernodes N     also make key pairs supernode-1 .. supernode-N
#   --supernode NAME   also make the key pair NAME (repeatable)
#   --days N           certificate lifetime (default 365)
#   --owner UID:GID    chown everything made to UID:GID (e.g. 49999:49999, the `app`
#                      user of the flwr container images); needs root
#   --force            make a new CA too (every device then needs the new ca.crt)
# The CA and existing SuperNode keys are kept when present; the SuperLink certificate is
# issued again on each run (cheap, and clients trust the CA, not the certificate).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
fairfl_need openssl "apt-get install openssl"

OUT="$FAIRFL_PKI_DIR"; DAYS=365; OWNER=""; FORCE=0
SANS=(); NODES=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --san) SANS+=("$2"); shift 2 ;;
    --supernodes) for ((i = 1; i <= $2; i++)); do NODES+=("supernode-$i"); done; shift 2 ;;
    --supernode) NODES+=("$2"); shift 2 ;;
    --days) DAYS="$2"; shift 2 ;;
    --owner) OWNER="$2"; shift 2 ;;
    --force) FORCE=1; shift ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) fairfl_die "unknown argument $1 (see --help)" ;;
  esac
done
mkdir -p "$OUT"
umask 077   # private keys: owner-only; public files are chmod'ed 644 below

# --- CA ------------------------------------------------------------------------
if [[ "$FORCE" == 1 || ! -s "$OUT/ca.crt" || ! -s "$OUT/ca.key" ]]; then
  openssl ecparam -name secp384r1 -genkey -noout -out "$OUT/ca.key"
  openssl req -x509 -new -key "$OUT/ca.key" -sha384 -days "$((DAYS * 3))" \
    -subj "/O=fairfl/CN=fairfl federation CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$OUT/ca.crt"
  echo "made CA $OUT/ca.crt" >&2
fi

# --- SuperLink certificate with subject alternative names ----------------------
declare -A SEEN=(); SAN_LIST=""
add_san() {
  local s="$1"
  if [[ "$s" != DNS:* && "$s" != IP:* ]]; then
    # Bare value: an IPv4/IPv6 literal becomes IP:, anything else DNS:
    if [[ "$s" =~ ^[0-9.]+$ || "$s" == *:* ]]; then s="IP:$s"; else s="DNS:$s"; fi
  fi
  [[ -n "${SEEN[$s]:-}" ]] && return 0
  SEEN[$s]=1; SAN_LIST+="${SAN_LIST:+,}$s"
}
for s in localhost 127.0.0.1 ::1 "$(hostname)"; do add_san "$s"; done
for s in "${SANS[@]}"; do add_san "$s"; done

EXT="$(mktemp)"; CSR="$(mktemp)"; trap 'rm -f "$EXT" "$CSR"' EXIT
cat > "$EXT" <<EXTEOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=$SAN_LIST
EXTEOF
openssl ecparam -name secp384r1 -genkey -noout -out "$OUT/superlink.key"
openssl req -new -key "$OUT/superlink.key" -subj "/O=fairfl/CN=fairfl SuperLink" -out "$CSR"
openssl x509 -req -in "$CSR" -CA "$OUT/ca.crt" -CAkey "$OUT/ca.key" -CAcreateserial \
  -days "$DAYS" -sha384 -extfile "$EXT" -out "$OUT/superlink.crt" 2>/dev/null
openssl verify -CAfile "$OUT/ca.crt" "$OUT/superlink.crt" >/dev/null
echo "made $OUT/superlink.crt for $SAN_LIST" >&2

# --- SuperExec shared secret ------------------------------------------------------
[[ -s "$OUT/superexec.secret" ]] || openssl rand -hex 32 | tr -d '\n' > "$OUT/superexec.secret"

# --- SuperNode key pairs -----------------------------------------------------------
for n in "${NODES[@]}"; do
  bash "$(dirname "${BASH_SOURCE[0]}")/gen-supernode-key.sh" --out "$OUT/supernodes" "$n"
done

chmod 644 "$OUT/ca.crt" "$OUT/superlink.crt"
[[ -d "$OUT/supernodes" ]] && chmod 755 "$OUT/supernodes" && chmod 644 "$OUT"/supernodes/*.pub 2>/dev/null || true
if [[ -n "$OWNER" ]]; then chown -R "$OWNER" "$OUT"; fi
echo "$OUT"
