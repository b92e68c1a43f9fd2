#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite: fast unit tests first (the docs site
# builds beside them), then the integration tests (Flower's simulation engine, real
# SuperLink/SuperNodes) with the strategy tests and a gRPC loopback deployment under the
# oldest supported flwr beside them, then the tests that read the built docs site; the
# deployment tests (network namespaces, TLS, Docker) run beside all of them. Every phase
# prints its time and the load average as `=== <phase>: N s (load ...) ===`.
set -euo pipefail
cd "$(dirname "$0")/.."
# Runs a command as a phase: its name before, its time after (the command's exit stops
# the suite, as set -e does).
timed() {
  local name=$1; shift
  echo "=== $name ==="
  local start=$SECONDS
  "$@"
  echo "=== $name: $((SECONDS - start)) s (load $(cut -d' ' -f1-3 /proc/loadavg)) ==="
}
# Deployment tests need a Docker engine, debootstrap (offline base image), iproute2
# (network namespaces), openssl/ssh-keygen (TLS, SuperNode keys) and nginx (the Fleet
# proxy in front of the SuperLink); the dashboard's browser tests need headless Chromium
# and its driver; FedMGDA+'s Gram kernel a C compiler; the docs site MathJax; as root,
# install them.
missing_tools() {
  for tool in dockerd docker-compose debootstrap ip openssl ssh-keygen nginx chromium chromedriver cc; do
    command -v "$tool" >/dev/null || return 0
  done
  # The docs site's equations render offline with Debian's MathJax.
  [ -f /usr/share/javascript/mathjax/MathJax.js ] || return 0
  return 1
}
install_tools() {
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    docker.io docker-compose debootstrap iproute2 openssl openssh-client nginx-light \
    chromium chromium-driver gcc libc6-dev libjs-mathjax >/dev/null
}
if [ "$(id -u)" = 0 ] && missing_tools; then
  timed "system tools (apt)" install_tools
fi
# Built Docker base images and the docs' executed blocks are cached outside the
# checkout, so a fresh clone reuses them (a build with a changed input runs again).
export FAIRFL_DOCKER_CACHE="${FAIRFL_DOCKER_CACHE:-$HOME/.cache/fairfl-docker-build}"
export FAIRFL_DOCS_CACHE="${FAIRFL_DOCS_CACHE:-$HOME/.cache/fairfl-docs}"
# mypy's cache too (it checks each entry against its file's hash): a clone type-checks
# only what changed since the last run on this machine.
export MYPY_CACHE_DIR="${MYPY_CACHE_DIR:-$HOME/.cache/fairfl-mypy}"
timed "set-up (.venv)" bash scripts/setup.sh
# The suite must leave the checkout as it found it (checked at the end): tests write
# under their temporary folders; build/, outputs/ and .venv are ignored.
checkout_status() {
  git rev-parse --is-inside-work-tree >/dev/null 2>&1 || return 0
  git status --porcelain --untracked-files=all
}
status_before="$(checkout_status)"
# The oldest-flwr environment installs in the background (mostly downloads) while the
# first phases run; its phase waits for it.
oldest_log="$(mktemp)"
bash scripts/setup_oldest_flwr.sh >"$oldest_log" 2>&1 &
oldest_setup_pid=$!
export FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
export FLWR_HOME="$PWD/.flwr-home"
# Test processes per phase: pytest-xdist workers for the unit, integration and
# oldest-flwr phases (the deployment tests beside them mostly wait on polls).
WORKERS="${FAIRFL_TEST_WORKERS:-2}"
# FedMGDA+'s compiled Gram kernel must build here: its tests fail instead of falling
# back to numpy (tests that pin the fallback set the variable themselves).
export FAIRFL_GRAM_KERNEL=compiled
run_phase() {
  local name=$1; shift
  echo "=== $name ==="
  local start=$SECONDS
  set +e
  .venv/bin/python -m pytest "$@"
  local code=$?
  set -e
  echo "=== $name: $((SECONDS - start)) s (load $(cut -d' ' -f1-3 /proc/loadavg)) ==="
  # 5 = no test selected in this phase: not a failure of the suite.
  if [ "$code" -ne 0 ] && [ "$code" -ne 5 ]; then
    exit "$code"
  fi
}
timed ruff .venv/bin/ruff check fairfl tests scripts benchmarks examples experiments deploy
# Types: --strict across fairfl (pyproject.toml's [tool.mypy]).
timed mypy .venv/bin/mypy fairfl
# The deployment tests spend most of their time waiting on Flower's 3 s polls (a
# federation's tests use about a fifth of a core), so they run beside the other phases,
# two files at a time (each file's federations are its own: namespaces tagged per
# federation, free ports, a private Docker engine), in their own session (so that an early
# exit stops them all); their output is printed when they end. The 50-round churn soak is
# not among them: it runs only when asked for (`pytest -m soak`, docs/site/howto/testing.md).
deploy_log="$(mktemp)"
setsid bash -c "$(declare -f run_phase); run_phase 'deployment tests' -q \
  -n $WORKERS --dist loadfile -m 'deployment and not soak' -rs --durations=8" \
  >"$deploy_log" 2>&1 &
deploy_pid=$!
# On an early exit: SIGTERM, which their pytest turns into an interrupt that runs the
# fixtures' teardown (stopping the federations' processes, removing the namespaces);
# then, if it has not ended within 3 minutes, SIGKILL.
stop_session() {
  kill -TERM -- -"$1" 2>/dev/null || true
  for _ in $(seq 180); do
    kill -0 -- -"$1" 2>/dev/null || break
    sleep 1
  done
  kill -KILL -- -"$1" 2>/dev/null || true
}
stop_background_phases() {
  if [ -n "${oldest_pid:-}" ]; then
    stop_session "$oldest_pid"
    echo "=== oldest supported flwr stopped: an earlier phase failed; its output so far: ==="
    cat "$oldest_tests_log"
  fi
  if [ -n "${docs_pid:-}" ]; then
    stop_session "$docs_pid"
    echo "=== docs site stopped: an earlier phase failed; its output so far: ==="
    cat "$docs_log"
  fi
  stop_session "$deploy_pid"
  echo "=== deployment tests stopped: an earlier phase failed; their output so far: ==="
  cat "$deploy_log"
}
trap stop_background_phases EXIT
# The docs site, strictly (warnings, broken cross-references and internal links fail),
# builds beside the unit tests, in its own session: Sphinx reads on one core and the
# executed blocks (cached in $FAIRFL_DOCS_CACHE) mostly wait on their federations. The
# tests that read the built HTML (marked docs_site by tests/docs/conftest.py) run once
# it is built. On an early exit it gets SIGTERM, which stops a running block's processes.
docs_log="$(mktemp)"
docs_start=$SECONDS
setsid bash scripts/docs.sh >"$docs_log" 2>&1 &
docs_pid=$!
run_phase "unit and property tests" -q -n "$WORKERS" --durations=10 \
  -m "not integration and not deployment and not docs_site"
# The README advises OpenBLAS's Haswell kernels for FedMGDA+ on AMD Zen 4 servers where
# the compiled Gram kernel cannot be built: the Gram's float32 precision tests again under
# them, on both paths (x86 only: OpenBLAS's kernel names).
if [ "$(uname -m)" = x86_64 ]; then
  OPENBLAS_CORETYPE=Haswell run_phase "FedMGDA+ on OpenBLAS's Haswell kernels" -q \
    -p no:cacheprovider tests/strategies/test_fedmgda.py tests/strategies/test_fedmgda_float32.py
fi
# The strategy tests and a gRPC loopback deployment under the oldest supported flwr run
# beside the integration tests, in one worker of their own session: those mostly wait on
# Ray and the SuperLink (a flwr run uses about half a core).
echo "=== oldest supported flwr (Fleet API over gRPC), beside the integration tests ==="
oldest_start=$SECONDS
set +e
wait "$oldest_setup_pid"
code=$?
set -e
cat "$oldest_log"
echo "=== oldest-flwr set-up, waited: $((SECONDS - oldest_start)) s ==="
[ "$code" -eq 0 ] || exit "$code"
oldest_tests_log="$(mktemp)"
# The hostile-payload fuzz at 100 per rule there (every kind of hostile array still seen
# by every rule, which the test asserts): the unit phase sends 400 under the newest flwr.
FAIRFL_HOSTILE_PAYLOADS=100 setsid .venv-flwr-oldest/bin/python -m pytest -q -p no:cacheprovider -rs -n 1 \
  -m "not flower_free" tests/strategies tests/contract/test_contract.py tests/metrics/test_metrics.py tests/compat \
  >"$oldest_tests_log" 2>&1 &
oldest_pid=$!
# One file per worker: a module's federation fixture runs once. The tests that read the
# built docs site wait for it (below).
run_phase "integration tests" -q -n "$WORKERS" --dist loadfile \
  -m "integration and not deployment and not docs_site" --durations=12
echo "=== docs site (waiting for its build) ==="
set +e
wait "$docs_pid"
code=$?
set -e
docs_pid=""
cat "$docs_log"
echo "=== docs site: $((SECONDS - docs_start)) s (since it started beside the unit tests) ==="
[ "$code" -eq 0 ] || exit "$code"
run_phase "docs site tests" -q -n 0 -m "docs_site and not deployment" tests/docs
echo "=== oldest supported flwr (waiting for it) ==="
start=$SECONDS
set +e
wait "$oldest_pid"
code=$?
set -e
oldest_pid=""
cat "$oldest_tests_log"
echo "=== oldest supported flwr: $((SECONDS - oldest_start)) s (since the integration tests started; waited $((SECONDS - start)) s) ==="
[ "$code" -eq 0 ] || exit "$code"
start=$SECONDS
set +e
wait "$deploy_pid"
deploy_code=$?
set -e
trap - EXIT
cat "$deploy_log"
echo "=== deployment tests, waited: $((SECONDS - start)) s ==="
status_after="$(checkout_status)"
if [ "$status_after" != "$status_before" ]; then
  echo "=== the suite changed the checkout (git status before and after): ==="
  diff <(echo "$status_before") <(echo "$status_after") || true
  exit 1
fi
echo "=== whole suite: $SECONDS s ==="
exit "$deploy_code"
