"""python -m scripts.workloads [--list] [--only NAME...] [--no-variants] [--jobs N]: run the corpus, one line per
workload.

Each workload runs inside `replay_location("workload:NAME")`, so its captures say which workload they belong to.
With --jobs N, N forked processes run the workloads (a workload and its variants stay in one process, so their
shared kernels compile once); under `replay capture` every process captures into the same run."""
from __future__ import annotations
import argparse, os, sys, time, traceback


def _run_group(names: list[str]) -> tuple[list[tuple[str, int, float, str]], tuple[int, int, float]]:
  """(name, kernels, seconds, status) of each workload, run one after the other in this process, and the kernel
  builds it took (built, from the cache, compiler seconds)."""
  from scheduler import realize
  from scheduler.device import BUILDS
  from replay import replay_location
  from scripts.workloads import all_runs
  runs, out = all_runs(), []
  builds_before = (BUILDS.built, BUILDS.cached, BUILDS.seconds)
  for name in names:
    before, t0 = realize.stats["kernels"], time.perf_counter()
    try:
      with replay_location(f"workload:{name}"): runs[name]()
      status = "ok"
    except Exception as e:
      status = f"FAILED {type(e).__name__}: {e}"
      traceback.print_exc(file=sys.stderr)
    out.append((name, realize.stats["kernels"] - before, time.perf_counter() - t0, status))
  return out, (BUILDS.built - builds_before[0], BUILDS.cached - builds_before[1], BUILDS.seconds - builds_before[2])


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="python -m scripts.workloads", description="Run the bundled workload corpus.")
  parser.add_argument("--list", action="store_true", help="list the workloads and exit")
  parser.add_argument("--only", nargs="+", metavar="NAME",
                      help="run only these workloads (prefix match, e.g. ref_ or mlp_sgd[PYTHON])")
  parser.add_argument("--no-variants", action="store_true",
                      help="run each workload once, on CPU with default flags (no PYTHON or flag variants)")
  parser.add_argument("--jobs", "-j", type=int, default=1, metavar="N", help="run workloads in N processes (default 1)")
  args = parser.parse_args(argv)
  from scripts.workloads import all_runs
  runs = all_runs(variants=not args.no_variants)
  if args.list:
    for name, fn in runs.items():
      print(f"{name:<40} {(fn.__doc__ or '').strip().splitlines()[0] if fn.__doc__ else ''}")
    return 0
  names = list(runs)
  if args.only:
    names = [n for n in runs if any(n == o or n.startswith(o) for o in args.only)]
    unknown = [o for o in args.only if not any(n == o or n.startswith(o) for n in runs)]
    if unknown:
      print(f"error: unknown workload(s): {', '.join(unknown)} (see --list)", file=sys.stderr)
      return 2
  groups: dict[str, list[str]] = {}
  for name in names: groups.setdefault(name.split("[")[0], []).append(name)
  failed, t_all, builds = [], time.perf_counter(), [0, 0, 0.0]
  def report(outcome) -> None:
    results, built = outcome
    for k in range(3): builds[k] += built[k]
    for name, kernels, seconds, status in results:
      if status != "ok": failed.append(name)
      print(f"{name:<40} {kernels:5d} kernels {seconds:7.2f}s  {status}", flush=True)
  if args.jobs > 1 and len(groups) > 1 and hasattr(os, "fork"):
    import multiprocessing
    with multiprocessing.get_context("fork").Pool(min(args.jobs, len(groups))) as pool:
      for outcome in pool.imap_unordered(_run_group, groups.values()): report(outcome)
    if os.getenv("COMPILE_PROGRESS", "0") not in ("", "0"):   # the worker processes end without their own summary
      print(f"compiled {builds[0]} kernels ({builds[2]:.1f} s of compiler time in {min(args.jobs, len(groups))} "
            f"processes), "
            f"{builds[1]} from the cache", file=sys.stderr)
  else:
    for group in groups.values(): report(_run_group(group))
  print(f"{len(names) - len(failed)}/{len(names)} workloads ok in {time.perf_counter() - t_all:.1f}s")
  return 1 if failed else 0


if __name__ == "__main__": sys.exit(main())
