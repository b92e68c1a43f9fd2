#!/bin/sh
# One-shot registration of SuperNode public keys, run by the `supernode-register`
# service of docker-compose.yml (in the SuperLink image: POSIX sh, since the official
# images may be Alpine). Keys already registered are skipped, so `up` can be repeated.
#
# With --registration FILE, each key is given as PUBKEY=PARTITION and FILE is written:
# the client registration the ServerApp reads (run config client-registration), mapping
# each key's SSH fingerprint (what `ssh-keygen -lf` prints) to the partition id it may
# speak for. docker-compose.yml writes it to the volume the ServerApp's SuperExec mounts
# read-only at /app/registration.
#
# Usage: register-supernodes.sh [--registration FILE] SUPERLINK_HOST:PORT CA_CERT
#            PUBKEY[=PARTITION]...
set -eu
REGISTRATION=""
if [ "${1:-}" = "--registration" ]; then
  [ "$#" -ge 2 ] || { echo "--registration needs a FILE" >&2; exit 2; }
  REGISTRATION="$2"; shift 2
fi
[ "$#" -ge 3 ] || { echo "usage: $0 [--registration FILE] SUPERLINK CA PUBKEY[=PARTITION]..." >&2; exit 2; }
SUPERLINK="$1"; CA="$2"; shift 2
export FLWR_HOME="${FLWR_HOME:-/tmp/flwr-register}"
export FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1
mkdir -p "$FLWR_HOME"
cat > "$FLWR_HOME/config.toml" <<TOML
[superlink]
default = "compose"

[superlink.compose]
address = "$SUPERLINK"
root-certificates = "$CA"
TOML
if [ -n "$REGISTRATION" ]; then
  # python is in every flwr image; the fingerprint is SHA256 of the key's wire form.
  python - "$REGISTRATION" "$@" <<'PY'
import base64, hashlib, os, sys

target, items = sys.argv[1], sys.argv[2:]
lines = ["# fairfl client registration: SuperNode key fingerprint = partition id",
         "[partitions]"]
for item in items:
    key, sep, partition = item.rpartition("=")
    if not sep or not partition.isdigit() or (partition != "0" and partition[0] == "0"):
        sys.exit(f"--registration: give {item} as PUBKEY=PARTITION (an integer >= 0)")
    with open(key) as handle:
        blob = base64.b64decode(handle.read().split()[1])
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    lines.append(f'"SHA256:{digest}" = {partition}')
with open(target + ".tmp", "w") as handle:
    handle.write("\n".join(lines) + "\n")
os.replace(target + ".tmp", target)  # a reader never sees half a file
print(f"wrote {target} ({len(items)} keys)")
PY
fi
status=0
for item in "$@"; do
  key="${item%=*}"
  name="$(basename "$key" .pub)"
  if out="$(flwr supernode register "$key" compose --name "$name" 2>&1)"; then
    echo "registered $name"
  elif echo "$out" | grep -qi "already"; then
    echo "already registered: $name"
  else
    echo "failed to register $name: $out" >&2; status=1
  fi
done
flwr supernode list compose || status=1
exit "$status"
