"""The options of the `replay` command line, each declared once: commands compose them by name with `options(...)`.

Groups: SELECTION (which captures), POLICY (how they replay and what fails the verdict, `session.Policy`'s fields),
VIEW (which outcomes a report shows).
"""
from __future__ import annotations
import click
from replay import report as rpt


def _count_or_percent(ctx, param, value):
  from replay.session import count_or_percent
  try: return count_or_percent(value)
  except ValueError as e: raise click.BadParameter(str(e)) from None


_o = click.option
OPTIONS = {
  # selection of captures
  "runs": _o("--run", "runs", type=int, multiple=True, help="Capture run id(s) to replay (default: the latest run)."),
  "kinds": _o("--kind", "kinds", type=click.Choice(rpt.KINDS), multiple=True, help="Only these kinds."),
  "names": _o("--name", "names", multiple=True, help="Only captures with this name."),
  "location": _o("--location", default=None, help="Only captures whose location contains this text."),
  "ids": _o("--id", "ids", type=int, multiple=True, help="Only these capture ids."),
  "shard": _o("--shard", default=None, metavar="I/N",
              help="Replay only shard I of N of the selection (deterministic, disjoint); join the shards with `replay "
                   "merge`."),
  # revisions
  "base": _o("--base", required=True, help="The revision to replay on (branch, tag, sha, HEAD~N; e.g. origin/main)."),
  "merge_base": _o("--merge-base", is_flag=True, help="Use the merge base of --base and HEAD."),
  # policy
  "jobs": _o("--jobs", "-j", type=click.IntRange(min=1), default=None, help="Worker processes (default: all cores)."),
  "timeout": _o("--timeout", type=click.FloatRange(min=0.1), default=120.0, show_default=True,
                help="Seconds per capture before it is an error."),
  "worker_memory": _o("--worker-memory", type=click.IntRange(min=0), default=8192, show_default=True,
                      help="Address-space limit of each replay worker in MiB (0: none); a capture that needs more is "
                           "an error."),
  "max_changed": _o("--max-changed", callback=_count_or_percent, default=None, metavar="COUNT|PCT%",
                    help="Stop early after this many (or this percent, e.g. 5%) changed or mismatched captures."),
  "expect_no_change": _o("--expect-no-change", is_flag=True,
                         help="Fail (exit 1) if any kernel changed (changed, added or removed); the gate "
                         "also takes it from [no-kernel-change] in the head commit or PR_TITLE."),
  "allow_incompatible": _o("--allow-incompatible", is_flag=True,
                           help="Let through captures the base cannot load or call (a new op, a new "
                           "contract version); replay errors (the compiler crashed or hung on a capture) still fail."),
  "fail_on_drift": _o("--fail-on-drift", is_flag=True,
                      help="Fail (exit 3) when outputs differ bit for bit, even within tolerance."),
  "max_cost_increase": _o("--max-cost-increase", type=click.FloatRange(min=0), default=None,
                          help="Fail (exit 1) when a changed kernel's static cost grows by more than this percentage "
                               "(e.g. 10)."),
  "rtol": _o("--rtol", type=float, default=None, help="Relative tolerance for float outputs (all float dtypes)."),
  "atol": _o("--atol", type=float, default=None, help="Absolute tolerance for float outputs (all float dtypes)."),
  # output
  "fmt": _o("--format", "fmt", type=click.Choice(rpt.FORMATS), default="text", show_default=True,
            help="Report format on stdout."),
  "output": _o("--output", type=click.Path(dir_okay=False, writable=True), default=None,
               help="Also write the report to this file."),
  "show_all": _o("--all", "show_all", is_flag=True,
                 help="Show every group of differences, each in full (no truncation)."),
  "replay_id": _o("--replay", "replay_id", type=int, default=None, help="The replay (default: the latest)."),
  "statuses": _o("--status", "statuses", type=click.Choice(rpt.STATUSES), multiple=True,
                 help="Only outcomes with this status (repeatable)."),
  "view_kinds": _o("--kind", "view_kinds", type=click.Choice(rpt.KINDS), multiple=True,
                   help="Only captures of this kind (repeatable)."),
  "view_location": _o("--location", "view_location", default=None,
                      help="Only captures whose location contains this text."),
}
SELECTION = ("runs", "kinds", "names", "location", "ids")
POLICY = ("jobs", "timeout", "worker_memory", "max_changed", "expect_no_change", "allow_incompatible", "fail_on_drift",
          "max_cost_increase",
          "rtol", "atol")
VIEW = ("statuses", "view_kinds", "view_location")


def options(*names: str):
  def apply(f):
    for name in reversed(names): f = OPTIONS[name](f)
    return f
  return apply


def split(kwargs: dict, names: tuple) -> dict: return {k: kwargs.pop(k) for k in names if k in kwargs}
