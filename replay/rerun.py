"""End-to-end mode (`replay diff --base REV --rerun`): run the captured commands again and compare the runs.

A plain replay feeds the captured graph to the base's compiler, so whatever happens before the graph exists (the
Tensor frontend, autograd, optimizers, flag defaults) is the same on both sides by construction. Here the recorded
command of each capture run (argv, working directory, the environment that steers the compiler) runs twice more
into the same database: once with the base revision's system under test, once with the current one. The first
rerun is paired with the original run capture by capture (same kind, same location, same position among the
captures of that location) and compared: schedules by AST, kernels by source and options, realizes by output
values. The second rerun is the determinism check: a capture that already differs between two runs of the same
code is `nondeterministic`, not a regression.

Sits beside the runner: it starts commands and compares stored payloads in this process; `cli.do_replay` merges its
results into the replay's outcomes.
"""
from __future__ import annotations
import json, os, pathlib, subprocess, sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Optional
from db import Store, BlobError
from replay import buffers, serialize
from replay.compare import Comparison, compare_schedule, compare_kernel, compare_exec, output_names

BOOT_DIR = pathlib.Path(__file__).resolve().parent / "sut_boot"
# harness variables a rerun must not inherit from the process that starts it
_HARNESS_ENV = ("CAPTURE_PROCESS_REPLAY", "REPLAY_RUN_ID", "REPLAY_DB", "PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER")


class RerunError(RuntimeError):
  """A run cannot be run again (it recorded no command, or its directory is gone)."""


@dataclass
class Rerun:
  run_id: int
  exit_code: Optional[int]
  log: str


@dataclass
class EndToEnd:
  """What the end-to-end comparison found: per capture of the original runs, and about the runs as a whole."""
  results: dict[int, Comparison] = field(default_factory=dict)   # capture id -> comparison with its base counterpart
  notes: list[str] = field(default_factory=list)


def command_of(run: dict) -> tuple[list[str], str, dict[str, str]]:
  """(argv, working directory, recorded environment) of a capture run, or RerunError saying what is missing."""
  try: argv = json.loads(run.get("argv") or "null")
  except ValueError: argv = None
  if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
    raise RerunError(f"run {run['id']} recorded no command that can be run again")
  cwd = run.get("cwd")
  if not cwd: raise RerunError(f"run {run['id']} was captured by an older harness that did not record its working directory; capture it again")
  if not os.path.isdir(cwd): raise RerunError(f"the working directory of run {run['id']} is gone: {cwd}")
  try: env = json.loads(run.get("env") or "{}")
  except ValueError: env = {}
  if not isinstance(env, dict): env = {}
  return argv, cwd, {str(k): str(v) for k, v in env.items()}


def _environment(recorded: dict[str, str], flag_names: set[str]) -> dict[str, str]:
  """This process's environment without harness variables and compiler flags, then the recorded ones: a flag the
  original run left at its default stays at the default of the tree that reruns it."""
  env = {k: v for k, v in os.environ.items() if k not in _HARNESS_ENV and k not in flag_names}
  return {**env, **recorded}


def run_again(store: Store, run: dict, tree: str, sut_root: Optional[str], sut: tuple[str, ...], log_dir: pathlib.Path,
              timeout: Optional[float] = None) -> Rerun:
  """Run the command of `run` once more, capturing into a new run of `store`; with `sut_root`, the system under test
  is imported only from that tree (every Python process the command starts, through sitecustomize)."""
  from replay.capture import run_info
  argv, cwd, recorded = command_of(run)
  flag_names = set(json.loads(run.get("flag_defaults") or "{}") or {}) | set(json.loads(run.get("flags") or "{}") or {})
  info = {**run_info(argv), "cwd": cwd, "env": json.dumps(recorded), "rerun_of": run["id"], "tree": tree}
  new_id = store.add_run(**info)
  env = {**_environment(recorded, flag_names), "CAPTURE_PROCESS_REPLAY": "1", "REPLAY_RUN_ID": str(new_id),
         "REPLAY_DB": os.path.abspath(store.path)}
  if sut_root is not None:
    from replay import isolation
    env["PYTHONPATH"] = os.pathsep.join([str(BOOT_DIR), sut_root, *filter(None, [os.environ.get("PYTHONPATH")])])
    env[isolation.ROOT_ENV], env[isolation.PACKAGES_ENV] = sut_root, ",".join(sut)
  log_dir.mkdir(parents=True, exist_ok=True)
  log = log_dir / f"run-{new_id}.log"
  with open(log, "wb") as out:
    try: code: Optional[int] = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                              timeout=timeout, start_new_session=True).returncode
    except FileNotFoundError: raise RerunError(f"the command of run {run['id']} is not found: {argv[0]}") from None
    except subprocess.TimeoutExpired: code = None
  store.finish_run(new_id, code if code is not None else -9)
  return Rerun(new_id, code, str(log))


# ***** pairing and comparing two runs *****

def pair_key(captures: list[dict]) -> dict[tuple, dict]:
  """Captures by (kind, location, position among the captures of that kind and location)."""
  seen: dict[tuple, int] = defaultdict(int)
  out = {}
  for c in sorted(captures, key=lambda c: c["id"]):
    group = (c["kind"], c["location"])
    out[(*group, seen[group])] = c
    seen[group] += 1
  return out


def _payload(store: Store, capture: dict):
  payload = serialize.loads(store.get_blob(capture["output_sha"]))
  if capture["kind"] != "exec": return payload
  return buffers.decode_outputs(payload, store.shared_blobs(capture["id"]))


def compare_captures(store: Store, mine: dict, theirs: dict, tolerances: Optional[dict]) -> Comparison:
  """`mine` (a capture of the original run) against `theirs` (its counterpart in a rerun); `theirs` is the `-` side."""
  try: a, b = _payload(store, mine), _payload(store, theirs)
  except (BlobError, serialize.UnsafePickleError, serialize.PayloadFormatError) as e: return Comparison("error", f"cannot load a payload: {e}")
  except Exception as e: return Comparison("error", f"cannot load a payload with this revision: {type(e).__name__}: {e}")
  kind = mine["kind"]
  try:
    if kind == "schedule": return compare_schedule(a, b)
    if kind == "kernel": return compare_kernel(a, b)
    return compare_exec(a, b, tolerances, output_names(mine.get("meta")))
  except Exception as e: return Comparison("error", f"cannot compare: {type(e).__name__}: {e}")


def compare_runs(store: Store, original: list[dict], base: list[dict], again: list[dict], tolerances: Optional[dict]) -> tuple[dict[int, Comparison], list[str]]:
  """Each capture of the original run against its counterpart in the base rerun, unless the same code run again
  (`again`) already gives something else there: then it is `nondeterministic`."""
  mine, theirs, repeat = pair_key(original), pair_key(base), pair_key(again)
  results: dict[int, Comparison] = {}
  for key, cap in mine.items():
    other = theirs.get(key)
    if other is None:
      results[cap["id"]] = Comparison("changed", f"end to end: no {cap['kind']} capture here in the base run "
                                      f"(the base's run has {_count(theirs, key)} at this location, this run {_count(mine, key)})")
      continue
    found = compare_captures(store, cap, other, tolerances)
    if found.status == "same": results[cap["id"]] = found; continue
    twin = repeat.get(key)
    if twin is None or compare_captures(store, cap, twin, tolerances).status != "same":
      results[cap["id"]] = Comparison("nondeterministic", "end to end: two runs of the same code already differ here, so the base's "
                                      "difference is not attributed to the change\n" + found.diff, found.metrics)
    else: results[cap["id"]] = Comparison(found.status, "end to end (the command run with the base):\n" + found.diff, found.metrics)
  notes = []
  only_base = [k for k in theirs if k not in mine]
  if only_base:
    where = sorted({f"{k[0]} @ {k[1]}" for k in only_base})
    notes.append(f"{len(only_base)} captures of the base's run have no counterpart in this run: " + "; ".join(where[:5])
                 + (f"; and {len(where) - 5} more locations" if len(where) > 5 else ""))
  return results, notes


def _count(by_key: dict[tuple, dict], key: tuple) -> int:
  return sum(1 for k in by_key if k[:2] == key[:2])


def end_to_end(store: Store, run_ids: list[int], base_label: str, base_root: str, sut: tuple[str, ...], tolerances: Optional[dict],
               log_dir: pathlib.Path, echo=lambda text: print(text, file=sys.stderr)) -> EndToEnd:
  """Rerun every capture run in `run_ids` with the base and with the current tree, and compare."""
  found = EndToEnd()
  for run_id in run_ids:
    run = store.run(run_id)
    if run is None: continue
    echo(f"replay: end to end: running the command of run {run_id} with {base_label}...")
    base = run_again(store, run, base_label, base_root, sut, log_dir)
    echo("replay: end to end: running it again with the current tree (determinism check)...")
    again = run_again(store, run, "current", None, sut, log_dir)
    line = f"run {run_id} rerun end to end: with {base_label} as run {base.run_id} (exit {base.exit_code}), " \
           f"with the current tree as run {again.run_id} (exit {again.exit_code})"
    if base.exit_code != 0: line += f"; the command failed with the base, see {base.log}"
    if again.exit_code != 0: line += f"; the command failed when run again with the current tree, see {again.log}"
    found.notes.append(line)
    results, notes = compare_runs(store, store.captures(run_ids=[run_id]), store.captures(run_ids=[base.run_id]),
                                  store.captures(run_ids=[again.run_id]), tolerances)
    found.results.update(results)
    found.notes.extend(notes)
  return found
