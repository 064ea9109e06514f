#!/usr/bin/env bash
# Create .venv with Python >= 3.12 and install the pinned requirements.
# Re-runs pip only when a requirements file is newer than the install stamp.
set -euo pipefail
cd "$(dirname "$0")/.."

REQS="${1:-requirements-dev.txt}"
VENV=.venv

source scripts/find_python.sh

if [ ! -x "$VENV/bin/python" ]; then
  if ! PY="$(find_python)"; then
    echo "Modex needs Python 3.12 or newer (Django 6). Install it (e.g. 'pyenv install 3.12') and retry." >&2
    exit 1
  fi
  echo "Creating $VENV with $("$PY" --version)"
  "$PY" -m venv "$VENV"
fi

STAMP="$VENV/.installed-$(basename "$REQS" .txt)"
if [ ! -f "$STAMP" ] || [ -n "$(find requirements*.txt -newer "$STAMP" 2>/dev/null)" ]; then
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQS"
  touch "$STAMP"
fi
