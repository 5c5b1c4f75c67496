"""Capture overhead counted in instructions: the workloads (by default the training program: mlp_sgd, cnn_adam,
transformer_adamw) run under valgrind's callgrind with capture off and with capture on, side by side, after a warm-up
run of each (compile cache and database warm), and the two counts are compared, in total and per shared library.

CPU time on a shared machine moves by a few percent between runs, so the capture bench needs many alternated pairs to
resolve one percent. An instruction count moves by well under a tenth of a percent between runs (hash seed fixed, one
BLAS thread), so the effect of a change to capture shows in one run of each side. Two caveats, printed with the result:
callgrind's simulated CPU lacks the SHA extensions, so OpenSSL hashes in software there (about 30 instructions per
hashed byte, many times what a CPU with them runs; libcrypto's line shows this part, and a total without it is printed
too); and instructions are not time: capture's code runs between long stretches of the compiler's, with colder caches,
so its share of CPU time is larger than its share of instructions (the capture bench measures time).

    python -m scripts.bench.capture_instructions [--only NAME ...]   (needs valgrind; about a minute on 2 cores)
"""
from __future__ import annotations
import argparse, os, re, shutil, subprocess, sys, tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRAINING = ["mlp_sgd", "cnn_adam", "transformer_adamw"]
_OBJECT = re.compile(r"c?ob=\((\d+)\)(?: (.*))?")


def self_cost_by_object(lines) -> Counter:
  """Instructions executed in each shared object, from a callgrind output file (its own cost: the inclusive cost a
  `calls=` line carries on the line after it is left out). Callgrind names an object once, in an `ob=` or `cob=` line,
  and refers to it by number afterwards."""
  names: dict[str, str] = {}
  costs: Counter = Counter()
  current, after_call = "?", False
  for line in lines:
    if line.startswith(("ob=", "cob=")):
      match = _OBJECT.match(line.rstrip("\n"))
      if match is None: continue
      if match.group(2): names[match.group(1)] = match.group(2)
      if line.startswith("ob="): current = names.get(match.group(1), match.group(1))
    elif line.startswith("calls="): after_call = True
    elif line[:1].isdigit() or line[:1] in "+-*":
      if after_call:
        after_call = False
        continue
      fields = line.split()
      if len(fields) >= 2: costs[current] += int(fields[1])
  return costs


def _env(db: str, capture: bool) -> dict[str, str]:
  env = {**os.environ, "PYTHONPATH": str(ROOT), "REPLAY_DB": db, "CAPTURE_PROCESS_REPLAY": "1" if capture else "0",
         "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
  env.pop("PYTHONDONTWRITEBYTECODE", None)   # modules compiled once, as users run
  return env


def _workloads(names: list[str]) -> list[str]:
  return [sys.executable, "-m", "scripts.workloads", "--only", *names, "--no-variants"]


def _run(command: list[str], env: dict[str, str]) -> None:
  done = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  if done.returncode != 0:
    raise SystemExit(f"capture_instructions: {' '.join(command[:4])} ... failed (exit {done.returncode}): "
                     f"{done.stderr.strip()[-1000:]}")


def count(names: list[str], db: str, capture: bool, out_file: str) -> Counter:
  """Instructions per shared object of one run of the workloads under callgrind."""
  _run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}", *_workloads(names)], _env(db, capture))
  with open(out_file) as f: return self_cost_by_object(f)


def short(path: str) -> str: return os.path.basename(path) or path


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="python -m scripts.bench.capture_instructions",
                                   description=__doc__.split("\n\n")[0])
  parser.add_argument("--only", nargs="+", metavar="NAME", default=TRAINING, help="the workloads to run "
                      "(default: the training program)")
  args = parser.parse_args(argv)
  if shutil.which("valgrind") is None:
    print("capture_instructions: valgrind is not installed (apt install valgrind)", file=sys.stderr)
    return 2
  with tempfile.TemporaryDirectory() as tmp:
    db = os.path.join(tmp, "bench.db")
    for capture in (False, True):   # compile cache, database and its part index warm, as in the capture bench
      _run(_workloads(args.only), _env(db, capture))
    with ThreadPoolExecutor(2) as pool:
      off, on = pool.map(lambda capture: count(args.only, db, capture, os.path.join(tmp, f"callgrind.{capture}")),
                         (False, True))
  total_off, total_on = sum(off.values()), sum(on.values())
  hashing = [name for name in set(off) | set(on) if "libcrypto" in name]
  plain_off = total_off - sum(off[name] for name in hashing)
  plain_on = total_on - sum(on[name] for name in hashing)
  print(f"workloads {' '.join(args.only)}: instructions with capture off {total_off / 1e6:,.1f}M, on "
        f"{total_on / 1e6:,.1f}M, ratio on/off {total_on / total_off:.4f}")
  print(f"without libcrypto (hashing, which callgrind's CPU does without SHA extensions): off {plain_off / 1e6:,.1f}M, "
        f"on {plain_on / 1e6:,.1f}M, ratio {plain_on / plain_off:.4f}")
  added = total_on - total_off
  print("what capture adds, by shared object:")
  for name in sorted(set(off) | set(on), key=lambda n: off[n] - on[n])[:8]:
    extra = on[name] - off[name]
    print(f"  {extra / 1e6:9.1f}M  {extra / added if added else 0:6.1%}  {short(name)}")
  return 0


if __name__ == "__main__": sys.exit(main())
