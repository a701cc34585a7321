#!/usr/bin/env bash
# Sets up and runs the whole test suite with coverage of terminals/ (at least 85%).
# Installs what the tests run for real: redis-server (split mode), PostgreSQL, the shells bash, dash
# and zsh, tmux, less and git, which some tests drive, faketime (a worker whose clock is skewed),
# systemd, whose systemd-analyze checks the units in scripts/systemd/, and chromium with chromedriver,
# which the dashboard's tests drive
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v tmux >/dev/null || missing+=(tmux)
command -v less >/dev/null || missing+=(less)
command -v git >/dev/null || missing+=(git)
command -v zsh >/dev/null || missing+=(zsh)
command -v dash >/dev/null || missing+=(dash)
command -v setsid >/dev/null || missing+=(util-linux)
command -v faketime >/dev/null || missing+=(faketime)
command -v systemd-analyze >/dev/null || missing+=(systemd)
command -v chromium >/dev/null || missing+=(chromium)  # the dashboard's browser tests
command -v chromedriver >/dev/null || missing+=(chromium-driver)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

bash scripts/setup.sh requirements-dev.txt
rm -f .coverage .coverage.*

# Every test on SQLite (the default), and beside it the database-facing ones again on PostgreSQL: that
# run is short and mostly waits on its servers, so it shares the cores instead of adding its time. The
# load test loads a PostgreSQL server beside the SQLite one in the first run (TERMINALS_TEST_POSTGRES_URL),
# so its minute is spent once. The PostgreSQL run skips coverage: the load test's PostgreSQL server,
# measured in the first run, already covers the PostgreSQL paths, and tracing costs time.
read -r pg_dir pg_url < <(bash scripts/postgres.sh start)
pg_log="$(mktemp)"
# Every service process the tests start logs into this folder (tests/servers.py): about a thousand files a run,
# removed when the run passes, kept for reading when it does not.
export TERMINALS_TEST_LOGS="$(mktemp -d -t terminals-test-logs-XXXXXX)"
trap 'bash scripts/postgres.sh stop "$pg_dir"; rm -f "$pg_log"' EXIT
DATABASE_URL="$pg_url" .venv/bin/python -m pytest -p no:cov -p no:cacheprovider \
  tests/test_e2e_lifecycle.py tests/test_audit_chain.py tests/test_worker.py tests/test_api_auth.py \
  tests/test_restart.py tests/test_acp.py tests/test_api_limits.py tests/test_zz_no_secrets.py >"$pg_log" 2>&1 &
pg_run=$!
# The SQLite run spreads the test files over PYTEST_WORKERS processes (pytest-xdist): most of a test's time is
# spent waiting on servers and shells, but more processes than cores load the servers past their deadlines.
# Each has its own servers, database and folders (tests/settings.py). The secrets check then runs alone, over what every process left (tests/run_manifest.py).
workers="${PYTEST_WORKERS:-2}"  # three paid a minute with load flakes on 2 cores
manifests="$(mktemp -d)"
trap 'bash scripts/postgres.sh stop "$pg_dir"; rm -f "$pg_log"; rm -rf "$manifests"' EXIT
sqlite_status=0
TERMINALS_TEST_MANIFESTS="$manifests" TERMINALS_TEST_POSTGRES_URL="$pg_url" .venv/bin/python -m pytest \
  -n "$workers" --dist loadfile --ignore tests/test_zz_no_secrets.py --ignore tests/test_dashboard.py \
  --tb=short --cov --cov-report=term "$@" || sqlite_status=$?
# The dashboard's tests run Chromium, which takes a core: beside the parallel run it slowed that run's servers
# past their deadlines, so they run after it, as a process of their own (folders, database, manifest).
echo "=== the dashboard, in Chromium ==="
PYTEST_XDIST_WORKER=dashboard TERMINALS_TEST_MANIFESTS="$manifests" .venv/bin/python -m pytest \
  -p no:cacheprovider --cov --cov-append --cov-report=term tests/test_dashboard.py || sqlite_status=$?
echo "=== the secrets check, over what every process of the run left ==="
TERMINALS_TEST_MANIFESTS="$manifests" .venv/bin/python -m pytest -p no:cov -p no:cacheprovider \
  tests/test_zz_no_secrets.py || sqlite_status=$?
pg_status=0
wait "$pg_run" || pg_status=$?
echo "=== the database-facing tests on PostgreSQL ==="
cat "$pg_log"
if [ "$sqlite_status" -eq 0 ] && [ "$pg_status" -eq 0 ]; then
  rm -rf "$TERMINALS_TEST_LOGS"
else
  echo "the service processes' logs are kept in $TERMINALS_TEST_LOGS"
  exit 1
fi
