#!/usr/bin/env bash
# Set up (if needed) and run the default federation through Flower's simulation engine:
# 20 clients on digits, Dirichlet alpha=0.3, FedAvg. Extra arguments go to `flwr run -c`,
# e.g.  bash scripts/simulate.sh "strategy='semivred' num-server-rounds=30"
# Exits with the runner's code (docs/site/howto/cli.md, "Exit codes"): non-zero if the run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -z "${OUT:-}" ]; then  # the default folder holds the latest run: replace it
  OUT="$PWD/outputs/default-simulation"
  OVERRIDES="out-dir='$OUT' overwrite=true ${1:-}"
else  # a folder of your own is refused if it holds results (docs/site/explanation/reliability.md)
  OVERRIDES="out-dir='$OUT' ${1:-}"
fi
NODES=$(.venv/bin/python - "$OVERRIDES" <<'PY'
import re, sys, tomllib
config = tomllib.load(open("pyproject.toml", "rb"))["tool"]["flwr"]["app"]["config"]
match = re.search(r"num-partitions=(\d+)", sys.argv[1])
print(match.group(1) if match else config["num-partitions"])
PY
)
echo "results: $OUT/rounds.jsonl $OUT/summary.json"
echo "watch it live (another terminal): .venv/bin/python -m fairfl dashboard $OUT"
# exec: SIGTERM/SIGINT reach the runner, which stops the run; its exit code is ours.
exec .venv/bin/python scripts/flwr_sim.py --supernodes "$NODES" -c "$OVERRIDES" --summary "$OUT/summary.json"
