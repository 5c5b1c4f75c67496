"""Capture overhead: the corpus (or the workloads named: `python -m scripts.bench.capture_bench --only mlp_sgd
cnn_adam transformer_adamw --no-variants`) run with capture off and on, alternating, ROUNDS=5 pairs (fresh processes,
warm compile cache). Prints the median wall times, the median of the pairs' ratios, and database bytes per capture
(per kind: every blob its captures refer to, with the zlib dictionaries of their deltas)."""
import os, statistics, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_corpus(capture: bool, db: str, args: list[str]) -> float:
  env = {**os.environ, "PYTHONPATH": str(ROOT), "REPLAY_DB": db, "CAPTURE_PROCESS_REPLAY": "1" if capture else "0"}
  t0 = time.perf_counter()
  subprocess.run([sys.executable, "-m", "scripts.workloads", *args], cwd=ROOT, env=env, check=True, capture_output=True)
  return time.perf_counter() - t0


def main():
  args = sys.argv[1:]
  rounds = int(os.getenv("ROUNDS", "5"))
  with tempfile.TemporaryDirectory() as tmp:
    db = os.path.join(tmp, "bench.db")
    run_corpus(False, db, args)  # warm the compile cache
    off, on = [], []
    for _ in range(rounds):
      off.append(run_corpus(False, db, args))
      on.append(run_corpus(True, db, args))
    import sqlite3
    conn = sqlite3.connect(db)
    captures = conn.execute("SELECT count(*) FROM captures").fetchone()[0]
    blob_bytes = conn.execute("SELECT coalesce(sum(length(data)), 0) FROM blobs").fetchone()[0]
    # per kind, of the first run: every blob its captures refer to (payloads and shared input buffers), once
    first_run = conn.execute("SELECT min(run_id) FROM captures").fetchone()[0]
    per_kind = {}
    for kind in ("schedule", "kernel", "exec"):
      n = conn.execute("SELECT count(*) FROM captures WHERE run_id = ? AND kind = ?", (first_run, kind)).fetchone()[0]
      mine = "SELECT id FROM captures WHERE run_id = ? AND kind = ?"
      refs = (f"SELECT input_sha FROM captures WHERE id IN ({mine}) UNION SELECT output_sha FROM captures WHERE id IN "
              f"({mine}) UNION SELECT sha256 FROM capture_blobs WHERE capture_id IN ({mine})")
      # with the zlib dictionaries the kind's deltas were compressed with
      total = conn.execute(f"SELECT coalesce(sum(length(data)), 0) FROM blobs WHERE sha256 IN ({refs}) OR sha256 IN "
                           f"(SELECT base FROM blobs WHERE sha256 IN ({refs}))", (first_run, kind) * 6).fetchone()[0]
      per_kind[kind] = (n, total)
    conn.close()
    size = sum(os.path.getsize(os.path.join(tmp, f)) for f in os.listdir(tmp) if f.startswith("bench.db"))
  m_off, m_on = statistics.median(off), statistics.median(on)
  pairs = statistics.median(b / a for a, b in zip(off, on))
  print(f"wall time, median of {rounds} alternated pairs: capture off {m_off:.2f}s, capture on {m_on:.2f}s, "
        f"ratio on/off {pairs:.3f} (median of the pairs' ratios; goal <= 1.05)")
  print(f"{captures} captures over {rounds} runs; database {size / 1e6:.2f} MB = {size / max(captures, 1):.0f} bytes "
        f"per capture "
        f"({blob_bytes / max(captures, 1):.0f} compressed blob bytes per capture; identical payloads are stored once)")
  print("one run, compressed blob bytes per capture by kind: " + ", ".join(f"{kind} {total / max(n, 1):.0f} ({n} "
                                                                           f"captures)"
                                                                          for kind, (n, total) in per_kind.items())
        + " (input and output buffers stored once by content, constant fills as their value)")


if __name__ == "__main__": main()
