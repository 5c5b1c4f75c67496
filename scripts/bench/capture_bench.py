"""Capture overhead: the corpus (or the workloads named: `python -m scripts.bench.capture_bench --only mlp_sgd
cnn_adam transformer_adamw --no-variants`) run with capture off and on, alternating, ROUNDS=5 pairs (fresh processes,
warm compile cache). Prints the median wall and CPU times, the median of the pairs' ratios, the best CPU time of each
side, and database bytes per capture (per kind: the blobs its captures refer to, with the zlib dictionaries of their
deltas, and of a pack the part its members' sizes make; a blob that several captures refer to is split between them)."""
import os, resource, statistics, subprocess, sys, tempfile, time
from pathlib import Path
from db.store import PACK_MARK

ROOT = Path(__file__).resolve().parents[2]


def run_corpus(capture: bool, db: str, args: list[str]) -> tuple[float, float]:
  """Wall seconds and CPU seconds (user and system, of the process and what it waited for) of one run."""
  env = {**os.environ, "PYTHONPATH": str(ROOT), "REPLAY_DB": db, "CAPTURE_PROCESS_REPLAY": "1" if capture else "0"}
  # as users run: modules compiled once (capture imports a dozen modules the run without it does not)
  env.pop("PYTHONDONTWRITEBYTECODE", None)
  t0 = time.perf_counter()
  proc = subprocess.Popen([sys.executable, "-m", "scripts.workloads", *args], cwd=ROOT, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  _, stderr = proc.communicate()
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  if proc.returncode != 0: raise SystemExit(f"the workloads failed (exit {proc.returncode}): {stderr.decode()[-2000:]}")
  return time.perf_counter() - t0, usage.ru_utime + usage.ru_stime


def bytes_per_kind(conn, run_id: int) -> dict[str, list]:
  """kind -> [captures, compressed bytes] of one run: each blob its captures refer to (payloads, parts, input buffers,
  the zlib dictionary of a delta, a pack member's part of its pack) split evenly between the captures that refer to
  it."""
  refs: dict[str, list[str]] = {}
  for cid, kind, inp, out in conn.execute("SELECT id, kind, input_sha, output_sha FROM captures WHERE run_id = ?",
                                          (run_id,)).fetchall():
    shared = [r[0] for r in conn.execute("SELECT sha256 FROM capture_blobs WHERE capture_id = ?", (cid,))]
    for sha in {inp, out, *shared}: refs.setdefault(sha, []).append(kind)
  sizes = dict(conn.execute("SELECT sha256, length(data) FROM blobs").fetchall())
  # a pack's bytes go to its members by their size (what each takes of the pack compressed), a dictionary's to the
  # captures its deltas serve
  members: dict[str, list[tuple[str, int]]] = {}
  for sha, base, raw, packed in conn.execute("SELECT sha256, base, size, substr(data, 1, ?) = ? FROM blobs WHERE "
                                             "base IS NOT NULL", (len(PACK_MARK), PACK_MARK)).fetchall():
    if packed: members.setdefault(base, []).append((sha, raw))
    elif sha in refs: refs.setdefault(base, []).extend(refs[sha])
  for pack, held in members.items():
    whole, pack_bytes = sum(raw for _, raw in held) or 1, sizes.get(pack, 0)
    for sha, raw in held: sizes[sha] += pack_bytes * raw / whole
  per_kind = {k: [0, 0.0] for k in ("schedule", "kernel", "exec")}
  for kind, n in conn.execute("SELECT kind, count(*) FROM captures WHERE run_id = ? GROUP BY kind", (run_id,)):
    per_kind.setdefault(kind, [0, 0.0])[0] = n
  for sha, kinds in refs.items():
    for kind in kinds: per_kind[kind][1] += sizes.get(sha, 0) / len(kinds)
  return per_kind


def main():
  args = sys.argv[1:]
  rounds = int(os.getenv("ROUNDS", "5"))
  with tempfile.TemporaryDirectory() as tmp:
    db = os.path.join(tmp, "bench.db")
    run_corpus(False, db, args)  # warm the compile cache
    off, on, cpu_off, cpu_on = [], [], [], []
    spent = run_corpus(False, db, args)[1]   # CPU of children is counted from here on
    for _ in range(rounds):
      for times, cpus, capture in ((off, cpu_off, False), (on, cpu_on, True)):
        wall, total = run_corpus(capture, db, args)
        times.append(wall)
        cpus.append(total - spent)
        spent = total
    import sqlite3
    conn = sqlite3.connect(db)
    captures = conn.execute("SELECT count(*) FROM captures").fetchone()[0]
    blob_bytes = conn.execute("SELECT coalesce(sum(length(data)), 0) FROM blobs").fetchone()[0]
    first_run = conn.execute("SELECT min(run_id) FROM captures").fetchone()[0]
    per_kind = bytes_per_kind(conn, first_run)
    conn.close()
    size = sum(os.path.getsize(os.path.join(tmp, f)) for f in os.listdir(tmp)
               if f.startswith("bench.db") and os.path.isfile(os.path.join(tmp, f)))
  m_off, m_on = statistics.median(off), statistics.median(on)
  pairs = statistics.median(b / a for a, b in zip(off, on))
  cpu_ratios = [b / a for a, b in zip(cpu_off, cpu_on)]
  cpu_pairs = statistics.median(cpu_ratios)
  print(f"wall time, median of {rounds} alternated pairs: capture off {m_off:.2f}s, capture on {m_on:.2f}s, "
        f"ratio on/off {pairs:.3f} (median of the pairs' ratios; goal <= 1.05)")
  print(f"CPU time (user + system): capture off {statistics.median(cpu_off):.2f}s, capture on "
        f"{statistics.median(cpu_on):.2f}s, ratio on/off {cpu_pairs:.3f} (median of the pairs' ratios)")
  # how far the median can be trusted: on a shared machine the pairs' ratios spread by percents
  if rounds >= 4:
    low, _, high = statistics.quantiles(cpu_ratios, n=4)
    print(f"CPU ratio of the pairs: middle half {low:.3f} to {high:.3f}, all {min(cpu_ratios):.3f} to "
          f"{max(cpu_ratios):.3f}")
  # the least CPU each side took: a run is only ever slowed by what else the machine does, so the best of the rounds is
  # the estimate that moves least between invocations on a shared machine
  print(f"CPU time, best of {rounds}: capture off {min(cpu_off):.2f}s, capture on {min(cpu_on):.2f}s, ratio on/off "
        f"{min(cpu_on) / min(cpu_off):.3f}")
  print(f"{captures} captures over {rounds} runs; database {size / 1e6:.2f} MB = {size / max(captures, 1):.0f} bytes "
        f"per capture "
        f"({blob_bytes / max(captures, 1):.0f} compressed blob bytes per capture; identical payloads are stored once)")
  first = sum(total for _, total in per_kind.values()) / max(sum(n for n, _ in per_kind.values()), 1)
  print(f"one run, compressed blob bytes per capture: {first:.0f}; by kind: "
        + ", ".join(f"{kind} {total / max(n, 1):.0f} ({n} captures)" for kind, (n, total) in per_kind.items())
        + " (a blob several captures refer to, a graph, a kernel AST or a buffer, is split between them; buffers are "
          "stored once by content, constant fills as their value)")

if __name__ == "__main__": main()
