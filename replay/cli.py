"""The `replay` command line (also `python -m replay`): capture, run, diff, list, show, report, reset, gate.

A thin click layer: selection, revisions, the runner and the reports do the work. Exit codes: 0 ok,
1 kernels changed although the change promised none, 2 usage error, 3 outputs mismatch, 4 replay errors,
incompatible captures, or the harness itself failed.
"""
from __future__ import annotations
import json, os, pathlib, shutil, signal, sqlite3, subprocess, sys, time
from typing import Optional
import click
from tabulate import tabulate
from db import Store, StoreError, NoDatabase
from replay import report as rpt
from replay.revisions import RevisionError, UnknownRevision

EXIT_HARNESS = rpt.EXIT_HARNESS


class HarnessError(click.ClickException):
  """The harness could not do its job (a bad database, a git failure): exit 4."""
  exit_code = EXIT_HARNESS
  def show(self, file=None): click.echo(f"replay: error: {self.message}", err=True)


class UsageMistake(HarnessError):
  """What was asked for does not exist (no database yet, no such capture, revision or match): exit 2."""
  exit_code = rpt.EXIT_USAGE


def say(text: str) -> None:
  """Text with content from a database on stdout: control characters (terminal escapes) shown as \\xNN."""
  click.echo(rpt.clean(text))


def _store(create: bool = False) -> Store:
  try: return Store(create=create)
  except NoDatabase as e: raise UsageMistake(str(e)) from None
  except StoreError as e: raise HarnessError(str(e)) from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", "db_path", envvar="REPLAY_DB", default=None, help="Database file (env REPLAY_DB, default .replay/replay.db).")
def cli(db_path: Optional[str]):
  """Process replay: capture what the compiler does on real workloads, replay it against another revision, and see
  exactly which kernels and which results a change alters."""
  if db_path: os.environ["REPLAY_DB"] = db_path


# ***** capture *****

def run_capture(cmd: list[str], echo: bool = True) -> tuple[int, int, dict[str, int]]:
  """Run `cmd` with capture on, all its processes writing into one new run: (exit code, run id, captures by kind)."""
  from replay.capture import run_info
  store = _store(create=True)
  run_id = store.add_run(**run_info(cmd))
  try: code = subprocess.call(cmd, env=_capture_env(store, run_id))
  except FileNotFoundError: raise click.UsageError(f"command not found: {cmd[0]}") from None
  return code, run_id, _finish_capture(store, run_id, code, echo)


def _capture_env(store: Store, run_id: int) -> dict[str, str]:
  return {**os.environ, "CAPTURE_PROCESS_REPLAY": "1", "REPLAY_RUN_ID": str(run_id), "REPLAY_DB": os.path.abspath(store.path)}


def _finish_capture(store: Store, run_id: int, code: int, echo: bool) -> dict[str, int]:
  store.finish_run(run_id, code)
  counts = store.capture_counts(run_id)
  if echo:
    click.echo(f"run {run_id}: captured " + (", ".join(f"{counts.get(k, 0)} {k}" for k in rpt.KINDS)) + f" into {store.path}")
  return counts


def run_capture_teed(cmd: list[str], store: Store, run_id: int, env_extra: Optional[dict] = None, tail_lines: int = 12) -> tuple[int, list[str]]:
  """Run `cmd` capturing into `run_id`, its output (stdout and stderr, merged) passed through to stdout; returns the
  exit code and what a report says about a failed run: the lines that name a failure, then the last lines."""
  import collections, re
  try: proc = subprocess.Popen(cmd, env={**_capture_env(store, run_id), **(env_extra or {})}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
  except FileNotFoundError: raise click.UsageError(f"command not found: {cmd[0]}") from None
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


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def capture(cmd):
  """Run CMD with capture on: every schedule, kernel render and realize it does is stored (replay capture -- CMD...)."""
  code, run_id, counts = run_capture(list(cmd))
  if code != 0: click.echo(f"replay: the captured command exited with code {code}", err=True)
  if not sum(counts.values()): click.echo("replay: warning: the command captured nothing (does it use the compiler?)", err=True)
  if code == 0 and (lost := (_store().run(run_id) or {}).get("lost")):
    click.echo(f"replay: error: {lost} captures of run {run_id} could not be stored (see the warning above); the run is incomplete", err=True)
    sys.exit(EXIT_HARNESS)
  sys.exit(code if code >= 0 else 128 - code)  # killed by a signal: the shell's convention


# ***** run / diff *****

def selection_options(f):
  f = click.option("--run", "runs", type=int, multiple=True, help="Capture run id(s) to replay (default: the latest run).")(f)
  f = click.option("--kind", "kinds", type=click.Choice(rpt.KINDS), multiple=True, help="Only these kinds.")(f)
  f = click.option("--name", "names", multiple=True, help="Only captures with this name.")(f)
  f = click.option("--location", default=None, help="Only captures whose location contains this text.")(f)
  f = click.option("--id", "ids", type=int, multiple=True, help="Only these capture ids.")(f)
  return f


class CountOrPercent(click.ParamType):
  """A count (`20`) or a percentage of the selection (`5%`), checked when the option is parsed, kept as written."""
  name = "COUNT|PCT%"

  def convert(self, value, param, ctx):
    text = str(value).strip()
    try: number = float(text[:-1]) if text.endswith("%") else int(text)
    except ValueError: self.fail(f"{value!r} is neither a count (20) nor a percentage (5%)", param, ctx)
    if number <= 0 or (text.endswith("%") and number > 100): self.fail(f"{value!r} must be a count above 0 or a percentage in (0, 100]", param, ctx)
    return text


def policy_options(f):
  f = click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help="Worker processes (default: all cores).")(f)
  f = click.option("--timeout", type=click.FloatRange(min=0.1), default=120.0, show_default=True, help="Seconds per capture before it is an error.")(f)
  f = click.option("--worker-memory", "worker_memory", type=click.IntRange(min=0), default=8192, show_default=True,
                   help="Address-space limit of each replay worker in MiB (0: none); a capture that needs more is an error.")(f)
  f = click.option("--max-changed", type=CountOrPercent(), default=None,
                   help="Stop early after this many (or this percent, e.g. 5%) changed or mismatched captures.")(f)
  f = click.option("--expect-no-change", is_flag=True, help="Fail (exit 1) if any kernel changed (changed, added or removed).")(f)
  f = click.option("--allow-incompatible", is_flag=True,
                   help="Let through captures the base cannot load or call; replay errors still fail.")(f)
  f = click.option("--fail-on-drift", is_flag=True, help="Fail (exit 3) when outputs differ bit for bit, even within tolerance.")(f)
  f = click.option("--max-cost-increase", type=click.FloatRange(min=0), default=None,
                   help="Fail (exit 1) when a changed kernel's static cost grows by more than this percentage (e.g. 10).")(f)
  f = click.option("--rtol", type=float, default=None, help="Relative tolerance for float outputs (all float dtypes).")(f)
  f = click.option("--atol", type=float, default=None, help="Absolute tolerance for float outputs (all float dtypes).")(f)
  f = click.option("--format", "fmt", type=click.Choice(rpt.FORMATS), default="text", show_default=True, help="Report format on stdout.")(f)
  f = click.option("--output", type=click.Path(dir_okay=False, writable=True), default=None, help="Also write the report to this file.")(f)
  return f


def select_captures(store: Store, runs, kinds, names, location, ids) -> tuple[list[dict], Optional[int]]:
  run_ids = list(runs) or ([] if ids else ([r] if (r := store.latest_run_id()) is not None else []))
  if not run_ids and not ids: raise UsageMistake(f"no captures in {store.path}; run `replay capture -- CMD` first")
  caps = store.captures(run_ids=run_ids or None, kinds=kinds or None, names=names or None, location=location, ids=ids or None)
  if not caps and (kinds or names or location or ids or runs): raise UsageMistake("the selection matched no captures")
  return caps, (run_ids[0] if len(run_ids) == 1 else None)


def shard_option(f):
  return click.option("--shard", default=None, metavar="I/N",
                      help="Replay only shard I of N of the selection (deterministic, disjoint); join the shards with `replay merge`.")(f)


def take_shard(captures: list[dict], shard: Optional[str]) -> tuple[list[dict], Optional[str]]:
  """The shard's part of the selection and the shard as stored with the replay ("I/N"); all of it without --shard."""
  if shard is None: return captures, None
  from replay import shards
  try: index, count = shards.parse(shard)
  except shards.ShardError as e: raise click.UsageError(str(e)) from None
  return shards.select(captures, index, count), f"{index}/{count}"


def _tolerances(rtol, atol) -> Optional[dict]:
  if rtol is None and atol is None: return None
  from replay.compare import DEFAULT_TOLERANCES
  return {k: (rtol if rtol is not None else r, atol if atol is not None else a) for k, (r, a) in DEFAULT_TOLERANCES.items()}


def do_replay(store: Store, captures: list[dict], capture_run: Optional[int], base_ref: Optional[str], merge_base: bool, jobs, timeout,
              max_changed, rtol, atol, expect_no_change: bool = False, allow_incompatible: bool = False,
              worker_memory: int = 8192, rerun: bool = False, fail_on_drift: bool = False,
              max_cost_increase: Optional[float] = None, shard: Optional[str] = None, base_runs: Optional[dict] = None,
              extra_notes: tuple = (), guard: Optional[dict] = None) -> rpt.Summary:
  from replay.runner import replay_captures, RunOptions
  from replay import revisions
  from replay.capture import git_state
  if not captures: raise UsageMistake("the selection matched no captures")
  from replay.shards import selection
  chosen = selection(store, captures)   # stored with the policy: `replay merge` checks that shards are of one selection
  captures, shard = take_shard(captures, shard)
  if not captures: raise UsageMistake(f"shard {shard} of the selection is empty (fewer captures than shards)")
  head, _ = git_state()
  if base_ref is None:
    path, fields = [str(revisions.project_root())], {"base_ref": None, "base_commit": None}
  else:
    try:
      root = revisions.repo_root()
      sha = revisions.resolve(base_ref, merge_base, cwd=str(root))
      path, fields = [str(revisions.overlay(sha, root))], {"base_ref": base_ref, "base_commit": sha}
    except UnknownRevision as e: raise UsageMistake(str(e)) from None
    except RevisionError as e: raise HarnessError(str(e)) from None
  options = RunOptions(jobs=jobs or max(1, os.cpu_count() or 1), timeout=timeout, max_changed=max_changed, tolerances=_tolerances(rtol, atol),
                       memory_mb=worker_memory)
  # the policy is stored with the replay, so that `replay report` later gives the verdict this run gave
  if shard is not None: fields["shard"] = shard
  fields["policy"] = json.dumps({"expect_no_change": expect_no_change, "allow_incompatible": allow_incompatible, "max_changed": max_changed,
                                 "tolerances": options.tolerances, "fail_on_drift": fail_on_drift,
                                 "max_cost_increase": None if max_cost_increase is None else max_cost_increase / 100,
                                 "selection": chosen, **({"guard": guard} if guard is not None else {})})
  try: result = replay_captures(store, captures, path, {"capture_run_id": capture_run, "head_commit": head, "argv": json.dumps(sys.argv), **fields}, options)
  except ValueError as e: raise click.UsageError(str(e)) from None
  except RuntimeError as e: raise HarnessError(str(e)) from None
  notes = list(extra_notes) + _check_flag_defaults(store, captures, result, path, options)
  if rerun and base_ref is not None:
    notes += _end_to_end(store, captures, result.replay_id, fields["base_commit"], base_ref, path[0], options, base_runs)
  if notes: store.set_replay_notes(result.replay_id, notes)
  from replay.attribution import name_changed_kernels
  name_changed_kernels(store, result.replay_id)
  if result.stopped_early:   # on purpose: the report says so, and does not call the replay INCOMPLETE
    click.echo(f"replay: stopped early after --max-changed {max_changed}", err=True)
    _add_to_policy(store, result.replay_id, stopped_early=True)
  replay_row = store.replay(result.replay_id)
  summary = _with_acceptances(store, rpt.Summary.from_row(replay_row, store.outcomes(result.replay_id), _capture_runs(store, captures)))
  return summary


def _add_to_policy(store: Store, replay_id: int, **facts) -> None:
  """Record what the replay learned after it started (an early stop, failed reruns) with its stored policy, so that a
  later `replay report` gives the same verdict."""
  policy = json.loads(store.replay(replay_id).get("policy") or "{}")
  store.set_replay_policy(replay_id, json.dumps({**policy, **facts}))


def _check_flag_defaults(store: Store, captures: list[dict], result, path: list[str], options) -> list[str]:
  """Notes on flag defaults that differ between the captured run and the compiler replayed; the captures that ran
  with such a flag at its default are replayed once more with the base's default, and what that changes is merged."""
  from replay import flag_defaults, outcomes
  from replay.runner import replay_captures
  diffs = flag_defaults.differing(flag_defaults.recorded_defaults(_capture_runs(store, captures)), result.flag_defaults)
  if not diffs: return []
  note = flag_defaults.describe(diffs)
  again = flag_defaults.with_base_defaults(captures, diffs)
  if again:
    click.echo(f"replay: {note}; replaying {len(again)} captures again with the base's defaults", err=True)
    overrides = {c["id"]: c["override"] for c in again}
    extra = replay_captures(store, again, path, {}, options, keep=False)
    outcomes.merge(store, result.replay_id, ((o["capture_id"], o["status"], "with the base's flag defaults ("
                                              + ", ".join(f"{k}={v}" for k, v in overrides[o["capture_id"]].items()) + "):\n"
                                              + (o["diff"] or o["reason"])) for o in extra.outcomes))
  return [note]


def _end_to_end(store: Store, captures: list[dict], replay_id: int, base_sha: str, base_ref: str, overlay: str, options,
                base_runs: Optional[dict] = None) -> list[str]:
  from replay import outcomes, revisions
  from replay.rerun import end_to_end, RerunError
  run_ids = sorted({c["run_id"] for c in captures})
  try: found = end_to_end(store, run_ids, f"{base_ref} ({base_sha[:10]})", overlay, revisions.sut_packages(), options.tolerances,
                          _rerun_logs(store), base_runs=base_runs)
  except RerunError as e: raise UsageMistake(f"--rerun: {e}") from None
  selected = {c["id"] for c in captures}
  # a capture only the base's run took is reported when the replay selected whole runs, or its kind and location
  whole = len(captures) == sum(sum(store.capture_counts(r).values()) for r in run_ids)
  scope = {(c["kind"], c["location"]) for c in captures}
  def in_scope(cid: int, status: str) -> bool:
    if status != "removed": return cid in selected
    return whole or ((theirs := store.capture(cid)) is not None and (theirs["kind"], theirs["location"]) in scope)
  outcomes.merge(store, replay_id, ((cid, c.status, c.diff) for cid, c in found.results.items() if in_scope(cid, c.status)))
  if found.failures or found.incompatible:   # the verdict fails (4): the step did not finish, or the base cannot run it
    _add_to_policy(store, replay_id, rerun_failures=found.failures, rerun_incompatible=found.incompatible)
  return found.notes + found.failures + found.incompatible


def _accept_file() -> pathlib.Path:
  from replay import accept, revisions
  try: root = revisions.repo_root()
  except RevisionError: root = pathlib.Path.cwd()
  return accept.default_path(root)


def _with_acceptances(store: Store, summary: rpt.Summary) -> rpt.Summary:
  """The summary with the changes reviewers accepted (in the database and in the committed file) marked."""
  return _with_acceptances_of(summary, store.accepted())


def _with_acceptances_of(summary: rpt.Summary, stored: list[dict], also: frozenset = frozenset()) -> rpt.Summary:
  from replay import accept
  try: summary.accepted = accept.accepted_keys(stored, _accept_file(), summary.replay.get("base_commit")) | also
  except accept.AcceptFileError as e: raise UsageMistake(str(e)) from None
  summary.mark_accepted()
  return summary


def _capture_runs(store: Store, captures: list[dict]) -> list[dict]:
  return [run for run_id in sorted({c["run_id"] for c in captures}) if (run := store.run(run_id)) is not None]


def echo_report(text: str, fmt: str, page: bool = False) -> None:
  """A report on stdout: on a terminal (and without NO_COLOR) a text report is colored, and with `page` a report
  longer than the screen goes through the pager."""
  terminal = sys.stdout.isatty()
  if fmt == "text" and terminal and not os.environ.get("NO_COLOR"): text = rpt.colorize(text)
  if page and terminal and text.count("\n") > shutil.get_terminal_size().lines: click.echo_via_pager(text)
  else: click.echo(text)


def finish(store: Store, summary: rpt.Summary, fmt: str, output: Optional[str]) -> int:
  code, verdict = summary.verdict()
  store.finish_replay(summary.replay["id"], verdict, code)
  text = rpt.render(summary, fmt)
  echo_report(text, fmt)
  if output: pathlib.Path(output).write_text(text)
  return code


@cli.command()
@selection_options
@shard_option
@policy_options
def run(runs, kinds, names, location, ids, shard, jobs, timeout, worker_memory, max_changed, expect_no_change, allow_incompatible, fail_on_drift,
        max_cost_increase, rtol, atol, fmt, output):
  """Replay captures against the working tree (a determinism check right after capturing)."""
  store = _store()
  caps, cap_run = select_captures(store, runs, kinds, names, location, ids)
  summary = do_replay(store, caps, cap_run, None, False, jobs, timeout, max_changed, rtol, atol, expect_no_change, allow_incompatible,
                      worker_memory, fail_on_drift=fail_on_drift, max_cost_increase=max_cost_increase, shard=shard)
  sys.exit(finish(store, summary, fmt, output))


@cli.command()
@click.option("--base", required=True, help="The revision to replay on: branch, tag, sha, HEAD~N.")
@click.option("--merge-base", is_flag=True, help="Use the merge base of --base and HEAD.")
@click.option("--rerun", is_flag=True, help="Also run the captured commands again with the base (and once more with the current tree, "
              "to tell nondeterminism from regressions) and compare the runs: catches frontend, autograd and flag-default changes.")
@selection_options
@shard_option
@policy_options
def diff(base, merge_base, rerun, runs, kinds, names, location, ids, shard, jobs, timeout, worker_memory, max_changed, expect_no_change,
         allow_incompatible, fail_on_drift, max_cost_increase, rtol, atol, fmt, output):
  """Replay captures with the compiler of another revision; base is `-`, captured is `+` in the diffs."""
  store = _store()
  caps, cap_run = select_captures(store, runs, kinds, names, location, ids)
  summary = do_replay(store, caps, cap_run, base, merge_base, jobs, timeout, max_changed, rtol, atol, expect_no_change, allow_incompatible,
                      worker_memory, rerun, fail_on_drift, max_cost_increase, shard)
  sys.exit(finish(store, summary, fmt, output))


@cli.command()
@click.argument("results", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(rpt.FORMATS), default="text", show_default=True, help="Report format on stdout.")
@click.option("--output", type=click.Path(dir_okay=False, writable=True), default=None, help="Also write the report to this file.")
@click.option("--all", "show_all", is_flag=True, help="Show every group of differences, each in full (no truncation).")
def merge(results, fmt, output, show_all):
  """Join the shards of one replay (`run`/`diff --shard I/N`) into one report and one verdict. RESULTS are the shards'
  databases (their latest replay) or JSON reports (`--format json --output`), in any order; a missing shard makes the
  verdict INCOMPLETE (exit 4)."""
  from replay import accept, shards
  try: loaded = [shards.load(path) for path in results]
  except shards.ShardError as e: raise UsageMistake(str(e)) from None
  try: summary = shards.merge(loaded)
  except shards.ShardError as e: raise UsageMistake(str(e)) from None
  summary.show_all = show_all
  # acceptances travel with the shards: the rows of shard databases, the marks of JSON reports
  marked = frozenset(accept.key(o) for r in loaded for o in r.outcomes if o.get("accepted") is True and o["status"] == "changed")
  summary = _with_acceptances_of(summary, [row for r in loaded for row in r.accepted], marked)
  code, _ = summary.verdict()
  text = rpt.render(summary, fmt)
  echo_report(text, fmt)
  if output: pathlib.Path(output).write_text(text)
  sys.exit(code)


# ***** browsing *****

@cli.command("list")
@selection_options
@click.option("--limit", type=int, default=50, show_default=True, help="Show at most this many captures (0: all).")
def list_(runs, kinds, names, location, ids, limit):
  """List captures (the latest run by default)."""
  store = _store()
  caps, _ = select_captures(store, runs, kinds, names, location, ids)
  rows = [[c["id"], c["run_id"], c["kind"], c["name"][:48], c["location"][:60], time.strftime("%H:%M:%S", time.localtime(c["time"]))]
          for c in (caps if limit == 0 else caps[:limit])]
  say(tabulate(rows, headers=["id", "run", "kind", "name", "location", "time"]))
  if limit and len(caps) > limit: click.echo(f"... {len(caps) - limit} more (--limit 0 shows all)")


def view_options(f):
  f = click.option("--status", "statuses", type=click.Choice(rpt.STATUSES), multiple=True, help="Only outcomes with this status (repeatable).")(f)
  f = click.option("--kind", "view_kinds", type=click.Choice(rpt.KINDS), multiple=True, help="Only captures of this kind (repeatable).")(f)
  f = click.option("--location", "view_location", default=None, help="Only captures whose location contains this text.")(f)
  return f


def _stored_summary(store: Store, replay_id: Optional[int], statuses=(), kinds=(), location=None, show_all=False) -> rpt.Summary:
  row = store.replay(replay_id)
  if row is None: raise UsageMistake("no replay found" + (f" with id {replay_id}" if replay_id else "; run `replay run` or `replay diff` first"))
  summary = _with_acceptances(store, rpt.Summary.from_row(row, store.outcomes(row["id"]), _capture_runs(store, [{"run_id": row["capture_run_id"]}] if row.get("capture_run_id") else [])))
  summary.view, summary.show_all = {"statuses": list(statuses), "kinds": list(kinds), "location": location}, show_all
  return summary


def _require_matches(summary: rpt.Summary) -> None:
  """A report asked to select (--status, --kind, --location) that selects nothing is a usage mistake (exit 2)."""
  view = summary.view
  if not (view.get("statuses") or view.get("kinds") or view.get("location")) or summary.shown(): return
  asked = ", ".join([*(f"--status {x}" for x in view.get("statuses") or []), *(f"--kind {x}" for x in view.get("kinds") or []),
                     *([f"--location {view['location']!r}"] if view.get("location") else [])])
  raise UsageMistake(f"the selection ({asked}) matched no outcome of replay {summary.replay.get('id')}; its verdict: {summary.verdict()[1]}")


@cli.command()
@click.argument("capture_id", type=int, required=False)
@click.option("--replay", "replay_id", type=int, default=None, help="Without CAPTURE_ID: the replay to show (default: the latest).")
@click.option("--why", is_flag=True, help="Name the first rewrite rule whose application differs between the base and this tree.")
@click.option("--base", "why_base", default=None, help="With --why: the base revision (default: the base of the capture's last replay).")
@view_options
def show(capture_id, replay_id, why, why_base, statuses, view_kinds, view_location):
  """Show one capture (its AST or source, flags, location, the last outcome's diff), or without CAPTURE_ID every
  difference of a replay in full, most severe first, selected with --status/--kind/--location."""
  from replay import buffers, serialize
  from replay.compare import ast_text, schedule_text
  store = _store()
  if capture_id is None:
    summary = _stored_summary(store, replay_id, statuses, view_kinds, view_location, show_all=True)
    _require_matches(summary)
    echo_report(rpt.render(summary, "text"), "text", page=True)
    return
  cap = store.capture(capture_id)
  if cap is None: raise UsageMistake(f"no capture with id {capture_id} in {store.path}")
  if why:
    click.echo(_why(store, cap, why_base))
    return
  say(f"capture {cap['id']} [{cap['kind']}] {cap['name']}\nrun {cap['run_id']}  location {cap['location']}\nkey {cap['key']}")
  for field in ("flags", "meta"):
    try: value = json.loads(cap[field] or "{}")
    except ValueError: value = None
    if not isinstance(value, dict): click.echo(f"{field} (not JSON) {rpt.clean(cap[field])[:200]}")
    elif field == "flags": say("flags " + " ".join(f"{k}={v}" for k, v in value.items() if v))
    elif value: say(f"meta {value}")
  try:
    inp, out = serialize.loads(store.get_blob(cap["input_sha"])), serialize.loads(store.get_blob(cap["output_sha"]))
    if cap["kind"] == "exec": out = buffers.decode_outputs(out, store.shared_blobs(cap["id"]))
    if cap["kind"] == "schedule": say("\n" + schedule_text(out["asts"]))
    elif cap["kind"] == "kernel": say(f"\ndevice {inp['device']}\n{ast_text(inp['ast'])}\n\n{out['src']}")
    else:
      for i, o in enumerate(out["outputs"]): click.echo(f"output {i}: {o.dtype}{list(o.shape)} sum={float(o.astype('float64').sum()):.6g}")
  except Exception as e: say(f"(cannot load the payload with this revision: {type(e).__name__}: {e})")
  last = store.last_outcome(capture_id)
  if last: say(f"\nlast outcome (replay {last['replay_id']}): {last['status']} {last['reason'] or ''}\n{last['diff'] or ''}")


@cli.command()
@click.option("--replay", "replay_id", type=int, default=None, help="Replay id (default: the latest).")
@click.option("--format", "fmt", type=click.Choice(rpt.FORMATS), default="text", show_default=True)
@click.option("--output", type=click.Path(dir_okay=False, writable=True), default=None, help="Write to this file instead of stdout.")
@click.option("--all", "show_all", is_flag=True, help="Show every group of differences, each in full (no truncation).")
@click.option("--why", is_flag=True, help="Name the rewrite rule behind each changed schedule group (replays it with tracing; text and html).")
@click.option("--why-limit", type=click.IntRange(min=1), default=10, show_default=True, help="Explain at most this many groups.")
@view_options
def report(replay_id, fmt, output, show_all, statuses, view_kinds, view_location, why, why_limit):
  """Render a stored replay as text, markdown, json, junit or html; differences most severe first, identical ones
  grouped. The verdict (and the exit code) is the replay's, whatever the filters show."""
  store = _store()
  summary = _stored_summary(store, replay_id, statuses, view_kinds, view_location, show_all)
  _require_matches(summary)
  row = summary.replay
  if why: summary.explanations = _explain_groups(store, summary, why_limit)
  text = rpt.render(summary, fmt)
  if output: pathlib.Path(output).write_text(text); click.echo(f"wrote {fmt} report of replay {row['id']} to {output}")
  else: echo_report(text, fmt, page=True)
  sys.exit(summary.verdict()[0])   # the stored replay's verdict, under the policy it ran with


@cli.command()
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def reset(yes):
  """Delete every capture, replay and blob from the database, and the cached worktrees and overlays."""
  store = _store(create=True)
  if not yes and not click.confirm(f"delete everything in {store.path} and the cached worktrees?"): sys.exit(0)
  store.reset()
  trees = _remove_trees()
  click.echo(f"reset {store.path}" + (f"; removed {trees} cached worktrees and overlays" if trees else ""))


def _remove_trees() -> int:
  from replay import revisions
  try: return revisions.remove_cached_trees(revisions.repo_root())
  except RevisionError: return 0   # not in a git repository: there are no worktrees


def _when(t) -> str: return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if isinstance(t, (int, float)) else "-"


def _command(argv_json) -> str:
  try: argv = json.loads(argv_json or "[]")
  except ValueError: return rpt.clean(argv_json)[:50]
  if not isinstance(argv, list): return "?"
  shown = [os.path.basename(a) if i == 0 else a for i, a in enumerate(map(str, argv))]
  text = " ".join(shown)
  return rpt.clean(text if len(text) <= 50 else text[:47] + "...")


@cli.command()
@click.option("--limit", type=int, default=20, show_default=True, help="Show at most this many runs and replays (0: all).")
def runs(limit):
  """List capture runs (command, commit, how it ended, captures) and replays (base, verdict), newest first."""
  store = _store()
  all_runs, replays = store.runs(), store.replays()
  shown = all_runs if limit == 0 else all_runs[:limit]
  rows = [[r["id"], _when(r.get("started")), _command(r.get("argv")), (r.get("git_commit") or "-")[:10] + ("+dirty" if r.get("git_dirty") else ""),
           "-" if r.get("exit_code") is None else r["exit_code"], " ".join(f"{r['counts'].get(k, 0)}{k[0]}" for k in rpt.KINDS),
           f"rerun of {r['rerun_of']} ({rpt.clean(r.get('tree') or '')[:24]})" if r.get("rerun_of") else ""] for r in shown]
  say(tabulate(rows, headers=["run", "started", "command", "commit", "exit", "captures (s k e)", ""]))
  if len(all_runs) > len(shown): click.echo(f"... {len(all_runs) - len(shown)} more runs (--limit 0 shows all)")
  shown = replays if limit == 0 else replays[:limit]
  rows = [[r["id"], _when(r.get("started")), r.get("capture_run_id") or "-", rpt.clean(r.get("base_ref") or "working tree")[:24]
           + (f" ({r['base_commit'][:10]})" if r.get("base_commit") else ""), r["outcomes"], rpt.clean(r.get("verdict") or "(did not finish)")[:70]]
          for r in shown]
  say("\n" + tabulate(rows, headers=["replay", "started", "run", "base", "outcomes", "verdict"]))
  if len(replays) > len(shown): click.echo(f"... {len(replays) - len(shown)} more replays (--limit 0 shows all)")


@cli.command()
@click.option("--keep", type=click.IntRange(min=0), default=5, show_default=True, help="Keep this many of the newest capture runs.")
@click.option("--older-than", "older_than", type=click.FloatRange(min=0), default=None, help="Only prune runs older than this many days.")
@click.option("--worktrees/--no-worktrees", default=True, show_default=True, help="Also remove the cached worktrees and overlays.")
@click.option("--dry-run", is_flag=True, help="Say what would be removed, remove nothing.")
def prune(keep, older_than, worktrees, dry_run):
  """Remove old capture runs (with their reruns, captures, outcomes and replays), blobs nothing refers to, and the
  cached worktrees and overlays."""
  store = _store()
  originals = [r for r in store.runs() if not r.get("rerun_of")]
  cutoff = time.time() - older_than * 86400 if older_than is not None else None
  # a run still being captured (unfinished and started within a day) is never pruned: its writer is not done with it
  live = {r["id"] for r in store.runs() if r.get("finished") is None and (r.get("started") or 0) > time.time() - 86400}
  old = [r["id"] for r in originals[keep:] if (cutoff is None or (r.get("started") or 0) < cutoff) and r["id"] not in live]
  doomed = old + [r["id"] for r in store.runs() if r.get("rerun_of") in old]
  if live: click.echo(f"replay: keeping run{'s' if len(live) > 1 else ''} {', '.join(map(str, sorted(live)))}: still being captured", err=True)
  from replay import revisions
  try: trees = revisions.cached_trees(revisions.repo_root()) if worktrees else []
  except RevisionError: trees = []
  if dry_run:
    captures = sum(sum(r["counts"].values()) for r in store.runs() if r["id"] in doomed)
    click.echo(f"would remove {len(doomed)} runs ({', '.join(map(str, sorted(doomed))) or 'none'}) with {captures} captures, the replays of them, "
               f"unreferenced blobs, and {len(trees)} cached worktrees and overlays")
    return
  gone = store.delete_runs(doomed) if doomed else {"blobs": store.delete_unreferenced_blobs()}
  store.vacuum()
  removed = _remove_trees() if worktrees else 0
  click.echo("removed " + ", ".join(f"{n} {what}" for what, n in gone.items()) + f", {removed} cached worktrees and overlays")


def _explain_groups(store: Store, summary: rpt.Summary, limit: int) -> dict[int, str]:
  """`--why` for the first capture of each changed schedule (or exec) group shown, against the replay's base."""
  base = summary.replay.get("base_commit")
  if not base: raise UsageMistake("--why needs a replay against a base revision (`replay diff --base REV`)")
  explained: dict[int, str] = {}
  for group in summary.groups():
    first = group[0]
    if len(explained) >= limit: break
    if first["status"] != "changed" or first["kind"] not in ("schedule", "exec"): continue
    cap = store.capture(first["capture_id"])
    if cap is None: continue
    try: explained[first["capture_id"]] = _why(store, cap, base).split("\n", 1)[-1]
    except HarnessError as e: explained[first["capture_id"]] = f"(could not trace it: {e.message})"
  return explained


def _why(store: Store, cap: dict, base: Optional[str]) -> str:
  from replay import revisions
  from replay.runner import replay_captures, RunOptions
  from replay.why import explain
  if cap["kind"] not in ("schedule", "exec"): raise UsageMistake(f"--why explains schedules: capture {cap['id']} is a {cap['kind']} capture "
                                                                 "(pick the schedule or exec capture at the same location)")
  if base is None:
    last = store.last_outcome(cap["id"])
    row = store.replay(last["replay_id"]) if last else None
    base = row.get("base_commit") if row else None
    if not base: raise UsageMistake(f"capture {cap['id']} was never replayed against a base revision; give one with --base")
  try:
    root = revisions.repo_root()
    sha = revisions.resolve(base, cwd=str(root))
    base_path = str(revisions.overlay(sha, root))
  except UnknownRevision as e: raise UsageMistake(str(e)) from None
  except RevisionError as e: raise HarnessError(str(e)) from None
  options = RunOptions(jobs=1, progress=False, trace=True)
  traces = []
  for path in (base_path, str(revisions.harness_root())):
    out = replay_captures(store, [cap], [path], {}, options, keep=False).outcomes[0]
    if "trace" not in out: raise HarnessError(f"could not trace capture {cap['id']} with {path}: {out.get('reason') or out['status']}")
    traces.append(out["trace"])
  return f"capture {cap['id']} [{cap['kind']}] {rpt.clean(cap['name'])} @ {rpt.clean(cap['location'])}, base {base} ({sha[:10]}):\n" \
         + rpt.clean(explain(*traces))


def _probe_env(folder: pathlib.Path, guard, boot: bool) -> dict[str, str]:
  """The environment that puts the probes of `guard`'s plan into processes (with `boot`: every Python process a
  command starts, through sitecustomize), recording into `folder`."""
  from replay import probes, revisions
  from replay.rerun import BOOT_DIR
  plan = folder / "plan.json"
  probes.write_plan(guard.plans, revisions.harness_root(), revisions.sut_packages(), plan)
  (folder / "hits").mkdir(exist_ok=True)
  env = {probes.PLAN_ENV: str(plan), probes.HITS_ENV: str(folder / "hits")}
  if boot:
    env["PYTHONPATH"] = os.pathsep.join([str(BOOT_DIR), str(revisions.harness_root()), *filter(None, [os.environ.get("PYTHONPATH")])])
  return env


def coverage_of_change(store: Store, captures: list[dict], base_sha: str, jobs, timeout):
  """The guard of the change since `base_sha`: which changed lines of the system under test run when the captures
  are replayed with the current tree."""
  import tempfile
  from replay import coverage_check, probes, revisions
  from replay.runner import replay_captures, RunOptions
  guard = coverage_check.measure_plan(base_sha, revisions.repo_root())
  if not guard.executable(): return guard
  with tempfile.TemporaryDirectory(prefix="replay-coverage-") as folder:
    options = RunOptions(jobs=jobs or max(1, os.cpu_count() or 1), timeout=timeout, progress=False)
    env = _probe_env(pathlib.Path(folder), guard, boot=False)
    replay_captures(store, captures, [str(revisions.harness_root())], {}, options, env_extra=env, keep=False)
    guard.ran = probes.hits(pathlib.Path(folder) / "hits")
  return guard


@cli.command("coverage")
@click.option("--base", required=True, help="The revision the change is measured against.")
@click.option("--merge-base", is_flag=True, help="Use the merge base of --base and HEAD.")
@selection_options
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help="Worker processes (default: all cores).")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=120.0, show_default=True, help="Seconds per capture.")
def coverage_cmd(base, merge_base, runs, kinds, names, location, ids, jobs, timeout):
  """Which lines of the system under test changed since --base, and which of them no capture's replay runs (lines
  that run only while a module is imported count as not run). Exit 0 either way; the gate measures the same on the
  captured command itself and fails on it."""
  from replay import coverage_check, revisions
  store = _store()
  caps, _ = select_captures(store, runs, kinds, names, location, ids)
  try: sha = revisions.resolve(base, merge_base, cwd=str(revisions.repo_root()))
  except UnknownRevision as e: raise UsageMistake(str(e)) from None
  except RevisionError as e: raise HarnessError(str(e)) from None
  guard = coverage_of_change(store, caps, sha, jobs, timeout)
  click.echo(coverage_check.describe(guard.to_json()))
  for path, lines in guard.unguarded().items(): click.echo(f"  {path}: {coverage_check.ranges(lines)}")


# ***** review *****

@cli.command()
@click.option("--replay", "replay_id", type=int, default=None, help="The replay whose changes to accept (default: the latest).")
@click.option("--id", "ids", type=int, multiple=True, help="Only these capture ids.")
@view_options
@click.option("--export", "export", is_flag=True, help="Also write every accepted change to the accepted-changes file (to commit).")
def accept(replay_id, ids, statuses, view_kinds, view_location, export):
  """Accept the kernel changes of a replay as expected for this change: later replays and the gate show them as
  accepted and do not fail on them (mismatches can never be accepted). --export writes replay-accepted.json."""
  from replay import accept as acc
  from replay.capture import git_state
  store = _store()
  summary = _stored_summary(store, replay_id, statuses or ("changed",), view_kinds, view_location)
  chosen = [o for o in summary.shown() if o["status"] == "changed" and (not ids or o["capture_id"] in ids)]
  refused = [o for o in summary.shown() if o["status"] != "changed" and (not ids or o["capture_id"] in ids)]
  if not chosen and not export: raise UsageMistake("the selection has no kernel changes to accept" + (f" ({len(refused)} other outcomes: only "
                                                   "changes can be accepted)" if refused else ""))
  base = summary.replay.get("base_commit")
  new = store.accept(acc.entries(chosen, git_state()[0], base))
  click.echo(f"accepted {len(chosen)} changes ({new} new) of replay {summary.replay['id']}" + (f"; {len(refused)} mismatches/errors cannot be "
                                                                                                "accepted" if refused else ""))
  if export:   # only this replay's acceptances: stale ones (a reverted experiment, another base) are not committed by accident
    path = _accept_file()
    current = {acc.key(o) for o in summary.outcomes if o["status"] == "changed"}
    try: mine = [e for e in store.accepted() + acc.read_file(path) if acc.applies(e, base) and (e["kind"], e["location"], e["fingerprint"]) in current]
    except acc.AcceptFileError as e: raise UsageMistake(str(e)) from None
    acc.write_file(path, mine)
    click.echo(f"wrote {len(acc.read_file(path))} accepted changes of replay {summary.replay['id']} to {path} (commit it with the change)")


@cli.command()
@click.option("--replay", "replay_id", type=int, default=None, help="The replay to review (default: the latest).")
def review(replay_id):
  """Walk the kernel changes of a replay one group at a time: [a]ccept, [s]kip, [d]iff in full, [q]uit."""
  from replay import accept as acc
  from replay.capture import git_state
  store = _store()
  summary = _stored_summary(store, replay_id, ("changed",))
  pending = [g for g in summary.groups() if not summary.is_accepted(g[0])]
  if not pending:
    click.echo(f"nothing to review: replay {summary.replay['id']} has no kernel changes that are not accepted")
    return
  accepted = 0
  for n, group in enumerate(pending, 1):
    click.echo(f"\n[{n}/{len(pending)}] " + rpt.render_group(group, max_lines=30))
    while True:
      choice = click.prompt("accept, skip, diff, quit", type=click.Choice(["a", "s", "d", "q"]), default="s", show_choices=True)
      if choice != "d": break
      echo_report(rpt.render_group(group, max_lines=None), "text", page=True)
    if choice == "q": break
    if choice == "a":
      store.accept(acc.entries(group, git_state()[0], summary.replay.get("base_commit")))
      accepted += len(group)
  click.echo(f"accepted {accepted} changes; `replay accept --export` writes them to the file to commit")


@cli.command()
@click.option("--good", required=True, help="A revision where the captures replay as they should (the search starts after it).")
@click.option("--bad", required=True, help="A later revision where their outcome is different.")
@selection_options
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help="Worker processes (default: all cores).")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=120.0, show_default=True, help="Seconds per capture.")
def bisect(good, bad, runs, kinds, names, location, ids, jobs, timeout):
  """Find the first commit between --good and --bad at which the selected captures replay differently (status or
  diff) than at --good, replaying them against each probed commit; ends with that commit's replay."""
  from replay import revisions
  from replay.bisect import first_change, signature
  from replay.runner import replay_captures, RunOptions
  store = _store()
  caps, cap_run = select_captures(store, runs, kinds, names, location, ids)
  try:
    root = revisions.repo_root()
    good_sha, bad_sha = revisions.resolve(good, cwd=str(root)), revisions.resolve(bad, cwd=str(root))
    commits = revisions.git("rev-list", "--first-parent", "--reverse", f"{good_sha}..{bad_sha}", cwd=str(root)).split()
  except UnknownRevision as e: raise UsageMistake(str(e)) from None
  except RevisionError as e: raise HarnessError(str(e)) from None
  if not commits: raise UsageMistake(f"{bad} is not a descendant of {good} (no commits between them on the first-parent line)")
  options = RunOptions(jobs=jobs or max(1, os.cpu_count() or 1), timeout=timeout, progress=False)

  def probe(sha: str):
    try: path = [str(revisions.overlay(sha, root))]
    except RevisionError as e: return (), f"cannot check it out ({e}); skipped", False
    outcomes = replay_captures(store, caps, path, {}, options, keep=False).outcomes
    counts = {st: sum(o["status"] == st for o in outcomes) for st in rpt.STATUSES}
    summary = ", ".join(f"{n} {st}" for st, n in counts.items() if n)
    # a commit where nothing replays at all (it does not import, say) tells nothing about the change: skip it
    if outcomes and counts["error"] + counts["incompatible"] == len(outcomes) and sha != good_sha:
      return (), f"{summary}: nothing replays at this commit; skipped", False
    return signature(outcomes), summary, True

  def subject(sha: str) -> str: return revisions.git("log", "-1", "--format=%h %s", sha, cwd=str(root))
  click.echo(f"bisect: {len(caps)} captures, {len(commits)} commits after {good} up to {bad} (about {max(1, len(commits).bit_length())} steps)")
  good_sig, good_summary, _ = probe(good_sha)
  click.echo(f"  good {subject(good_sha)}: {good_summary}")
  found = first_change(commits, probe, good_sig, lambda st: click.echo(
    f"  {'skipped' if st.skipped else 'differs' if st.differs else 'as good'} {subject(st.sha)}: {st.summary}"))
  skipped = f"\nskipped (could not be probed): {', '.join(subject(sha) for sha in found.skipped)}" if found.skipped else ""
  if found.ambiguous:
    click.echo(f"\nthe first change is in one of these commits (the ones before the last could not be probed):{skipped}")
    for sha in found.ambiguous: click.echo(f"  {subject(sha)} ({sha})")
    sys.exit(0)
  if found.first == len(commits):
    click.echo(f"no commit up to {bad} changes the outcome of these captures{skipped}")
    sys.exit(0)
  sha = commits[found.first]
  click.echo(f"\nthe captures replayed against the culprit {subject(sha)}:")
  summary = do_replay(store, caps, cap_run, sha, False, jobs, timeout, None, None, None)
  code, verdict = summary.verdict()
  store.finish_replay(summary.replay["id"], verdict, code)
  echo_report(rpt.render(summary, "text"), "text")
  click.echo(f"\nfirst commit that changes the outcome: {subject(sha)} ({sha}){skipped}")
  click.echo("its change against its parent:\n" + _commit_change(root, sha))
  sys.exit(0)


def _commit_change(root: pathlib.Path, sha: str, max_lines: int = 120) -> str:
  """`git show --stat` of a commit, then its diff in the system under test (cut after `max_lines` lines)."""
  from replay import revisions
  try:
    stat = revisions.git("show", "--stat", "--format=%H%n%an, %ad%n%n    %s", sha, cwd=str(root)).rstrip()
    diff = revisions.git("show", "--format=", sha, "--", *revisions.sut_packages(), cwd=str(root)).splitlines()
  except RevisionError as e: return f"(git show failed: {e})"
  if len(diff) > max_lines: diff = diff[:max_lines] + [f"... ({len(diff) - max_lines} more lines: git show {sha[:12]})"]
  return "\n".join([stat, "", *diff] if diff else [stat, "", "(no change in the system under test)"])


# ***** gate *****

NO_CHANGE_MARKER = "[no-kernel-change]"


def promised_no_change() -> tuple[bool, str]:
  """Whether the change promised no kernel change: the marker in the head commit message or in PR_TITLE."""
  return marked(NO_CHANGE_MARKER)


def marked(marker: str) -> tuple[bool, str]:
  """Whether `marker` is in PR_TITLE or the head commit message, and where."""
  if marker in os.getenv("PR_TITLE", ""): return True, "PR_TITLE"
  try:
    from replay.revisions import git
    if marker in git("log", "-1", "--format=%B"): return True, "the head commit message"
  except RevisionError: pass
  return False, ""


@cli.command(context_settings={"ignore_unknown_options": True})
@click.option("--base", required=True, help="The revision to compare with (e.g. origin/main).")
@click.option("--merge-base", is_flag=True, help="Use the merge base of --base and HEAD.")
@click.option("--expect-no-change", is_flag=True,
              help="Fail (exit 1) on kernel changes (changed, added or removed captures); also set by [no-kernel-change] in the head "
                   "commit or PR_TITLE.")
@click.option("--allow-incompatible", is_flag=True,
              help="Let through captures the base cannot load or call (incompatible: a new op, a renamed module); replay errors "
                   "(the compiler crashed or hung on a capture) still fail.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help="Worker processes (default: all cores).")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=120.0, show_default=True, help="Seconds per capture.")
@click.option("--junit", type=click.Path(dir_okay=False, writable=True), default=None, help="Write JUnit XML here.")
@click.option("--html", type=click.Path(dir_okay=False, writable=True), default=None, help="Write the HTML report here.")
@click.option("--rerun/--no-rerun", default=True, show_default=True,
              help="Also run the command with the base (alongside the capture) and compare the two runs end to end, which sees "
                   "changes before the graph (frontend, autograd, optimizers, dtype promotion, flag defaults); --no-rerun "
                   "replays the captured graphs only.")
@click.option("--fail-on-drift", is_flag=True, help="Fail (exit 3) when outputs differ bit for bit, even within tolerance.")
@click.option("--max-cost-increase", type=click.FloatRange(min=0), default=None,
              help="Fail (exit 1) when a changed kernel's static cost grows by more than this percentage.")
@click.option("--coverage/--no-coverage", default=True, show_default=True,
              help="Probe which changed lines of the system under test the captured command runs (after import); fail (1) when "
                   "fewer than [tool.replay] changed-lines-guarded percent (default 100) do.")
@click.option("--allow-unguarded", is_flag=True,
              help="Do not fail on changed lines no capture runs (they are still listed); also set by [allow-unguarded] in the head "
                   "commit or PR_TITLE.")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
def gate(base, merge_base, expect_no_change, allow_incompatible, jobs, timeout, junit, html, rerun, fail_on_drift, max_cost_increase, coverage,
         allow_unguarded, cmd):
  """Capture (the bundled corpus, or CMD after --), replay on --base, run the command with --base too and compare end
  to end, and apply the CI policy: output mismatches fail (3); kernel changes fail (1) only if the change promised
  none; replay errors, incompatible captures and a failed capture run fail (4)."""
  from replay import revisions
  from replay.capture import run_info
  try:
    root = revisions.repo_root()
    sha = revisions.resolve(base, merge_base, cwd=str(root))
  except UnknownRevision as e: raise UsageMistake(str(e)) from None
  except RevisionError as e: raise HarnessError(str(e)) from None
  promised, where = promised_no_change()
  if promised and not expect_no_change: click.echo(f"replay gate: {NO_CHANGE_MARKER} found in {where}: kernel changes fail", err=True)
  command = list(cmd) or [sys.executable, "-m", "scripts.workloads"]
  t0 = time.time()
  store = _store(create=True)
  run_id = store.add_run(**run_info(command))
  guard, probe_env, probe_dir = _plan_guard(sha, root) if coverage else (None, {}, None)
  try:
    code, failure_notes = run_capture_teed(command, store, run_id, probe_env)
    if guard is not None and probe_dir is not None:
      from replay import probes
      guard.ran = probes.hits(pathlib.Path(probe_dir.name) / "hits")
  finally:
    if probe_dir is not None: probe_dir.cleanup()
  counts = _finish_capture(store, run_id, code, True)
  if not sum(counts.values()):
    raise HarnessError(f"the captured command captured nothing: {' '.join(command)}" + (f" ({failure_notes[0]})" if failure_notes else ""))
  # the command runs with the base while the captured graphs replay (never two runs of the command at once: a
  # program may use fixed paths, as the DISK workloads do)
  base_run = _start_base_run(store, run_id, base, sha, root) if rerun else None
  # a base that hangs must not hang the gate: it gets five times what the capture took, and at least ten minutes
  if base_run is not None: base_run.timeout = max(600.0, 5 * (time.time() - t0))
  try:
    summary = do_replay(store, store.captures(run_ids=[run_id]), run_id, base, merge_base, jobs, timeout, None, None, None,
                        expect_no_change or promised, allow_incompatible, rerun=rerun, fail_on_drift=fail_on_drift,
                        max_cost_increase=max_cost_increase, base_runs={run_id: base_run} if base_run else None, extra_notes=failure_notes,
                        guard=_guard_policy(guard, sha, root, allow_unguarded))
  finally:
    if base_run is not None: base_run.kill()
  exit_code = finish(store, summary, "text", None)
  if junit: pathlib.Path(junit).write_text(rpt.render(summary, "junit"))
  if html: pathlib.Path(html).write_text(rpt.render(summary, "html"))
  if (step_summary := os.getenv("GITHUB_STEP_SUMMARY")):
    with open(step_summary, "a") as f: f.write(rpt.render(summary, "markdown") + "\n")
  click.echo(f"replay gate: {time.time() - t0:.1f}s, exit {exit_code}", err=True)
  sys.exit(exit_code)


def _plan_guard(sha: str, root: pathlib.Path):
  """(guard, environment, folder) to probe the changed lines of the system under test in the captured command."""
  import tempfile
  from replay import coverage_check
  try: guard = coverage_check.measure_plan(sha, root)
  except RevisionError as e: raise HarnessError(f"cannot measure which changed lines run: {e}") from None
  if not guard.executable(): return guard, {}, None
  folder = tempfile.TemporaryDirectory(prefix="replay-probes-")
  return guard, _probe_env(pathlib.Path(folder.name), guard, boot=True), folder


def _flags_with_the_same_default(names: set[str], sha: str, root: pathlib.Path) -> set[str]:
  """Which of the flags `names` have the same default in the current tree and at `sha` (asked in a process that
  imports the base's compiler)."""
  from replay import isolation, revisions
  from replay.capture import flag_defaults_json
  here = json.loads(flag_defaults_json())
  overlay = str(revisions.overlay(sha, root))
  env = {**os.environ, "PYTHONPATH": overlay, isolation.ROOT_ENV: overlay, isolation.PACKAGES_ENV: ",".join(revisions.sut_packages())}
  code = "import json\nfrom replay import isolation\nisolation.install()\nfrom replay.replayers import flag_defaults\nprint(json.dumps(flag_defaults()))"
  proc = subprocess.run([sys.executable, "-c", code], cwd=overlay, env=env, capture_output=True, text=True, timeout=120)
  try: there = json.loads(proc.stdout.strip().splitlines()[-1]) or {}
  except (ValueError, IndexError): return set()
  return {name for name in names if name in here and name in there and here[name] == there[name]}


def _guard_policy(guard, sha: str, root: pathlib.Path, allow_unguarded: bool) -> Optional[dict]:
  """What the replay stores about the guard of the change, with the threshold and whether unguarded lines may pass."""
  if guard is None: return None
  from replay import coverage_check
  try: limit = coverage_check.threshold(root)
  except RevisionError as e: raise UsageMistake(str(e)) from None
  if guard.flags(): guard.settle_flags(_flags_with_the_same_default(guard.flags(), sha, root))
  allowed, where = (True, "--allow-unguarded") if allow_unguarded else marked(coverage_check.ALLOW_MARKER)
  if allowed and guard.unguarded(): click.echo(f"replay gate: unguarded changed lines allowed by {where}", err=True)
  return {**guard.to_json(), "threshold": limit, "allowed": allowed}


def _start_base_run(store: Store, run_id: int, base: str, sha: str, root: pathlib.Path):
  """The command of `run_id` started with the base's system under test (it runs while the captures replay)."""
  from replay import revisions
  from replay.capture import flag_defaults_json
  from replay.rerun import start_again, RerunError
  try: overlay = revisions.overlay(sha, root)
  except RevisionError as e: raise HarnessError(str(e)) from None
  click.echo(f"replay gate: running the command with {base} ({sha[:10]}) while the captures replay...", err=True)
  try: return start_again(store, store.run(run_id), f"{base} ({sha[:10]})", str(overlay), revisions.sut_packages(), _rerun_logs(store),
                          flag_names=set(json.loads(flag_defaults_json())))
  except RerunError as e: raise UsageMistake(f"--rerun: {e}") from None


def _rerun_logs(store: Store) -> pathlib.Path: return pathlib.Path(store.path).resolve().parent / "reruns"


@cli.command()
@click.option("--base", required=True, help="The revision to replay the generated programs on.")
@click.option("--budget", type=click.FloatRange(min=1), default=300.0, show_default=True,
              help="Seconds to spend: sets how many programs run (about 0.5 s each, capture and replay included).")
@click.option("--count", type=click.IntRange(min=1), default=None, help="Run exactly this many programs (overrides --budget).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the program stream (the same programs at every revision).")
@click.option("--save", "save_dir", type=click.Path(file_okay=False), default=None,
              help="Write each program that shows a difference here as a standalone pytest file (it can join the corpus).")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help="Worker processes (default: all cores).")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=120.0, show_default=True, help="Seconds per capture.")
@click.option("--format", "fmt", type=click.Choice(rpt.FORMATS), default="text", show_default=True, help="Report format on stdout.")
@click.option("--output", type=click.Path(dir_okay=False, writable=True), default=None, help="Also write the report to this file.")
def fuzz(base, budget, count, seed, save_dir, jobs, timeout, fmt, output):
  """Generate random Tensor programs (scripts/fuzz), capture them here and replay them on --base, plain and end to
  end: reported like `replay diff`, each program's captures located as fuzz:SEED:INDEX."""
  from replay import fuzzing, revisions
  try: revisions.resolve(base, False, cwd=str(revisions.repo_root()))
  except UnknownRevision as e: raise UsageMistake(str(e)) from None
  except RevisionError as e: raise HarnessError(str(e)) from None
  programs = fuzzing.program_count(budget, count)
  click.echo(f"replay fuzz: {programs} programs of seed {seed}", err=True)
  code, run_id, counts = run_capture(fuzzing.capture_command(seed, programs))
  if code != 0: raise HarnessError(f"the fuzz programs failed to run (exit code {code})")
  if not sum(counts.values()): raise HarnessError("the fuzz programs captured nothing")
  store = _store()
  summary = do_replay(store, store.captures(run_ids=[run_id]), run_id, base, False, jobs, timeout, None, None, None, rerun=True)
  exit_code = finish(store, summary, fmt, output)
  if save_dir:
    differing = fuzzing.differing_programs(store.outcomes(summary.replay["id"]))
    for path in fuzzing.save_programs(differing, pathlib.Path(save_dir)): click.echo(f"replay fuzz: saved {path}", err=True)
    if not differing: click.echo("replay fuzz: no program differs; nothing saved", err=True)
  sys.exit(exit_code)


class Interrupted(BaseException):
  """Ctrl-C. Not a KeyboardInterrupt, which click turns into "Aborted!" and exit 1 (the kernels-changed code)."""


def _interrupt(*_) -> None: raise Interrupted()


def main() -> None:
  # SIGTERM and SIGINT unwind like exceptions, so that the runner's cleanup kills its workers (also one stuck in a
  # kernel); a replay they cut short stays unfinished in the database, which reports it INCOMPLETE
  signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
  signal.signal(signal.SIGINT, _interrupt)
  try: cli(prog_name="replay")
  except (Interrupted, KeyboardInterrupt):
    click.echo("replay: interrupted", err=True)
    sys.exit(130)
  except (StoreError, sqlite3.Error) as e:   # the database failed under a command (a full disk, an I/O error): one line, exit 4
    click.echo(f"replay: error: {e}" if isinstance(e, StoreError) else f"replay: error: the database failed: {type(e).__name__}: {e}", err=True)
    sys.exit(EXIT_HARNESS)


if __name__ == "__main__": main()
