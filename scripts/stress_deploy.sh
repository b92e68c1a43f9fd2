#!/usr/bin/env bash
# The stress check to run before stopping (issue 41): the deployment phase of
# scripts/test.sh with CPU hogs beside it, two busy-loop processes by default (on a
# 2-core machine: every core contended), then the phase's time and result.
#
#   bash scripts/stress_deploy.sh                       # the whole phase, as CI runs it
#   bash scripts/stress_deploy.sh tests/deploy/test_deployment_faults.py   # one file
#   FAIRFL_STRESS_HOGS=4 bash scripts/stress_deploy.sh  # more hogs
#
# Extra arguments go to pytest (files, -k, -x). The hogs are started and stopped by PID
# (also on Ctrl-C or an error); the tests stop their own processes and namespaces.
# Setup as scripts/test.sh (run it once first: the venv, the Docker engine, the tools).
set -euo pipefail
cd "$(dirname "$0")/.."
export FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
export FLWR_HOME="$PWD/.flwr-home" FAIRFL_GRAM_KERNEL=compiled
export FAIRFL_DOCKER_CACHE="${FAIRFL_DOCKER_CACHE:-$HOME/.cache/fairfl-docker-build}"
hogs=()
stop_hogs() {
  for pid in "${hogs[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  hogs=()
}
trap stop_hogs EXIT
for _ in $(seq "${FAIRFL_STRESS_HOGS:-2}"); do
  bash -c 'while :; do :; done' &
  hogs+=("$!")
done
echo "=== stress: ${#hogs[@]} busy loops (PIDs ${hogs[*]}) beside the deployment tests on $(nproc) cores ==="
start=$SECONDS
set +e
.venv/bin/python -m pytest -q -m 'deployment and not soak' -rs --durations=8 "$@"
code=$?
set -e
stop_hogs
echo "=== stress: deployment tests beside ${FAIRFL_STRESS_HOGS:-2} busy loops: $((SECONDS - start)) s, exit code $code, load average $(cut -d' ' -f1-3 /proc/loadavg) ==="
exit "$code"
