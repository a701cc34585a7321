#!/usr/bin/env bash
# Sets up and runs the service in embedded mode on 127.0.0.1:3001 (HOST, PORT; arguments go to `manage.py serve`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh requirements.txt
# Under a keeper (terminals/runtime/keeper.py): terminals outlive the server process. SIGHUP restarts it in place
# (running the code now on disk), a crash is survived, and Ctrl-C or SIGTERM still stop it and end its terminals.
export TERMINALS_KEEPER="${TERMINALS_KEEPER:-true}"
exec .venv/bin/python manage.py serve "$@"
