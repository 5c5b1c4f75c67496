"""The harness as a library: a `Session` over one database does what the command line offers (capture, replay
against a base, end to end, the gate, `--why`, bisect, fuzz), and `replay/cli.py` is a thin click layer over it.

    from replay.session import Session, Policy
    summary = Session("r.db").diff(base="main", rerun=True, policy=Policy(jobs=2))
    code, verdict = summary.verdict()

Errors are `ReplayError` (exit 4: the harness could not do its job) and `UsageMistake` (exit 2: what was asked for
does not exist); progress goes to `log` (stderr by default), reports are rendered by `replay/report.py`.
"""
from __future__ import annotations
import collections, json, os, pathlib, re, subprocess, sys, tempfile, time
from dataclasses import dataclass
from typing import Callable, Optional
from db import Store, StoreError, NoDatabase
from replay import report as rpt, revisions
from replay.revisions import RevisionError, UnknownRevision

NO_CHANGE_MARKER = "[no-kernel-change]"


class ReplayError(Exception):
  """The harness could not do its job (a bad database, a git failure): exit 4."""
  exit_code = rpt.EXIT_HARNESS


class UsageMistake(ReplayError):
  """What was asked for does not exist (no database yet, no such capture, revision or match): exit 2."""
  exit_code = rpt.EXIT_USAGE


@dataclass
class Policy:
  """How captures are replayed and what fails the verdict (the options of `run`, `diff` and `gate`)."""
  jobs: Optional[int] = None
  timeout: float = 120.0
  worker_memory: int = 8192
  max_changed: Optional[str] = None
  expect_no_change: bool = False
  allow_incompatible: bool = False
  fail_on_drift: bool = False
  max_cost_increase: Optional[float] = None   # percent
  rtol: Optional[float] = None
  atol: Optional[float] = None

  def tolerances(self) -> Optional[dict]:
    if self.rtol is None and self.atol is None: return None
    from replay.compare import DEFAULT_TOLERANCES
    return {k: (self.rtol if self.rtol is not None else r, self.atol if self.atol is not None
                else a) for k, (r, a) in DEFAULT_TOLERANCES.items()}

  def run_options(self, **more):
    from replay.runner import RunOptions
    return RunOptions(jobs=self.jobs or max(1, os.cpu_count() or 1), timeout=self.timeout, max_changed=self.max_changed,
                      tolerances=self.tolerances(), memory_mb=self.worker_memory, **more)

  def stored(self, selection: dict, guard: Optional[dict]) -> str:
    """The policy stored with a replay, so that `replay report` later gives the verdict this run gave."""
    return json.dumps({"expect_no_change": self.expect_no_change, "allow_incompatible": self.allow_incompatible,
                       "max_changed": self.max_changed, "tolerances": self.tolerances(),
                       "fail_on_drift": self.fail_on_drift,
                       "max_cost_increase": None if self.max_cost_increase is None else self.max_cost_increase / 100,
                       "selection": selection, **({"guard": guard} if guard is not None else {})})


def count_or_percent(value: Optional[str]) -> Optional[str]:
  """A count (`20`) or a percentage of the selection (`5%`), kept as written; ValueError names what is wrong."""
  if value is None: return None
  text = str(value).strip()
  try: number = float(text[:-1]) if text.endswith("%") else int(text)
  except ValueError: raise ValueError(f"{value!r} is neither a count (20) nor a percentage (5%)") from None
  if number <= 0 or (text.endswith("%") and number > 100):
    raise ValueError(f"{value!r} must be a count above 0 or a percentage in (0, 100]")
  return text


def _stderr(text: str) -> None: print(text, file=sys.stderr, flush=True)


def resolve(rev: str, merge_base: bool = False) -> tuple[pathlib.Path, str]:
  """(repository root, commit) of a revision; an unknown one is a usage mistake."""
  try:
    root = revisions.repo_root()
    return root, revisions.resolve(rev, merge_base, cwd=str(root))
  except UnknownRevision as e: raise UsageMistake(str(e)) from None
  except RevisionError as e: raise ReplayError(str(e)) from None


def overlay(sha: str, root: pathlib.Path) -> str:
  try: return str(revisions.overlay(sha, root))
  except RevisionError as e: raise ReplayError(str(e)) from None


def marked(marker: str) -> tuple[bool, str]:
  """Whether `marker` is in PR_TITLE or the head commit message, and where."""
  if marker in os.getenv("PR_TITLE", ""): return True, "PR_TITLE"
  try:
    if marker in revisions.git("log", "-1", "--format=%B"): return True, "the head commit message"
  except RevisionError: pass
  return False, ""


def commit_change(root: pathlib.Path, sha: str, max_lines: int = 120) -> str:
  """`git show --stat` of a commit, then its diff in the system under test (cut after `max_lines` lines)."""
  try:
    stat = revisions.git("show", "--stat", "--format=%H%n%an, %ad%n%n    %s", sha, cwd=str(root)).rstrip()
    diff = revisions.git("show", "--format=", sha, "--", *revisions.sut_packages(), cwd=str(root)).splitlines()
  except RevisionError as e: return f"(git show failed: {e})"
  if len(diff) > max_lines: diff = diff[:max_lines] + [f"... ({len(diff) - max_lines} more lines: git show {sha[:12]})"]
  return "\n".join([stat, "", *diff] if diff else [stat, "", "(no change in the system under test)"])


class Session:
  """One replay database and everything done with it."""

  def __init__(self, db: Optional[str] = None, log: Callable[[str], None] = _stderr):
    self.db_path, self.log = db, log
    self._store: Optional[Store] = None

  # ***** the database and what is selected from it *****

  def store(self, create: bool = False) -> Store:
    if self._store is None:
      try: self._store = Store(self.db_path, create=create)
      except NoDatabase as e: raise UsageMistake(str(e)) from None
      except StoreError as e: raise ReplayError(str(e)) from None
    return self._store

  def select(self, runs=(), kinds=(), names=(), location=None, ids=()) -> tuple[list[dict], Optional[int]]:
    """The captures selected (the latest run by default) and the one capture run they come from, if one."""
    store = self.store()
    run_ids = list(runs) or ([] if ids else ([r] if (r := store.latest_run_id()) is not None else []))
    if not run_ids and not ids: raise UsageMistake(f"no captures in {store.path}; run `replay capture -- CMD` first")
    caps = store.captures(run_ids=run_ids or None, kinds=kinds or None, names=names or None, location=location, ids=ids
                          or None)
    if not caps and (kinds or names or location or ids or runs): raise UsageMistake("the selection matched no captures")
    return caps, (run_ids[0] if len(run_ids) == 1 else None)

  def capture_runs(self, captures: list[dict]) -> list[dict]:
    store = self.store()
    return [run for run_id in sorted({c["run_id"] for c in captures}) if (run := store.run(run_id)) is not None]

  # ***** capture *****

  def capture_env(self, run_id: int) -> dict[str, str]:
    return {**os.environ, "CAPTURE_PROCESS_REPLAY": "1", "REPLAY_RUN_ID": str(run_id),
            "REPLAY_DB": os.path.abspath(self.store().path)}

  def new_run(self, cmd: list[str]) -> int:
    from replay.capture import run_info
    return self.store(create=True).add_run(**run_info(cmd))

  def capture(self, cmd: list[str]) -> tuple[int, int, dict[str, int]]:
    """Run `cmd` with capture on, all its processes writing into one new run: (exit code, run id, captures by kind)."""
    run_id = self.new_run(cmd)
    try: code = subprocess.call(cmd, env=self.capture_env(run_id))
    except FileNotFoundError: raise UsageMistake(f"command not found: {cmd[0]}") from None
    return code, run_id, self.finish_capture(run_id, code)

  def finish_capture(self, run_id: int, code: int) -> dict[str, int]:
    store = self.store()
    store.finish_run(run_id, code)
    return store.capture_counts(run_id)

  def capture_teed(self, cmd: list[str], run_id: int, env_extra: Optional[dict] = None,
                   tail_lines: int = 12) -> tuple[int, list[str]]:
    """Run `cmd` capturing into `run_id`, its output (stdout and stderr, merged) passed through to stdout; returns the
    exit code and what a report says about a failed run: the lines that name a failure, then the last lines."""
    try:
      proc = subprocess.Popen(cmd, env={**self.capture_env(run_id), **(env_extra or {})}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
    except FileNotFoundError: raise UsageMistake(f"command not found: {cmd[0]}") from None
    tail: collections.deque = collections.deque(maxlen=tail_lines)
    failures: list[str] = []
    assert proc.stdout is not None
    for raw in proc.stdout:
      sys.stdout.buffer.write(raw)
      sys.stdout.flush()
      line = raw.decode(errors="replace").rstrip()
      tail.append(line)
      if re.search(r"\bFAIL(ED)?\b|Segmentation fault|core dumped", line) and len(failures) < 20: failures.append(line)
    code = proc.wait()
    if code == 0: return code, []
    how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
    return code, [f"the captured command {how}: {' '.join(cmd)}"] + [f"failed: {line.strip()}" for line in failures] + \
      ["its last lines of output:\n" + "\n".join(tail)]

  # ***** replay *****

  def replay(self, captures: list[dict], capture_run: Optional[int] = None, base: Optional[str] = None,
             merge_base: bool = False,
             policy: Optional[Policy] = None, rerun: bool = False, shard: Optional[str] = None,
             base_runs: Optional[dict] = None,
             extra_notes: tuple = (), guard: Optional[dict] = None) -> rpt.Summary:
    """Replay `captures` with the compiler of `base` (the working tree without one), end to end with `rerun`; the
    outcomes and the policy are stored, the summary has acceptances marked. `finish` stores its verdict."""
    from replay.runner import replay_captures
    from replay.git_state import git_state
    from replay.shards import selection, parse, select, ShardError
    policy = policy or Policy()
    store = self.store()
    if not captures: raise UsageMistake("the selection matched no captures")
    # stored with the policy: `replay merge` checks that shards are of one selection
    chosen = selection(store, captures)
    if shard is not None:
      try: index, count = parse(shard)
      except ShardError as e: raise UsageMistake(str(e)) from None
      captures, shard = select(captures, index, count), f"{index}/{count}"
      if not captures: raise UsageMistake(f"shard {shard} of the selection is empty (fewer captures than shards)")
    if base is None: path, fields = [str(revisions.project_root())], {"base_ref": None, "base_commit": None}
    else:
      root, sha = resolve(base, merge_base)
      path, fields = [overlay(sha, root)], {"base_ref": base, "base_commit": sha}
    options = policy.run_options()
    if shard is not None: fields["shard"] = shard
    fields["policy"] = policy.stored(chosen, guard)
    info = {"capture_run_id": capture_run, "head_commit": git_state()[0], "argv": json.dumps(sys.argv), **fields}
    try: result = replay_captures(store, captures, path, info, options)
    except ValueError as e: raise UsageMistake(str(e)) from None
    except RuntimeError as e: raise ReplayError(str(e)) from None
    notes = list(extra_notes) + self._check_flag_defaults(captures, result, path, options)
    if rerun and base is not None:
      notes += self._end_to_end(captures, result.replay_id, fields["base_commit"], base, path[0], options, base_runs)
    if notes: store.set_replay_notes(result.replay_id, notes)
    from replay.attribution import name_changed_kernels
    name_changed_kernels(store, result.replay_id)
    if result.stopped_early:   # on purpose: the report says so, and does not call the replay INCOMPLETE
      self.log(f"replay: stopped early after --max-changed {policy.max_changed}")
      self._add_to_policy(result.replay_id, stopped_early=True)
    row = store.replay(result.replay_id)
    return self.with_acceptances(rpt.Summary.from_row(row, store.outcomes(result.replay_id),
                                                      self.capture_runs(captures)))

  def diff(self, base: Optional[str] = None, merge_base: bool = False, policy: Optional[Policy] = None,
           rerun: bool = False,
           shard: Optional[str] = None, **selection) -> rpt.Summary:
    """Select captures (`runs`, `kinds`, `names`, `location`, `ids`) and replay them on `base`; the verdict is
    stored."""
    caps, cap_run = self.select(**selection)
    summary = self.replay(caps, cap_run, base, merge_base, policy, rerun, shard)
    self.finish(summary)
    return summary

  def finish(self, summary: rpt.Summary) -> int:
    """Store the summary's verdict with its replay; the exit code."""
    code, verdict = summary.verdict()
    self.store().finish_replay(summary.replay["id"], verdict, code)
    return code

  def _add_to_policy(self, replay_id: int, **facts) -> None:
    """Record what the replay learned after it started (an early stop, failed reruns) with its stored policy, so that a
    later `replay report` gives the same verdict."""
    store = self.store()
    stored = json.loads(store.replay(replay_id).get("policy") or "{}")
    store.set_replay_policy(replay_id, json.dumps({**stored, **facts}))

  def _check_flag_defaults(self, captures: list[dict], result, path: list[str], options) -> list[str]:
    """Notes on flag defaults that differ between the captured run and the compiler replayed; the captures that ran
    with such a flag at its default are replayed once more with the base's default, and what that changes is merged."""
    from replay import flag_defaults, outcomes
    from replay.runner import replay_captures
    diffs = flag_defaults.differing(flag_defaults.recorded_defaults(self.capture_runs(captures)), result.flag_defaults)
    if not diffs: return []
    note = flag_defaults.describe(diffs)
    again = flag_defaults.with_base_defaults(captures, diffs)
    if again:
      self.log(f"replay: {note}; replaying {len(again)} captures again with the base's defaults")
      overrides = {c["id"]: c["override"] for c in again}
      extra = replay_captures(self.store(), again, path, {}, options, keep=False)
      def retold(o: dict) -> str:
        flags = ", ".join(f"{k}={v}" for k, v in overrides[o["capture_id"]].items())
        return f"with the base's flag defaults ({flags}):\n" + (o["diff"] or o["reason"])
      outcomes.merge(self.store(), result.replay_id,
                     ((o["capture_id"], o["status"], retold(o)) for o in extra.outcomes))
    return [note]

  def _end_to_end(self, captures: list[dict], replay_id: int, base_sha: str, base_ref: str, tree: str, options,
                  base_runs: Optional[dict] = None) -> list[str]:
    from replay import outcomes
    from replay.rerun import end_to_end, RerunError
    store = self.store()
    run_ids = sorted({c["run_id"] for c in captures})
    try:
      found = end_to_end(store, run_ids, f"{base_ref} ({base_sha[:10]})", tree, revisions.sut_packages(),
                         options.tolerances,
                            self.rerun_logs(), base_runs=base_runs)
    except RerunError as e: raise UsageMistake(f"--rerun: {e}") from None
    selected = {c["id"] for c in captures}
    # a capture only the base's run took is reported when the replay selected whole runs, or its kind and location
    whole = len(captures) == sum(sum(store.capture_counts(r).values()) for r in run_ids)
    scope = {(c["kind"], c["location"]) for c in captures}
    def in_scope(cid: int, status: str) -> bool:
      if status != "removed": return cid in selected
      return whole or ((theirs := store.capture(cid)) is not None and (theirs["kind"], theirs["location"]) in scope)
    outcomes.merge(store, replay_id,
                   ((cid, c.status, c.diff) for cid, c in found.results.items() if in_scope(cid, c.status)))
    # the verdict fails (4): the step did not finish, or the base cannot run it
    if found.failures or found.incompatible:
      self._add_to_policy(replay_id, rerun_failures=found.failures, rerun_incompatible=found.incompatible)
    return found.notes + found.failures + found.incompatible

  def rerun_logs(self) -> pathlib.Path: return pathlib.Path(self.store().path).resolve().parent / "reruns"

  # ***** stored replays and acceptances *****

  def accept_file(self) -> pathlib.Path:
    from replay import accept
    try: root = revisions.repo_root()
    except RevisionError: root = pathlib.Path.cwd()
    return accept.default_path(root)

  def with_acceptances(self, summary: rpt.Summary, stored: Optional[list[dict]] = None,
                       also: frozenset = frozenset()) -> rpt.Summary:
    """The summary with the changes reviewers accepted (in the database, or `stored`, and in the committed file)
    marked."""
    from replay import accept
    stored = self.store().accepted() if stored is None else stored
    try: summary.accepted = accept.accepted_keys(stored, self.accept_file(), summary.replay.get("base_commit")) | also
    except accept.AcceptFileError as e: raise UsageMistake(str(e)) from None
    summary.mark_accepted()
    return summary

  def stored_summary(self, replay_id: Optional[int] = None, statuses=(), kinds=(), location=None, show_all=False,
                     require_matches: bool = False) -> rpt.Summary:
    """A stored replay's summary, viewed through --status/--kind/--location; with `require_matches`, a view that
    selects nothing is a usage mistake."""
    store = self.store()
    row = store.replay(replay_id)
    if row is None:
      raise UsageMistake("no replay found" + (f" with id {replay_id}" if replay_id
                                              else "; run `replay run` or `replay diff` first"))
    runs = self.capture_runs([{"run_id": row["capture_run_id"]}] if row.get("capture_run_id") else [])
    summary = self.with_acceptances(rpt.Summary.from_row(row, store.outcomes(row["id"]), runs))
    summary.view, summary.show_all = {"statuses": list(statuses), "kinds": list(kinds), "location": location}, show_all
    if require_matches and (statuses or kinds or location) and not summary.shown():
      asked = ", ".join([*(f"--status {x}" for x in statuses), *(f"--kind {x}" for x in kinds),
                         *([f"--location {location!r}"] if location else [])])
      raise UsageMistake(f"the selection ({asked}) matched no outcome of replay {summary.replay.get('id')}; its "
                         f"verdict: {summary.verdict()[1]}")
    return summary

  def accept(self, summary: rpt.Summary, ids=(), export: bool = False) -> list[str]:
    """Accept the kernel changes shown in `summary` (only `ids`, if given); with `export`, also write the file to
    commit. The lines to print."""
    from replay import accept as acc
    from replay.git_state import git_state
    store = self.store()
    chosen = [o for o in summary.shown() if o["status"] == "changed" and (not ids or o["capture_id"] in ids)]
    refused = [o for o in summary.shown() if o["status"] != "changed" and (not ids or o["capture_id"] in ids)]
    if not chosen and not export:
      raise UsageMistake("the selection has no kernel changes to accept" + (f" ({len(refused)} other outcomes: only "
                                                                            f"changes can be accepted)"
                                                                            if refused else ""))
    base = summary.replay.get("base_commit")
    new = store.accept(acc.entries(chosen, git_state()[0], base))
    lines = [f"accepted {len(chosen)} changes ({new} new) of replay {summary.replay['id']}"
             + (f"; {len(refused)} mismatches/errors cannot be accepted" if refused else "")]
    # only this replay's acceptances: stale ones (a reverted experiment, another base) are not committed by accident
    if export:
      path = self.accept_file()
      current = {acc.key(o) for o in summary.outcomes if o["status"] == "changed"}
      try: mine = [e for e in store.accepted() + acc.read_file(path)
                   if acc.applies(e, base) and (e["kind"], e["location"], e["fingerprint"]) in current]
      except acc.AcceptFileError as e: raise UsageMistake(str(e)) from None
      acc.write_file(path, mine)
      lines.append(f"wrote {len(acc.read_file(path))} accepted changes of replay {summary.replay['id']} to {path} "
                   f"(commit it with the change)")
    return lines

  def capture_row(self, capture_id: int) -> dict:
    if (cap := self.store().capture(capture_id)) is None:
      raise UsageMistake(f"no capture with id {capture_id} in {self.store().path}")
    return cap

  def capture_text(self, capture_id: int) -> str:
    """One capture as `replay show` prints it: what it is, its flags, its payload (AST, source or outputs), its last
    outcome; content from the database is cleaned of control characters."""
    from replay import buffers, parts
    from replay.compare import ast_text, schedule_text
    store, cap = self.store(), self.capture_row(capture_id)
    lines = [f"capture {cap['id']} [{cap['kind']}] {cap['name']}\nrun {cap['run_id']}  location {cap['location']}\nkey "
             f"{cap['key']}"]
    for field in ("flags", "meta"):
      try: value = json.loads(cap[field] or "{}")
      except ValueError: value = None
      if not isinstance(value, dict): lines.append(f"{field} (not JSON) {cap[field][:200]}")
      elif field == "flags": lines.append("flags " + " ".join(f"{k}={v}" for k, v in value.items() if v))
      elif value: lines.append(f"meta {value}")
    try:
      inp, out, shared = parts.load_capture(store, cap)
      if cap["kind"] == "exec": out = buffers.decode_outputs(out, shared)
      if cap["kind"] == "schedule": lines.append("\n" + schedule_text(out["asts"]))
      elif cap["kind"] == "kernel": lines.append(f"\ndevice {inp['device']}\n{ast_text(inp['ast'])}\n\n{out['src']}")
      else:
        lines += [f"output {i}: {o.dtype}{list(o.shape)} sum={float(o.astype('float64').sum()):.6g}"
                  for i, o in enumerate(out["outputs"])]
    except Exception as e: lines.append(f"(cannot load the payload with this revision: {type(e).__name__}: {e})")
    if (last := store.last_outcome(capture_id)):
      lines.append(f"\nlast outcome (replay {last['replay_id']}): {last['status']} "
                   f"{last['reason'] or ''}\n{last['diff'] or ''}")
    return rpt.clean("\n".join(lines))

  def accept_group(self, summary: rpt.Summary, group: list[dict]) -> None:
    from replay import accept as acc
    from replay.git_state import git_state
    self.store().accept(acc.entries(group, git_state()[0], summary.replay.get("base_commit")))

  def merge(self, results: list[str], show_all: bool = False) -> rpt.Summary:
    """The shards of one replay (databases or JSON reports) joined into one summary, with their acceptances."""
    from replay import accept, shards
    try: summary = shards.merge(loaded := [shards.load(path) for path in results])
    except shards.ShardError as e: raise UsageMistake(str(e)) from None
    summary.show_all = show_all
    # acceptances travel with the shards: the rows of shard databases, the marks of JSON reports
    marked = frozenset(accept.key(o) for r in loaded for o in r.outcomes if o.get("accepted") is True
                       and o["status"] == "changed")
    return self.with_acceptances(summary, [row for r in loaded for row in r.accepted], marked)

  # ***** why *****

  def why(self, cap: dict, base: Optional[str]) -> str:
    """The first rule application that differs between scheduling the capture at `base` (default: the base of its last
    replay) and with the working tree."""
    from replay.runner import replay_captures, RunOptions
    from replay.why import explain
    store = self.store()
    if cap["kind"] not in ("schedule", "exec"):
      raise UsageMistake(f"--why explains schedules: capture {cap['id']} is a {cap['kind']} capture (pick the schedule "
                         f"or exec capture at "
                         "the same location)")
    base = base or self._last_base(cap)
    root, sha = resolve(base)
    traces = []
    for path in (overlay(sha, root), str(revisions.project_root())):
      out = replay_captures(store, [cap], [path], {}, RunOptions(jobs=1, progress=False, trace=True),
                            keep=False).outcomes[0]
      if "trace" not in out:
        raise ReplayError(f"could not trace capture {cap['id']} with {path}: {out.get('reason') or out['status']}")
      traces.append(out["trace"])
    head = f"capture {cap['id']} [{cap['kind']}] {rpt.clean(cap['name'])} @ {rpt.clean(cap['location'])}"
    return f"{head}, base {base} ({sha[:10]}):\n" + rpt.clean(explain(*traces))

  def explain_groups(self, summary: rpt.Summary, limit: int) -> dict[int, str]:
    """`--why` for the first capture of each changed schedule (or exec) group shown, against the replay's base."""
    base = summary.replay.get("base_commit")
    if not base: raise UsageMistake("--why needs a replay against a base revision (`replay diff --base REV`)")
    explained: dict[int, str] = {}
    for group in summary.groups():
      first = group[0]
      if len(explained) >= limit: break
      if first["status"] != "changed" or first["kind"] not in ("schedule", "exec"): continue
      cap = self.store().capture(first["capture_id"])
      if cap is None: continue
      try: explained[first["capture_id"]] = self.why(cap, base).split("\n", 1)[-1]
      except ReplayError as e: explained[first["capture_id"]] = f"(could not trace it: {e})"
    return explained

  # ***** the guard of changed lines *****

  def probe_env(self, folder: pathlib.Path, guard, boot: bool) -> dict[str, str]:
    """The environment that puts the probes of `guard`'s plan into processes (with `boot`: every Python process a
    command starts, through sitecustomize), recording into `folder`."""
    from replay import probes
    from replay.rerun import BOOT_DIR
    plan = folder / "plan.json"
    probes.write_plan(guard.plans, revisions.harness_root(), revisions.sut_packages(), plan)
    (folder / "hits").mkdir(exist_ok=True)
    env = {probes.PLAN_ENV: str(plan), probes.HITS_ENV: str(folder / "hits")}
    if boot:
      env["PYTHONPATH"] = os.pathsep.join([str(BOOT_DIR), str(revisions.harness_root()),
                                           *filter(None, [os.environ.get("PYTHONPATH")])])
    return env

  def coverage(self, captures: list[dict], base_sha: str, policy: Policy):
    """The guard of the change since `base_sha`: which changed lines of the system under test run when the captures
    are replayed with the current tree."""
    from replay import coverage_check, probes
    from replay.runner import replay_captures
    guard = coverage_check.measure_plan(base_sha, revisions.repo_root())
    if not guard.executable(): return guard
    with tempfile.TemporaryDirectory(prefix="replay-coverage-") as folder:
      env = self.probe_env(pathlib.Path(folder), guard, boot=False)
      replay_captures(self.store(), captures, [str(revisions.harness_root())], {}, policy.run_options(progress=False),
                      env_extra=env, keep=False)
      guard.ran = probes.hits(pathlib.Path(folder) / "hits")
    return guard

  def _plan_guard(self, sha: str, root: pathlib.Path):
    """(guard, environment, folder) to probe the changed lines of the system under test in the captured command."""
    from replay import coverage_check
    try: guard = coverage_check.measure_plan(sha, root)
    except RevisionError as e: raise ReplayError(f"cannot measure which changed lines run: {e}") from None
    if not guard.executable(): return guard, {}, None
    folder = tempfile.TemporaryDirectory(prefix="replay-probes-")
    return guard, self.probe_env(pathlib.Path(folder.name), guard, boot=True), folder

  def _guard_policy(self, guard, sha: str, root: pathlib.Path, allow_unguarded: bool) -> Optional[dict]:
    """What the replay stores about the guard of the change, with the threshold and whether unguarded lines may pass."""
    if guard is None: return None
    from replay import coverage_check
    try: limit = coverage_check.threshold(root)
    except RevisionError as e: raise UsageMistake(str(e)) from None
    if guard.flags(): guard.settle_flags(_flags_with_the_same_default(guard.flags(), sha, root))
    allowed, where = (True, "--allow-unguarded") if allow_unguarded else marked(coverage_check.ALLOW_MARKER)
    if allowed and guard.unguarded(): self.log(f"replay gate: unguarded changed lines allowed by {where}")
    return {**guard.to_json(), "threshold": limit, "allowed": allowed}

  # ***** the gate *****

  def _start_base_run(self, run_id: int, base: str, sha: str, root: pathlib.Path):
    """The command of `run_id` started with the base's system under test (it runs while the captures replay)."""
    from replay.capture import flag_defaults_json
    from replay.rerun import start_again, RerunError
    tree = overlay(sha, root)
    self.log(f"replay gate: running the command with {base} ({sha[:10]}) while the captures replay...")
    try:
      return start_again(self.store(), self.store().run(run_id), f"{base} ({sha[:10]})", tree, revisions.sut_packages(),
                         self.rerun_logs(),
                            flag_names=set(json.loads(flag_defaults_json())))
    except RerunError as e: raise UsageMistake(f"--rerun: {e}") from None

  def gate(self, base: str, command: list[str], merge_base: bool = False, policy: Optional[Policy] = None,
           rerun: bool = True,
           coverage: bool = True, allow_unguarded: bool = False) -> rpt.Summary:
    """Capture `command`, replay it on `base` (end to end with `rerun`), guard the changed lines (`coverage`), and
    apply the CI policy; the verdict is stored."""
    policy = policy or Policy()
    root, sha = resolve(base, merge_base)
    promised, where = marked(NO_CHANGE_MARKER)
    if promised and not policy.expect_no_change:
      self.log(f"replay gate: {NO_CHANGE_MARKER} found in {where}: kernel changes fail")
    policy.expect_no_change = policy.expect_no_change or promised
    t0 = time.time()
    run_id = self.new_run(command)
    guard, probe_env, probe_dir = self._plan_guard(sha, root) if coverage else (None, {}, None)
    try:
      code, failure_notes = self.capture_teed(command, run_id, probe_env)
      if guard is not None and probe_dir is not None:
        from replay import probes
        guard.ran = probes.hits(pathlib.Path(probe_dir.name) / "hits")
    finally:
      if probe_dir is not None: probe_dir.cleanup()
    counts = self.finish_capture(run_id, code)
    self.log_capture(run_id, counts)
    if not sum(counts.values()):
      raise ReplayError(f"the captured command captured nothing: {' '.join(command)}" + (f" ({failure_notes[0]})"
                                                                                         if failure_notes else ""))
    # the command runs with the base while the captured graphs replay (never two runs of the command at once: a
    # program may use fixed paths, as the DISK workloads do)
    base_run = self._start_base_run(run_id, base, sha, root) if rerun else None
    # a base that hangs must not hang the gate: it gets five times what the capture took, and at least ten minutes
    if base_run is not None: base_run.timeout = max(600.0, 5 * (time.time() - t0))
    try:
      summary = self.replay(self.store().captures(run_ids=[run_id]), run_id, base, merge_base, policy, rerun=rerun,
                            base_runs={run_id: base_run} if base_run else None, extra_notes=tuple(failure_notes),
                            guard=self._guard_policy(guard, sha, root, allow_unguarded))
    finally:
      if base_run is not None: base_run.kill()
    self.finish(summary)
    return summary

  def log_capture(self, run_id: int, counts: dict[str, int]) -> None:
    kinds = ", ".join(f"{counts.get(k, 0)} {k}" for k in rpt.KINDS)
    print(f"run {run_id}: captured {kinds} into {self.store().path}", flush=True)

  # ***** bisect and fuzz *****

  def bisect(self, good: str, bad: str, captures: list[dict], capture_run: Optional[int], policy: Policy,
             say: Callable[[str], None]) -> Optional[rpt.Summary]:
    """The first commit between `good` and `bad` at which the captures replay differently than at `good`; each step
    and the result go to `say`; the culprit's replay (None when there is no single culprit)."""
    from replay.bisect import first_change, signature
    from replay.runner import replay_captures
    root, good_sha = resolve(good)
    _, bad_sha = resolve(bad)
    try:
      commits = revisions.git("rev-list", "--first-parent", "--reverse", f"{good_sha}..{bad_sha}",
                              cwd=str(root)).split()
    except RevisionError as e: raise ReplayError(str(e)) from None
    if not commits:
      raise UsageMistake(f"{bad} is not a descendant of {good} (no commits between them on the first-parent line)")
    options = policy.run_options(progress=False)

    def probe(sha: str):
      try: path = [str(revisions.overlay(sha, root))]
      except RevisionError as e: return (), f"cannot check it out ({e}); skipped", False
      outcomes = replay_captures(self.store(), captures, path, {}, options, keep=False).outcomes
      counts = {st: sum(o["status"] == st for o in outcomes) for st in rpt.STATUSES}
      summary = ", ".join(f"{n} {st}" for st, n in counts.items() if n)
      # a commit where nothing replays at all (it does not import, say) tells nothing about the change: skip it
      if outcomes and counts["error"] + counts["incompatible"] == len(outcomes) and sha != good_sha:
        return (), f"{summary}: nothing replays at this commit; skipped", False
      return signature(outcomes), summary, True

    def subject(sha: str) -> str: return revisions.git("log", "-1", "--format=%h %s", sha, cwd=str(root))
    say(f"bisect: {len(captures)} captures, {len(commits)} commits after {good} up to {bad} (about "
        f"{max(1, len(commits).bit_length())} steps)")
    good_sig, good_summary, _ = probe(good_sha)
    say(f"  good {subject(good_sha)}: {good_summary}")
    found = first_change(commits, probe, good_sig, lambda st: say(
      f"  {'skipped' if st.skipped else 'differs' if st.differs else 'as good'} {subject(st.sha)}: {st.summary}"))
    skipped = (f"\nskipped (could not be probed): {', '.join(subject(sha) for sha in found.skipped)}" if found.skipped
               else "")
    if found.ambiguous:
      say(f"\nthe first change is in one of these commits (the ones before the last could not be probed):{skipped}")
      for sha in found.ambiguous: say(f"  {subject(sha)} ({sha})")
      return None
    if found.first == len(commits):
      say(f"no commit up to {bad} changes the outcome of these captures{skipped}")
      return None
    sha = commits[found.first]
    say(f"\nthe captures replayed against the culprit {subject(sha)}:")
    summary = self.replay(captures, capture_run, sha, policy=Policy(jobs=policy.jobs, timeout=policy.timeout))
    self.finish(summary)
    say(rpt.render(summary, "text"))
    say(f"\nfirst commit that changes the outcome: {subject(sha)} ({sha}){skipped}")
    say("its change against its parent:\n" + commit_change(root, sha))
    return summary

  def fuzz(self, base: str, seed: int, programs: int, policy: Policy, save_dir: Optional[str] = None) -> rpt.Summary:
    """Capture `programs` generated programs of `seed` here and replay them on `base`, plain and end to end; with
    `save_dir`, each program that shows a difference is written there as a standalone pytest file."""
    from replay import fuzzing
    resolve(base)
    self.log(f"replay fuzz: {programs} programs of seed {seed}")
    code, run_id, counts = self.capture(fuzzing.capture_command(seed, programs))
    self.log_capture(run_id, counts)
    if code != 0: raise ReplayError(f"the fuzz programs failed to run (exit code {code})")
    if not sum(counts.values()): raise ReplayError("the fuzz programs captured nothing")
    summary = self.replay(self.store().captures(run_ids=[run_id]), run_id, base, policy=policy, rerun=True)
    self.finish(summary)
    if save_dir:
      differing = fuzzing.differing_programs(self.store().outcomes(summary.replay["id"]))
      for path in fuzzing.save_programs(differing, pathlib.Path(save_dir)): self.log(f"replay fuzz: saved {path}")
      if not differing: self.log("replay fuzz: no program differs; nothing saved")
    return summary

  def reduce(self, cap: dict, base: Optional[str], budget: float, out_dir: Optional[str],
             tolerances: Optional[dict] = None) -> str:
    """Shrink a capture that differs at `base` (default: the base of its last replay) to a small graph that still
    differs, and write it as a pytest file checked with both trees; the text says what came out."""
    from replay import reduce as rd, sut
    base = base or self._last_base(cap)
    root, sha = resolve(base)
    paths = {"base": [overlay(sha, root)], "current": [str(revisions.project_root())]}
    self.log(f"replay reduce: capture {cap['id']} against {base} ({sha[:10]}), budget {budget:g} s")
    try: reduction = rd.reduce_capture(self.store(), cap, paths, budget, tolerances)
    except rd.ReduceError as e: raise ReplayError(f"cannot reduce capture {cap['id']}: {e}") from None
    contract = sut.contract()
    folder = pathlib.Path(out_dir) if out_dir else pathlib.Path(self.store().path).resolve().parent / "reduced"
    lines = [f"capture {cap['id']} [{cap['kind']}] {rpt.clean(cap['name'])} @ {rpt.clean(cap['location'])}: "
             f"{reduction.original_size} nodes -> {reduction.size} in {reduction.seconds:.1f} s "
             f"({reduction.evaluations} candidates run on both trees); buffer elements "
             f"{reduction.original_elements} -> {reduction.elements}", *("  " + p for p in reduction.passes),
             "", "difference on the reduced graph:", rpt.clean(reduction.difference), "",
             "reduced graph:", rd.graph_text(reduction.graph), ""]
    try: path, prog = rd.write_test(reduction, contract, folder, f"{base} {sha[:10]}", tolerances,
                                    json.loads(cap["flags"] or "{}"))
    except Exception as e:   # the graph is still shown: a program the contract cannot write is not the end
      return "\n".join(lines + [f"(no test file: {type(e).__name__}: {e})"])
    verdict = rd.verify_test(path, paths)
    lines += ["program:", *("  " + line for line in prog["lines"]), "",
              f"wrote {path}: {len(prog['lines'])} line{'s' if len(prog['lines']) != 1 else ''} of Tensor code"
              + (f" ({prog['uop_nodes']} nodes in UOp form)" if prog["uop_nodes"] else ""),
              f"  with the base: {'passes' if verdict['base'] else 'FAILS'}; with the working tree: "
              f"{'fails' if not verdict['current'] else 'PASSES (the file does not show the difference)'}"]
    return "\n".join(lines)

  def reduce_groups(self, summary: rpt.Summary, budget: float, tolerances: Optional[dict] = None) -> None:
    """`diff --reduce`: the first capture of each group `replay reduce` applies to, reduced within `budget` seconds in
    total (shared evenly by the groups left); each result goes to the log."""
    groups = [g for g in summary.groups() if rpt.reduce_command(summary, g)]
    deadline = time.monotonic() + budget
    for k, group in enumerate(groups):
      left = deadline - time.monotonic()
      if left < 1:
        self.log(f"replay reduce: the budget is spent; {len(groups) - k} groups not reduced")
        break
      cap = self.capture_row(group[0]["capture_id"])
      try: self.log(self.reduce(cap, summary.replay["base_commit"], left / (len(groups) - k), None, tolerances))
      except ReplayError as e: self.log(f"replay reduce: {e}")

  def _last_base(self, cap: dict) -> str:
    last = self.store().last_outcome(cap["id"])
    row = self.store().replay(last["replay_id"]) if last else None
    if not (row and row.get("base_commit")):
      raise UsageMistake(f"capture {cap['id']} was never replayed against a base revision; give one with --base")
    return row["base_commit"]

  # ***** housekeeping *****

  def reset(self) -> str:
    """Delete every capture, replay and blob from the database, and the cached worktrees and overlays."""
    store = self.store(create=True)
    store.reset()
    trees = remove_trees()
    return f"reset {store.path}" + (f"; removed {trees} cached worktrees and overlays" if trees else "")

  def prune(self, keep: int, older_than: Optional[float], worktrees: bool, dry_run: bool) -> str:
    """Remove old capture runs (with their reruns, captures, outcomes and replays), blobs nothing refers to, and the
    cached worktrees and overlays; what was (or would be) removed."""
    store = self.store()
    originals = [r for r in store.runs() if not r.get("rerun_of")]
    cutoff = time.time() - older_than * 86400 if older_than is not None else None
    # a run still being captured (unfinished and started within a day) is never pruned: its writer is not done with it
    live = {r["id"] for r in store.runs() if r.get("finished") is None
            and (r.get("started") or 0) > time.time() - 86400}
    old = [r["id"] for r in originals[keep:] if (cutoff is None or (r.get("started") or 0) < cutoff)
           and r["id"] not in live]
    doomed = old + [r["id"] for r in store.runs() if r.get("rerun_of") in old]
    if live:
      self.log(f"replay: keeping run{'s' if len(live) > 1 else ''} {', '.join(map(str, sorted(live)))}: still being "
               f"captured")
    try: trees = revisions.cached_trees(revisions.repo_root()) if worktrees else []
    except RevisionError: trees = []
    if dry_run:
      captures = sum(sum(r["counts"].values()) for r in store.runs() if r["id"] in doomed)
      return (f"would remove {len(doomed)} runs ({', '.join(map(str, sorted(doomed))) or 'none'}) with {captures} "
              f"captures, the replays of "
              f"them, unreferenced blobs, and {len(trees)} cached worktrees and overlays")
    gone = store.delete_runs(doomed) if doomed else {"blobs": store.delete_unreferenced_blobs()}
    store.vacuum()
    removed = remove_trees() if worktrees else 0
    return ("removed " + ", ".join(f"{n} {what}" for what, n in gone.items()) + f", {removed} cached worktrees and "
                                                                                f"overlays")


def remove_trees() -> int:
  try: return revisions.remove_cached_trees(revisions.repo_root())
  except RevisionError: return 0   # not in a git repository: there are no worktrees


def _flags_with_the_same_default(names: set[str], sha: str, root: pathlib.Path) -> set[str]:
  """Which of the flags `names` have the same default in the current tree and at `sha` (asked in a process that
  imports the base's compiler)."""
  from replay import isolation
  from replay.capture import flag_defaults_json
  here = json.loads(flag_defaults_json())
  tree = overlay(sha, root)
  env = {**os.environ, "PYTHONPATH": tree, isolation.ROOT_ENV: tree,
         isolation.PACKAGES_ENV: ",".join(revisions.sut_packages())}
  code = ("import json\nfrom replay import isolation\nisolation.install()\nfrom replay.replayers import "
          "flag_defaults\nprint(json.dumps(flag_defaults()))")
  proc = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True, timeout=120)
  try: there = json.loads(proc.stdout.strip().splitlines()[-1]) or {}
  except (ValueError, IndexError): return set()
  return {name for name in names if name in here and name in there and here[name] == there[name]}
