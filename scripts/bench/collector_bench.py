"""The cyclic garbage collector paused while the compiler schedules and runs a realize (`collection_paused`), against
the same code with the pause taken out: the corpus (or the workloads named, as `python -m scripts.workloads` takes
them: `python -m scripts.bench.collector_bench --no-variants`) run ROUNDS=5 alternated pairs of fresh processes,
capture off, warm compile cache. Prints the median CPU time of each side, the median of the pairs' ratios, and the
time the collector itself took in each (timed by `gc.callbacks` in the run), with the peak memory of each side."""
import json, os, resource, statistics, subprocess, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# the run: the workloads, with the collector's own time and collections counted, the pause taken out when asked
_CHILD = """
import gc, json, os, resource, runpy, sys, time
if os.environ["PAUSE"] == "0":
  from scheduler.helpers import collection_paused
  collection_paused.__enter__ = lambda self: None
  collection_paused.__exit__ = lambda self, *exc: None
spent, began = [0.0, 0], [0.0]
def timed(phase, info):
  if phase == "start": began[0] = time.perf_counter()
  else: spent[0] += time.perf_counter() - began[0]; spent[1] += 1
gc.callbacks.append(timed)
sys.argv = ["workloads", *json.loads(os.environ["ARGS"])]
try: runpy.run_module("scripts.workloads", run_name="__main__")
finally:
  with open(os.environ["REPORT"], "w") as out:
    json.dump([*spent, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss], out)
"""


def run(pause: bool, args: list[str], report: str) -> tuple[float, float, int, int]:
  """CPU seconds (user and system), seconds in the collector, collections, and peak memory (KB) of one run."""
  env = {**os.environ, "PYTHONPATH": str(ROOT), "CAPTURE_PROCESS_REPLAY": "0", "PAUSE": "1" if pause else "0",
         "ARGS": json.dumps(args), "REPORT": report}
  env.pop("PYTHONDONTWRITEBYTECODE", None)
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  proc = subprocess.run([sys.executable, "-c", _CHILD], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE)
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  if proc.returncode != 0:
    raise SystemExit(f"the workloads failed (exit {proc.returncode}): {proc.stderr.decode()[-2000:]}")
  with open(report) as f: collector, collections, peak = json.load(f)   # the run's own peak (children's is the max)
  cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
  return cpu, collector, collections, peak


def main():
  args, rounds = sys.argv[1:], int(os.getenv("ROUNDS", "5"))
  with tempfile.TemporaryDirectory() as tmp:
    report = os.path.join(tmp, "gc.json")
    run(True, args, report)   # the compile cache warm
    sides: dict[bool, list] = {False: [], True: []}
    for _ in range(rounds):
      for pause in (False, True): sides[pause].append(run(pause, args, report))
  ratios = [b[0] / a[0] for a, b in zip(sides[False], sides[True])]
  for pause, label in ((False, "collector as Python runs it"), (True, "collector paused in realize")):
    cpu, gc_time, collections, peak = (statistics.median(r[i] for r in sides[pause]) for i in range(4))
    print(f"{label}: CPU {cpu:.2f}s, of which the collector {gc_time:.2f}s in {collections:.0f} collections; peak "
          f"memory {peak / 1024:.0f} MB (medians of {rounds})")
  print(f"CPU ratio paused/unpaused: {statistics.median(ratios):.3f} (median of {rounds} alternated pairs; all "
        f"{min(ratios):.3f} to {max(ratios):.3f})")


if __name__ == "__main__": main()
