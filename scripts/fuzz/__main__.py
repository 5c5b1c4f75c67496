"""python -m scripts.fuzz: random Tensor programs against numpy on every device.

  python -m scripts.fuzz --minutes 10 --seed 1       # until the budget is spent; each new failure shrunk and printed
  python -m scripts.fuzz --count 200 --seed 1        # a fixed number of seeded programs (no shrinking)
  python -m scripts.fuzz --print 1:17                # the standalone program of seed 1, program 17
  python -m scripts.fuzz --capture --count 40 --seed 1   # what `replay fuzz` captures: each program in its own location

Exit 0 when no program failed, 1 when some did (each printed as a standalone pytest file), 2 on bad arguments.
"""
from __future__ import annotations
import argparse, sys, time
from typing import Optional


def program_at(seed: int, index: int):
  """Program `index` of the seeded stream `seed` (the same in every process and at every revision)."""
  from scripts.fuzz import generate
  from scripts.fuzz.choices import SeededChoices
  return generate.program(SeededChoices(seed * 1_000_003 + index))


def run_count(seed: int, count: int, devices, capture: bool, out=sys.stdout) -> int:
  """Run programs 0..count-1 of `seed`; print each failure with its program. Returns the number that failed."""
  from scripts.fuzz.run import judge
  failed = 0
  for index in range(count):
    program = program_at(seed, index)
    if capture:
      from replay import replay_location
      with replay_location(f"fuzz:{seed}:{index}"): failures = judge(program, devices)
    else: failures = judge(program, devices)
    if failures:
      failed += 1
      print(f"# program {seed}:{index} ({program.family}) failed: " + "; ".join(map(str, failures)), file=out)
      if not capture: print(program.source(f"test_fuzz_{seed}_{index}"), file=out)
  print(f"fuzz: {count} programs of seed {seed} on {', '.join(devices)}: {failed} failed", file=out)
  return failed


def run_budget(seconds: float, seed: int, devices, out=sys.stdout,
               max_failures: Optional[int] = None) -> tuple[int, dict]:
  """Hypothesis-driven programs until `seconds` are spent (or `max_failures` kinds of failure are found). Each
  failure of a kind not seen before is shrunk (the shrinking keeps the same kind of failure) and printed as a
  standalone program. Returns (programs run, {signature: (failure, source)})."""
  from hypothesis import HealthCheck, given, seed as hypothesis_seed, settings, strategies as st
  from scripts.fuzz import generate
  from scripts.fuzz.choices import HypothesisChoices
  from scripts.fuzz.run import judge
  deadline = time.monotonic() + seconds
  found: dict = {}
  ran = 0
  chunk = 0
  while time.monotonic() < deadline and (max_failures is None or len(found) < max_failures):
    state: dict = {"target": None, "last": None}

    @settings(max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck), print_blob=False)
    @hypothesis_seed(seed * 7919 + chunk)
    @given(st.data())
    def one(data):
      nonlocal ran
      program = generate.program(HypothesisChoices(data))
      if state["target"] is None and time.monotonic() > deadline: return
      ran += 1
      failures = [f for f in judge(program, devices) if f.signature() not in found]
      if state["target"] is not None: failures = [f for f in failures if f.signature() == state["target"]]
      if failures:
        if state["target"] is None: state["target"] = failures[0].signature()
        state["last"] = (failures[0], program)
        raise AssertionError(str(failures[0]))

    try: one()
    except AssertionError: pass
    except Exception as e:   # a generator bug must not end the run silently
      print(f"fuzz: the generator failed: {type(e).__name__}: {e}", file=out)
    if state["last"] is not None:
      failure, program = state["last"]
      found[failure.signature()] = (failure, program.source(f"test_fuzz_{len(found)}"))
      print(f"# failure {len(found)}: {failure}", file=out)
      print(found[failure.signature()][1], file=out)
      out.flush()
    chunk += 1
  print(f"fuzz: {ran} programs in {seconds:.0f}s on {', '.join(devices)}: {len(found)} distinct failures", file=out)
  return ran, found


def main(argv: Optional[list] = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m scripts.fuzz",
                                   description="Random Tensor programs checked against numpy on every device.")
  parser.add_argument("--seed", type=int, default=0, help="seed of the program stream (default 0)")
  what = parser.add_mutually_exclusive_group()
  what.add_argument("--minutes", type=float,
                    help="run Hypothesis-driven programs for this long; shrink and print each new failure")
  what.add_argument("--count", type=int, help="run this many seeded programs (no shrinking)")
  what.add_argument("--print", dest="show", metavar="SEED:INDEX",
                    help="print one seeded program as a standalone pytest file")
  parser.add_argument("--device", action="append", choices=["CPU", "PYTHON"],
                      help="only this device (repeatable; default both)")
  parser.add_argument("--capture", action="store_true",
                      help="label each program's captures fuzz:SEED:INDEX (for replay fuzz); exit 0 on failures")
  args = parser.parse_args(argv)
  devices = tuple(args.device or ("CPU", "PYTHON"))
  if args.show:
    try: seed, index = (int(p) for p in args.show.split(":"))
    except ValueError: parser.error(f"--print takes SEED:INDEX, got {args.show!r}")
    print(program_at(seed, index).source(f"test_fuzz_{seed}_{index}"))
    return 0
  if args.count is not None:
    if args.count < 0: parser.error("--count must be at least 0")
    failed = run_count(args.seed, args.count, devices, args.capture)
    return 0 if args.capture or not failed else 1
  if args.minutes is not None and args.minutes <= 0: parser.error("--minutes must be positive")
  _, found = run_budget((args.minutes or 1.0) * 60, args.seed, devices)
  return 1 if found else 0


if __name__ == "__main__":
  sys.exit(main())
