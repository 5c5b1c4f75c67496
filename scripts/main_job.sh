#!/usr/bin/env bash
# The main job from a clean clone: set up the virtualenv, capture the bundled workload corpus with
# CAPTURE_PROCESS_REPLAY, replay every capture (against HEAD through a git worktree when this is a
# git checkout, else against the working tree), and print the summary table. Uses the embedded
# SQLite database .replay/main_job.db (REPLAY_DB overrides it); no other service.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV"; fi
"$VENV/bin/python" -m pip install -q -e .
PY="$VENV/bin/python"
export REPLAY_DB="${REPLAY_DB:-.replay/main_job.db}"
"$PY" -m replay reset --yes >/dev/null
"$PY" -m replay capture -- "$PY" -m scripts.workloads
if git rev-parse --verify --quiet HEAD >/dev/null 2>&1; then
  exec "$PY" -m replay diff --base HEAD "$@"
else
  exec "$PY" -m replay run "$@"
fi
