#!/usr/bin/env bash
# The main job from a clean clone: set up the virtualenv, capture the bundled workload corpus with
# CAPTURE_PROCESS_REPLAY, replay every capture (against HEAD through a git worktree when this is a
# git checkout, else against the working tree), and print the summary table. Uses the embedded
# SQLite database .replay/replay.db, the one every `replay` command reads by default (REPLAY_DB
# overrides it); each run of the job adds a capture run, and `replay prune` trims old ones.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV"; fi
PY="$VENV/bin/python"
# pip takes ~3.5 s even when nothing changed: install only when pyproject.toml differs from the last install here
STAMP="$VENV/.process-replay-installed"
WANT="$(pwd) $(cksum < pyproject.toml)"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ] || ! "$PY" -c "import sqlite_utils, numpy, tabulate" 2>/dev/null; then
  "$PY" -m pip install -q -e .
  echo "$WANT" > "$STAMP"
fi
CACHE="${COMPILE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/process-replay}"
# kernels built alone (cpu/*.so) and inside translation units (one cpu-index/*.txt each); no cache folder yet: 0
BUILT=$( (find "$CACHE/cpu" "$CACHE/cpu-index" \( -name '*.so' -o -name '*.txt' \) 2>/dev/null || true) | wc -l | tr -d ' ')
if [ "$BUILT" -lt 100 ]; then
  echo "main job: the compile cache ($CACHE) holds $BUILT kernels: the corpus compiles about 800 C kernels first," \
       "$(nproc 2>/dev/null || echo 1) compiler processes at a time (about 9 s of compiler time); later runs take them from the cache" >&2
fi
echo "main job: capturing the corpus (python -m scripts.workloads) into ${REPLAY_DB:-.replay/replay.db}" >&2
COMPILE_PROGRESS=1 "$PY" -m replay capture -- "$PY" -m scripts.workloads --jobs "$(nproc 2>/dev/null || echo 1)"
echo "main job: replaying every capture" >&2
if git rev-parse --verify --quiet HEAD >/dev/null 2>&1; then
  exec "$PY" -m replay diff --base HEAD "$@"
else
  exec "$PY" -m replay run "$@"
fi
