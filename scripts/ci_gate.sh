#!/usr/bin/env bash
# Run the replay gate the way CI does, locally or in any CI system:
#   bash scripts/ci_gate.sh [workload names...]
# BASE (default origin/main) is the revision to compare with; the merge base with HEAD is used.
# REPLAY_PYTHON picks the interpreter (default .venv/bin/python, else python3); REPLAY_HTML and
# REPLAY_JUNIT name the report files. Extra arguments are passed to `python -m scripts.workloads`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${REPLAY_PYTHON:-}"
if [ -z "$PY" ]; then if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi; fi
BASE="${BASE:-origin/main}"
exec "$PY" -m replay gate --base "$BASE" --merge-base --html "${REPLAY_HTML:-replay-report.html}" \
  --junit "${REPLAY_JUNIT:-replay-junit.xml}" -- "$PY" -m scripts.workloads "$@"
