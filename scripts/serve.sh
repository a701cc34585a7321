#!/usr/bin/env bash
# Sets up and runs the service in embedded mode on 127.0.0.1:3001 (HOST, PORT; arguments go to `manage.py serve`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh requirements.txt
exec .venv/bin/python manage.py serve "$@"
