#!/usr/bin/env bash
# One command from a clean clone: create the virtualenv, install the project with its test extra,
# and run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV"; fi
"$VENV/bin/python" -m pip install -q -e ".[test]"
exec "$VENV/bin/python" -m pytest -q -n auto "$@"
