"""python -m scripts.workloads [--list] [--only NAME...] [--no-variants]: run the corpus, one line per workload.

Each workload runs inside `replay_location("workload:NAME")`, so its captures say which workload they belong to."""
from __future__ import annotations
import argparse, sys, time, traceback


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="python -m scripts.workloads", description="Run the bundled workload corpus.")
  parser.add_argument("--list", action="store_true", help="list the workloads and exit")
  parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these workloads (prefix match, e.g. ref_ or mlp_sgd[PYTHON])")
  parser.add_argument("--no-variants", action="store_true", help="run each workload once, on CPU with default flags (no PYTHON or flag variants)")
  args = parser.parse_args(argv)
  from scripts.workloads import all_runs
  runs = all_runs(variants=not args.no_variants)
  if args.list:
    for name, fn in runs.items(): print(f"{name:<40} {(fn.__doc__ or '').strip().splitlines()[0] if fn.__doc__ else ''}")
    return 0
  names = list(runs)
  if args.only:
    names = [n for n in runs if any(n == o or n.startswith(o) for o in args.only)]
    unknown = [o for o in args.only if not any(n == o or n.startswith(o) for n in runs)]
    if unknown:
      print(f"error: unknown workload(s): {', '.join(unknown)} (see --list)", file=sys.stderr)
      return 2
  from scheduler import realize
  from replay import replay_location
  failed, t_all = [], time.perf_counter()
  for name in names:
    before, t0 = realize.stats["kernels"], time.perf_counter()
    try:
      with replay_location(f"workload:{name}"): runs[name]()
      status = "ok"
    except Exception as e:
      failed.append(name)
      status = f"FAILED {type(e).__name__}: {e}"
      traceback.print_exc(file=sys.stderr)
    print(f"{name:<40} {realize.stats['kernels'] - before:5d} kernels {time.perf_counter() - t0:7.2f}s  {status}", flush=True)
  print(f"{len(names) - len(failed)}/{len(names)} workloads ok in {time.perf_counter() - t_all:.1f}s")
  return 1 if failed else 0


if __name__ == "__main__": sys.exit(main())
