"""Replay throughput: the corpus captured once, then replayed against the working tree with 1 and with
2 worker processes. Prints captures per second and the share of replay time spent outside the compiler
(loading payloads, comparing, storing, process start-up)."""
import os, subprocess, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main():
  sys.path.insert(0, str(ROOT))
  with tempfile.TemporaryDirectory() as tmp:
    db = os.path.join(tmp, "bench.db")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REPLAY_DB": db, "CAPTURE_PROCESS_REPLAY": "1"}
    subprocess.run([sys.executable, "-m", "scripts.workloads", *sys.argv[1:]], cwd=ROOT, env=env, check=True,
                   capture_output=True)
    from db import Store
    from replay.runner import replay_captures, RunOptions
    store = Store(db)
    caps = store.captures()
    results = {}
    for jobs in (1, 2, 1, 2):
      r = replay_captures(store, caps, [str(ROOT)], {"capture_run_id": None}, RunOptions(jobs=jobs, progress=False))
      bad = [o for o in r.outcomes if o["status"] != "same"]
      results.setdefault(jobs, []).append((r.wall_seconds, r.compiler_seconds, len(bad)))
    for jobs, runs in results.items():
      wall = min(w for w, _, _ in runs)
      comp = [c for w, c, _ in runs if w == wall][0]
      print(f"jobs={jobs}: {len(caps)} captures in {wall:.2f}s = {len(caps) / wall:.0f} captures/s; "
            f"compiler time {comp:.2f}s of {wall * jobs:.2f} worker-seconds -> outside the compiler "
            f"{1 - comp / (wall * jobs):.0%}"
            + (f"; {runs[0][2]} not same" if runs[0][2] else ""))
    w1, w2 = min(w for w, _, _ in results[1]), min(w for w, _, _ in results[2])
    print(f"speed-up with 2 jobs: {w1 / w2:.2f}x (goal >= 1.7x); goal for the outside share: < 15%")


if __name__ == "__main__": main()
