#!/usr/bin/env bash
# Creates .venv and installs the pinned Python packages (requirements.txt, or the file given).
set -euo pipefail
cd "$(dirname "$0")/.."
requirements="${1:-requirements.txt}"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r "$requirements"
