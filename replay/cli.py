"""The `replay` command line (also `python -m replay`): a thin click layer over `replay/session.py`.

Each option is declared once (`replay/cli_options.py`) and composed per command; the database comes through the
click context.
Exit codes: 0 ok, 1 kernels changed although the change promised none, 2 usage error, 3 outputs mismatch,
4 replay errors, incompatible captures, or the harness itself failed.
"""
from __future__ import annotations
import os, pathlib, shutil, signal, sqlite3, sys
from typing import Optional
import click
from db import StoreError
from replay import report as rpt
from replay.cli_options import SELECTION, POLICY, VIEW, options, split
from replay.session import Session, Policy, ReplayError


def echo_report(text: str, fmt: str = "text", page: bool = False, output: Optional[str] = None) -> None:
  """A report on stdout: on a terminal (and without NO_COLOR) a text report is colored, and with `page` a report
  longer than the screen goes through the pager; with `output` it is also written there."""
  if output: pathlib.Path(output).write_text(text)
  terminal = sys.stdout.isatty()
  if fmt == "text" and terminal and not os.environ.get("NO_COLOR"): text = rpt.colorize(text)
  if page and terminal and text.count("\n") > shutil.get_terminal_size().lines: click.echo_via_pager(text)
  else: click.echo(text)


def err(text: str) -> None: click.echo(text, err=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", "db_path", envvar="REPLAY_DB", default=None,
              help="Database file (env REPLAY_DB, default .replay/replay.db).")
@click.pass_context
def cli(ctx, db_path: Optional[str]):
  """Process replay: capture what the compiler does on real workloads, replay it against another revision, and see
  exactly which kernels and which results a change alters."""
  ctx.obj = Session(db_path, log=err)


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_obj
def capture(s: Session, cmd):
  """Run CMD with capture on: every schedule, kernel render and realize it does is stored (replay capture -- CMD...)."""
  code, run_id, counts = s.capture(list(cmd))
  s.log_capture(run_id, counts)
  if code != 0: err(f"replay: the captured command exited with code {code}")
  if not sum(counts.values()): err("replay: warning: the command captured nothing (does it use the compiler?)")
  if code == 0 and (lost := (s.store().run(run_id) or {}).get("lost")):
    raise ReplayError(f"{lost} captures of run {run_id} could not be stored (see the warning above); the run is "
                      f"incomplete")
  sys.exit(code if code >= 0 else 128 - code)  # killed by a signal: the shell's convention


@cli.command()
@options(*SELECTION, "shard", *POLICY, "fmt", "output")
@click.pass_obj
def run(s: Session, shard, fmt, output, **kw):
  """Replay captures against the working tree (a determinism check right after capturing)."""
  summary = s.diff(None, policy=Policy(**split(kw, POLICY)), shard=shard, **kw)
  echo_report(rpt.render(summary, fmt), fmt, output=output)
  sys.exit(summary.verdict()[0])


@cli.command()
@options("base", "merge_base")
@click.option("--rerun", is_flag=True,
              help="Also run the captured commands again with the base (and once more with the current tree, "
              "to tell nondeterminism from regressions) and compare the runs: catches frontend, autograd and "
              "flag-default changes.")
@click.option("--reduce", "reduce_budget", type=click.FloatRange(min=1), default=None, metavar="SECONDS",
              help="Then reduce the first capture of each group that mismatches (or whose schedule changed) to a "
              "standalone test, within this many seconds in total (`replay reduce`).")
@options(*SELECTION, "shard", *POLICY, "fmt", "output")
@click.pass_obj
def diff(s: Session, base, merge_base, rerun, reduce_budget, shard, fmt, output, **kw):
  """Replay captures with the compiler of another revision; base is `-`, captured is `+` in the diffs."""
  policy = Policy(**split(kw, POLICY))
  summary = s.diff(base, merge_base, policy, rerun, shard, **kw)
  echo_report(rpt.render(summary, fmt), fmt, output=output)
  if reduce_budget: s.reduce_groups(summary, reduce_budget, policy.tolerances())
  sys.exit(summary.verdict()[0])


@cli.command()
@click.argument("results", nargs=-1, required=True, type=click.Path(dir_okay=False))
@options("fmt", "output", "show_all")
@click.pass_obj
def merge(s: Session, results, fmt, output, show_all):
  """Join the shards of one replay (`run`/`diff --shard I/N`) into one report and one verdict. RESULTS are the shards'
  databases (their latest replay) or JSON reports (`--format json --output`), in any order; a missing shard makes the
  verdict INCOMPLETE (exit 4)."""
  summary = s.merge(results, show_all)
  echo_report(rpt.render(summary, fmt), fmt, output=output)
  sys.exit(summary.verdict()[0])


@cli.command("list")
@options(*SELECTION)
@click.option("--limit", type=int, default=50, show_default=True, help="Show at most this many captures (0: all).")
@click.pass_obj
def list_(s: Session, limit, **selection):
  """List captures (the latest run by default)."""
  click.echo(rpt.captures_table(s.select(**selection)[0], limit))


@cli.command()
@click.argument("capture_id", type=int, required=False)
@options("replay_id")
@click.option("--why", is_flag=True,
              help="Name the first rewrite rule whose application differs between the base and this tree.")
@click.option("--base", "why_base", default=None,
              help="With --why: the base revision (default: the base of the capture's last replay).")
@options(*VIEW)
@click.pass_obj
def show(s: Session, capture_id, replay_id, why, why_base, statuses, view_kinds, view_location):
  """Show one capture (its AST or source, flags, location, the last outcome's diff), or without CAPTURE_ID every
  difference of a replay in full, most severe first, selected with --status/--kind/--location."""
  if capture_id is None:
    summary = s.stored_summary(replay_id, statuses, view_kinds, view_location, show_all=True, require_matches=True)
    return echo_report(rpt.render(summary, "text"), page=True)
  click.echo(s.why(s.capture_row(capture_id), why_base) if why else s.capture_text(capture_id))


@cli.command()
@click.argument("capture_id", type=int)
@click.option("--base", default=None, help="The base revision (default: the base of the capture's last replay).")
@click.option("--budget", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="Seconds to spend shrinking; the best graph found by then is kept.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Folder for the pytest file (default: `reduced/` beside the database).")
@options("rtol", "atol")
@click.pass_obj
def reduce(s: Session, capture_id, base, budget, out_dir, rtol, atol):
  """Shrink a capture that differs at the base to a small graph that still differs, and write it as a standalone
  pytest file that fails with the working tree and passes at the base."""
  click.echo(s.reduce(s.capture_row(capture_id), base, budget, out_dir, Policy(rtol=rtol, atol=atol).tolerances()))


@cli.command()
@options("replay_id", "fmt")
@click.option("--output", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write to this file instead of stdout.")
@options("show_all")
@click.option("--why", is_flag=True,
              help="Name the rewrite rule behind each changed schedule group (replays it with tracing; text and html).")
@click.option("--why-limit", type=click.IntRange(min=1), default=10, show_default=True,
              help="Explain at most this many groups.")
@options(*VIEW)
@click.pass_obj
def report(s: Session, replay_id, fmt, output, show_all, statuses, view_kinds, view_location, why, why_limit):
  """Render a stored replay as text, markdown, json, junit or html; differences most severe first, identical ones
  grouped. The verdict (and the exit code) is the replay's, whatever the filters show."""
  summary = s.stored_summary(replay_id, statuses, view_kinds, view_location, show_all, require_matches=True)
  if why: summary.explanations = s.explain_groups(summary, why_limit)
  text = rpt.render(summary, fmt)
  if output:
    pathlib.Path(output).write_text(text)
    click.echo(f"wrote {fmt} report of replay {summary.replay['id']} to {output}")
  else: echo_report(text, fmt, page=True)
  sys.exit(summary.verdict()[0])   # the stored replay's verdict, under the policy it ran with


@cli.command()
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
def reset(s: Session, yes):
  """Delete every capture, replay and blob from the database, and the cached worktrees and overlays."""
  if not yes and not click.confirm(f"delete everything in {s.store(create=True).path} and the cached worktrees?"):
    sys.exit(0)
  click.echo(s.reset())


@cli.command()
@click.option("--limit", type=int, default=20, show_default=True,
              help="Show at most this many runs and replays (0: all).")
@click.pass_obj
def runs(s: Session, limit):
  """List capture runs (command, commit, how it ended, captures) and replays (base, verdict), newest first."""
  click.echo(rpt.runs_table(s.store().runs(), s.store().replays(), limit))


@cli.command()
@click.option("--keep", type=click.IntRange(min=0), default=5, show_default=True,
              help="Keep this many of the newest capture runs.")
@click.option("--older-than", "older_than", type=click.FloatRange(min=0), default=None,
              help="Only prune runs older than this many days.")
@click.option("--worktrees/--no-worktrees", default=True, show_default=True,
              help="Also remove the cached worktrees and overlays.")
@click.option("--dry-run", is_flag=True, help="Say what would be removed, remove nothing.")
@click.pass_obj
def prune(s: Session, keep, older_than, worktrees, dry_run):
  """Remove old capture runs (with their reruns, captures, outcomes and replays), blobs nothing refers to (packs left
  mostly empty are written again, smaller), and the cached worktrees and overlays."""
  click.echo(s.prune(keep, older_than, worktrees, dry_run))


@cli.command("coverage")
@options("base", "merge_base", *SELECTION, "jobs", "timeout")
@click.pass_obj
def coverage_cmd(s: Session, base, merge_base, jobs, timeout, **selection):
  """Which lines of the system under test changed since --base, and which of them no capture's replay runs (lines
  that run only while a module is imported count as not run). Exit 0 either way; the gate measures the same on the
  captured command itself and fails on it."""
  from replay.session import resolve
  click.echo(s.coverage(s.select(**selection)[0], resolve(base, merge_base)[1],
                        Policy(jobs=jobs, timeout=timeout)).report())


@cli.command()
@options("replay_id", "ids", *VIEW)
@click.option("--export", "export", is_flag=True,
              help="Also write every accepted change to the accepted-changes file (to commit).")
@click.pass_obj
def accept(s: Session, replay_id, ids, statuses, view_kinds, view_location, export):
  """Accept the kernel changes of a replay as expected for this change: later replays and the gate show them as
  accepted and do not fail on them (mismatches can never be accepted). --export writes replay-accepted.json."""
  summary = s.stored_summary(replay_id, statuses or ("changed",), view_kinds, view_location)
  for line in s.accept(summary, ids, export): click.echo(line)


@cli.command()
@options("replay_id")
@click.pass_obj
def review(s: Session, replay_id):
  """Walk the kernel changes of a replay one group at a time: [a]ccept, [s]kip, [d]iff in full, [q]uit."""
  summary = s.stored_summary(replay_id, ("changed",))
  pending = [g for g in summary.groups() if not summary.is_accepted(g[0])]
  if not pending:
    return click.echo(f"nothing to review: replay {summary.replay['id']} has no kernel changes that are not accepted")
  accepted = 0
  for n, group in enumerate(pending, 1):
    click.echo(f"\n[{n}/{len(pending)}] " + rpt.render_group(group, max_lines=30))
    while (choice := click.prompt("accept, skip, diff, quit", type=click.Choice(["a", "s", "d", "q"]), default="s",
                                  show_choices=True)) == "d":
      echo_report(rpt.render_group(group, max_lines=None), page=True)
    if choice == "q": break
    if choice == "a": s.accept_group(summary, group); accepted += len(group)
  click.echo(f"accepted {accepted} changes; `replay accept --export` writes them to the file to commit")


@cli.command()
@click.option("--good", required=True,
              help="A revision where the captures replay as they should (the search starts after it).")
@click.option("--bad", required=True, help="A later revision where their outcome is different.")
@options(*SELECTION, "jobs", "timeout")
@click.pass_obj
def bisect(s: Session, good, bad, jobs, timeout, **selection):
  """Find the first commit between --good and --bad at which the selected captures replay differently (status or
  diff) than at --good, replaying them against each probed commit; ends with that commit's replay."""
  caps, cap_run = s.select(**selection)
  s.bisect(good, bad, caps, cap_run, Policy(jobs=jobs, timeout=timeout), click.echo)


@cli.command(context_settings={"ignore_unknown_options": True})
@options("base", "merge_base", "expect_no_change", "allow_incompatible", "jobs", "timeout")
@click.option("--junit", type=click.Path(dir_okay=False, writable=True), default=None, help="Write JUnit XML here.")
@click.option("--html", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the HTML report here.")
@click.option("--rerun/--no-rerun", default=True, show_default=True,
              help="Also run the command with the base (alongside the capture) and compare the two runs end to end, "
                   "which sees "
                   "changes before the graph (frontend, autograd, optimizers, dtype promotion, flag defaults); "
                   "--no-rerun "
                   "replays the captured graphs only.")
@options("fail_on_drift", "max_cost_increase")
@click.option("--coverage/--no-coverage", default=True, show_default=True,
              help="Probe which changed lines of the system under test the captured command runs (after import); fail "
                   "(1) when "
                   "fewer than [tool.replay] changed-lines-guarded percent (default 100) do.")
@click.option("--allow-unguarded", is_flag=True,
              help="Do not fail on changed lines no capture runs (they are still listed); also set by "
              "[allow-unguarded] in the head commit or PR_TITLE.")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
@click.pass_obj
def gate(s: Session, base, merge_base, junit, html, rerun, coverage, allow_unguarded, cmd, **policy):
  """Capture (the bundled corpus, or CMD after --), replay on --base, run the command with --base too and compare end
  to end, and apply the CI policy: output mismatches fail (3); kernel changes fail (1) only if the change promised
  none; replay errors, incompatible captures and a failed capture run fail (4)."""
  import time
  t0 = time.time()
  command = list(cmd) or [sys.executable, "-m", "scripts.workloads"]
  summary = s.gate(base, command, merge_base, Policy(**policy), rerun, coverage, allow_unguarded)
  echo_report(rpt.render(summary, "text"))
  rpt.write_reports(summary, junit, html, markdown_appended_to=os.getenv("GITHUB_STEP_SUMMARY"))
  code = summary.verdict()[0]
  err(f"replay gate: {time.time() - t0:.1f}s, exit {code}")
  sys.exit(code)


@cli.command()
@options("base")
@click.option("--budget", type=click.FloatRange(min=1), default=300.0, show_default=True,
              help="Seconds to spend: sets how many programs run (about 0.5 s each, capture and replay included).")
@click.option("--count", type=click.IntRange(min=1), default=None,
              help="Run exactly this many programs (overrides --budget).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the program stream (the same programs at every revision).")
@click.option("--save", "save_dir", type=click.Path(file_okay=False), default=None,
              help="Write each program that shows a difference here as a standalone pytest file (it can join the "
                   "corpus).")
@options("jobs", "timeout", "fmt", "output")
@click.pass_obj
def fuzz(s: Session, base, budget, count, seed, save_dir, jobs, timeout, fmt, output):
  """Generate random Tensor programs (scripts/fuzz), capture them here and replay them on --base, plain and end to
  end: reported like `replay diff`, each program's captures located as fuzz:SEED:INDEX."""
  from replay import fuzzing
  summary = s.fuzz(base, seed, fuzzing.program_count(budget, count), Policy(jobs=jobs, timeout=timeout), save_dir)
  echo_report(rpt.render(summary, fmt), fmt, output=output)
  sys.exit(summary.verdict()[0])


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
    err("replay: interrupted")
    sys.exit(130)
  except ReplayError as e:
    err(f"replay: error: {e}")
    sys.exit(e.exit_code)
  # the database failed under a command (a full disk, an I/O error): one line, exit 4
  except (StoreError, sqlite3.Error) as e:
    err(f"replay: error: {e}" if isinstance(e, StoreError)
        else f"replay: error: the database failed: {type(e).__name__}: {e}")
    sys.exit(rpt.EXIT_HARNESS)


if __name__ == "__main__": main()
