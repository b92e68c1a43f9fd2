#!/usr/bin/env bash
# Set up (if needed) and run the default federation through Flower's simulation engine:
# 20 clients on digits, Dirichlet alpha=0.3, FedAvg. Extra arguments go to `flwr run -c`,
# e.g.  bash scripts/simulate.sh "strategy='semivred' num-server-rounds=30"
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
OUT="${OUT:-$PWD/outputs/default-simulation}"
OVERRIDES="out-dir='$OUT' ${1:-}"
NODES=$(.venv/bin/python - "$OVERRIDES" <<'PY'
import re, sys, tomllib
config = tomllib.load(open("pyproject.toml", "rb"))["tool"]["flwr"]["app"]["config"]
match = re.search(r"num-partitions=(\d+)", sys.argv[1])
print(match.group(1) if match else config["num-partitions"])
PY
)
.venv/bin/python scripts/flwr_sim.py --supernodes "$NODES" -c "$OVERRIDES" --summary "$OUT/summary.json"
echo "results: $OUT/rounds.jsonl $OUT/summary.json"
