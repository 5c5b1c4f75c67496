"""The cold main job, side by side: `bash scripts/main_job.sh` of two revisions, each in a clean clone with its
virtualenv set up beforehand (not timed: the first command of the job installs the same packages for both) and an
empty compile cache, run alternately. Prints the wall times, their medians and the ratio new/old.

    python -m scripts.bench.main_job_bench [OLD_REV [NEW_REV]]     # default: cb25f93 (before issue 16) and HEAD
    ROUNDS=2 python -m scripts.bench.main_job_bench

Takes a few minutes: the old revision's cold main job alone took 67-76 s on 2 cores.
"""
import os, statistics, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(cmd: list[str], cwd: Path, env=None) -> subprocess.CompletedProcess:
  return subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True, text=True)


def prepare(rev: str, where: Path) -> Path:
  """A clean clone at `rev` with .venv installed, as the job's first run would leave it."""
  clone = where / rev.replace("/", "_")
  run(["git", "clone", "-q", str(ROOT), str(clone)], ROOT)
  run(["git", "checkout", "-q", rev], clone)
  run([sys.executable, "-m", "venv", ".venv"], clone)
  run([".venv/bin/python", "-m", "pip", "install", "-q", "-e", "."], clone)
  return clone


def cold_job(clone: Path, cache: Path) -> tuple[float, str]:
  """Seconds of one main job with an empty compile cache and a fresh database; the job's verdict line."""
  for stale in (clone / ".replay").glob("*.db*"): stale.unlink()
  env = {**os.environ, "COMPILE_CACHE_DIR": str(cache), "REPLAY_DB": str(clone / ".replay" / "replay.db")}
  env.pop("VIRTUAL_ENV", None)
  t0 = time.perf_counter()
  proc = subprocess.run(["bash", "scripts/main_job.sh"], cwd=clone, env=env, capture_output=True, text=True)
  seconds = time.perf_counter() - t0
  verdict = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
  if proc.returncode != 0:
    raise SystemExit(f"main job of {clone.name} failed ({proc.returncode}): {proc.stderr[-500:]}")
  return seconds, verdict


def main() -> None:
  old_rev = sys.argv[1] if len(sys.argv) > 1 else "cb25f93"
  new_rev = sys.argv[2] if len(sys.argv) > 2 else "HEAD"
  rounds = int(os.getenv("ROUNDS", "1"))
  with tempfile.TemporaryDirectory(prefix="main-job-bench-") as tmp:
    where = Path(tmp)
    clones = {"old": prepare(old_rev, where), "new": prepare(new_rev, where)}
    times: dict[str, list[float]] = {"old": [], "new": []}
    for r in range(rounds):
      for which in ("old", "new"):
        seconds, verdict = cold_job(clones[which], where / f"cache-{which}-{r}")
        times[which].append(seconds)
        print(f"round {r + 1} {which} ({old_rev if which == 'old' else new_rev}): {seconds:6.1f} s   {verdict}",
              flush=True)
    old, new = statistics.median(times["old"]), statistics.median(times["new"])
    print(f"cold main job, median of {rounds}: old {old:.1f} s, new {new:.1f} s, ratio new/old {new / old:.2f}")
    print("goal (issue 16.3): at most 0.5")


if __name__ == "__main__":
  main()
