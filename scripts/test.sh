#!/usr/bin/env bash
# Sets up and runs the whole test suite with coverage of terminals/ (at least 85%).
# Installs what the tests run for real: redis-server (split mode) and the shells bash, dash and zsh.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v zsh >/dev/null || missing+=(zsh)
command -v dash >/dev/null || missing+=(dash)
command -v setsid >/dev/null || missing+=(util-linux)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

bash scripts/setup.sh requirements-dev.txt
rm -f .coverage .coverage.*
exec .venv/bin/python -m pytest --cov --cov-report=term "$@"
