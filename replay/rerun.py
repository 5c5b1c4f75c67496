"""End-to-end mode (`replay diff --base REV --rerun`, the gate's default): run the captured commands again and
compare the runs.

A plain replay feeds the captured graph to the base's compiler, so whatever happens before the graph exists (the
Tensor frontend, autograd, optimizers, flag defaults) is the same on both sides by construction. Here the recorded
command of each capture run (argv, working directory, the environment that steers the compiler) runs again into the
same database with the base revision's system under test. Its captures are aligned with the original run's
(replay/alignment.py) and compared: schedules by AST, kernels by source and options, realizes by output values; a
capture only one run took is `added` or `removed`. Only when something differs does the command run once more with
the current tree: a difference that this run does not reproduce is `nondeterministic`, not a regression. A rerun that
fails where the original succeeded is run once more; failing again it is a failed step (or, when the base raised the
same way twice, an incompatibility), never evidence.

Sits beside the runner: it starts commands and compares stored payloads in this process; `cli.do_replay` merges its
results into the replay's outcomes.
"""
from __future__ import annotations
import json, os, pathlib, subprocess, sys
from dataclasses import dataclass, field
from typing import Optional
from db import Store, BlobError
from replay import buffers, parts, serialize
from replay.alignment import align
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
  failures: list[str] = field(default_factory=list)   # reruns that failed twice: the end-to-end step did not finish
  incompatible: list[str] = field(default_factory=list)   # the base raised on the program twice: it cannot run it


def command_of(run: dict) -> tuple[list[str], str, dict[str, str]]:
  """(argv, working directory, recorded environment) of a capture run, or RerunError saying what is missing."""
  try: argv = json.loads(run.get("argv") or "null")
  except ValueError: argv = None
  if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
    raise RerunError(f"run {run['id']} recorded no command that can be run again")
  cwd = run.get("cwd")
  if not cwd:
    raise RerunError(f"run {run['id']} was captured by an older harness that did not record its working directory; "
                     f"capture it again")
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


@dataclass
class Started:
  """A rerun whose command is running (`start_again`); `wait()` ends it and records its exit code."""
  store: Store
  run_id: int
  process: subprocess.Popen
  log: pathlib.Path
  timeout: Optional[float] = None

  def wait(self) -> Rerun:
    try: code: Optional[int] = self.process.wait(timeout=self.timeout)
    except subprocess.TimeoutExpired:
      self.kill()
      code = None
    self.store.finish_run(self.run_id, code if code is not None else -9)
    return Rerun(self.run_id, code, str(self.log))

  def kill(self) -> None:
    """Stop the command and every process it started (it runs in a session of its own)."""
    if self.process.poll() is None:
      try: os.killpg(self.process.pid, 9)
      except OSError: pass
      self.process.wait()


def start_again(store: Store, run: dict, tree: str, sut_root: Optional[str], sut: tuple[str, ...],
                log_dir: pathlib.Path,
                timeout: Optional[float] = None, flag_names: Optional[set[str]] = None) -> Started:
  """Start the command of `run` once more, capturing into a new run of `store`; with `sut_root`, the system under test
  is imported only from that tree (every Python process the command starts, through sitecustomize). `flag_names`
  (the compiler's flags) default to those the run recorded; a run still being captured has not recorded them yet."""
  from replay.capture import run_info
  argv, cwd, recorded = command_of(run)
  if flag_names is None:
    flag_names = set(json.loads(run.get("flag_defaults") or "{}") or {}) | set(json.loads(run.get("flags") or "{}")
                                                                               or {})
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
    try:
      process = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    except FileNotFoundError:
      store.finish_run(new_id, 127)
      raise RerunError(f"the command of run {run['id']} is not found: {argv[0]}") from None
  return Started(store, new_id, process, log, timeout)


def run_again(store: Store, run: dict, tree: str, sut_root: Optional[str], sut: tuple[str, ...], log_dir: pathlib.Path,
              timeout: Optional[float] = None) -> Rerun:
  """Run the command of `run` once more (see `start_again`) and wait for it."""
  started = start_again(store, run, tree, sut_root, sut, log_dir, timeout)
  try: return started.wait()
  except BaseException:
    started.kill()
    raise


# ***** pairing and comparing two runs *****

def _payload(store: Store, capture: dict):
  payload, shared = parts.load_output(store, capture)
  return buffers.decode_outputs(payload, shared) if capture["kind"] == "exec" else payload


def compare_captures(store: Store, mine: dict, theirs: dict, tolerances: Optional[dict]) -> Comparison:
  """`mine` (a capture of the original run) against `theirs` (its counterpart in a rerun); `theirs` is the `-` side."""
  if mine["kind"] == theirs["kind"] and mine["output_sha"] == theirs["output_sha"]:
    return Comparison("same", "")  # the same bytes
  try: a, b = _payload(store, mine), _payload(store, theirs)
  except serialize.ContractVersionError as e: return Comparison("incompatible", f"cannot load a payload: {e}")
  except (BlobError, serialize.UnsafePickleError, serialize.PayloadFormatError) as e:
    return Comparison("error", f"cannot load a payload: {e}")
  except parts.PartError as e: return Comparison("error", f"cannot load a payload: {e}")
  except (ImportError, AttributeError) as e:   # the other tree pickled a module or name this tree does not have
    return Comparison("incompatible", f"cannot load a payload with this revision: {type(e).__name__}: {e}")
  except Exception as e:
    return Comparison("error", f"cannot load a payload with this revision: {type(e).__name__}: {e}")
  kind = mine["kind"]
  try:
    if kind == "schedule": return compare_schedule(a, b)
    if kind == "kernel": return compare_kernel(a, b)
    return compare_exec(a, b, tolerances, output_names(mine.get("meta")))
  except Exception as e: return Comparison("error", f"cannot compare: {type(e).__name__}: {e}")


def _described(capture: dict) -> str:
  return f"capture {capture['id']} [{capture['kind']}] {capture['name']}"


def compare_runs(store: Store, original: list[dict], base: list[dict],
                 tolerances: Optional[dict]) -> dict[int, Comparison]:
  """Each capture of the original run against its aligned counterpart in the base's run (replay/alignment.py):
  by capture id, the comparison of the pairs, `added` for the original's captures without a counterpart and
  `removed` for the base's (keyed by the base capture's id)."""
  results: dict[int, Comparison] = {}
  for mine, theirs in align(original, base):
    if mine is None:
      results[theirs["id"]] = Comparison("removed",
                                         f"end to end: the base's run took this capture ({_described(theirs)}) and "
                                         f"this "
                                         "run took nothing in its place: a realize, schedule or kernel the change "
                                         "removed")
    elif theirs is None:
      results[mine["id"]] = Comparison("added",
                                       "end to end: the base's run took no capture in this place: a realize, schedule "
                                       "or "
                                       "kernel the change added")
    else:
      found = compare_captures(store, mine, theirs, tolerances)
      results[mine["id"]] = found if found.status == "same" else \
        Comparison(found.status,
                   f"end to end (the command run with the base, its {_described(theirs)}):\n" + found.diff,
                   found.metrics)
  return results


def deterministic_only(store: Store, results: dict[int, Comparison], original: list[dict], again: list[dict],
                       tolerances: Optional[dict]) -> dict[int, Comparison]:
  """The differences of `results` that a second run of the same code (`again`) reproduces; any other one is
  `nondeterministic`: two runs of the current tree already differ there, so it is not attributed to the change."""
  twins = {mine["id"]: twin for mine, twin in align(original, again) if mine is not None}
  by_id = {c["id"]: c for c in original}
  out = dict(results)
  for cid, found in results.items():
    if found.status in ("same", "removed") or cid not in by_id: continue
    twin = twins.get(cid)
    if found.status == "added": steady = twin is not None
    else: steady = twin is not None and compare_captures(store, by_id[cid], twin, tolerances).status == "same"
    if not steady:
      out[cid] = Comparison("nondeterministic",
                            "end to end: two runs of the same code already differ here, so the base's "
                            "difference is not attributed to the change\n" + found.diff, found.metrics)
  return out


def _rerun_line(run_id: int, base_label: str, base: Rerun, again: Optional[Rerun]) -> str:
  line = f"run {run_id} rerun end to end: with {base_label} as run {base.run_id} (exit {base.exit_code})"
  line += f", with the current tree as run {again.run_id} (exit {again.exit_code})" if again else \
    "; no capture differs, so the determinism run with the current tree was not needed"
  if base.exit_code != 0: line += f"; the command failed with the base, see {base.log}"
  if again is not None and again.exit_code != 0:
    line += f"; the command failed when run again with the current tree, see {again.log}"
  return line


def _counts(results: dict[int, Comparison]) -> str:
  added, removed = (sum(1 for c in results.values() if c.status == s) for s in ("added", "removed"))
  return f"; {added} captures added and {removed} removed by the change" if added or removed else ""


def end_to_end(store: Store, run_ids: list[int], base_label: str, base_root: str, sut: tuple[str, ...],
               tolerances: Optional[dict],
               log_dir: pathlib.Path, echo=lambda text: print(text, file=sys.stderr),
               base_runs: Optional[dict[int, Started]] = None) -> EndToEnd:
  """Rerun every capture run in `run_ids` with the base (unless `base_runs` holds that rerun, started) and compare;
  only when something differs is the command run once more with the current tree, to tell a change from noise.
  A rerun that fails where the original run succeeded is run once more; failing again, it is a failure of this step
  (in `failures`), never evidence: its captures are not compared, and the differences it was to check stand."""
  found = EndToEnd()
  for run_id in run_ids:
    run = store.run(run_id)
    if run is None: continue
    def again_with(label: str, root: Optional[str], first: Optional[Rerun] = None) -> tuple[Rerun, bool]:
      """A rerun of the command (the given `first` one, else a new one), once more if it failed: (rerun, succeeded)."""
      first = first or run_again(store, run, label, root, sut, log_dir)
      if first.exit_code == 0 or run.get("exit_code") not in (0, None):
        return first, True   # the original failed too: as comparable
      echo(f"replay: end to end: the command failed with {label} (exit {first.exit_code}, see {first.log}); running it "
           f"once more...")
      second = run_again(store, run, label, root, sut, log_dir)
      if second.exit_code == 0: return second, True
      if root is not None and all(isinstance(r.exit_code, int) and r.exit_code > 0 for r in (first, second)):
        # the base raised, the same way twice: the program needs something the base does not have (an op this change
        # adds, say). That is an incompatibility, not a crash: what the base's run captured is compared
        found.incompatible.append(f"the command of run {run_id} fails with {label} (exit {second.exit_code}, twice; "
                                  f"see {second.log}): "
                                  "the base cannot run this program, so what it did not capture is reported added")
        return second, True
      found.failures.append(f"the command of run {run_id} failed twice with {label} (exit {first.exit_code}, then "
                            f"{second.exit_code}; see "
                            f"{second.log}), so its captures were not compared with that run")
      return second, False
    started = (base_runs or {}).get(run_id)
    if started is not None: echo(f"replay: end to end: waiting for the command of run {run_id} with {base_label}...")
    else: echo(f"replay: end to end: running the command of run {run_id} with {base_label}...")
    base, ok = again_with(base_label, base_root, started.wait() if started is not None else None)
    if not ok: continue
    original = store.captures(run_ids=[run_id])
    results = compare_runs(store, original, store.captures(run_ids=[base.run_id]), tolerances)
    again = None
    if any(c.status not in ("same", "removed") for c in results.values()):
      echo("replay: end to end: captures differ; running the command again with the current tree "
           "(determinism check)...")
      again, ok = again_with("the current tree", None)
      if ok: results = deterministic_only(store, results, original, store.captures(run_ids=[again.run_id]), tolerances)
    found.notes.append(_rerun_line(run_id, base_label, base, again) + _counts(results))
    found.results.update(results)
  return found
