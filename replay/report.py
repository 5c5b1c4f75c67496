"""Reports of a replay: the verdict policy and every output format (text, markdown, json, junit, html).

All output of the command line about outcomes goes through here.
"""
from __future__ import annotations
import difflib, html, json, os, re, time
from collections import Counter
from typing import Optional
from dataclasses import dataclass, field
from xml.etree import ElementTree as ET
from tabulate import tabulate

from replay.statuses import STATUSES, CHANGES, SEVERITY_ORDER
KINDS = ("schedule", "kernel", "exec")
EXIT_OK, EXIT_CHANGED, EXIT_USAGE, EXIT_MISMATCH, EXIT_HARNESS = 0, 1, 2, 3, 4
FORMATS = ("text", "markdown", "json", "junit", "html")
JSON_SCHEMA = "replay-report/1"


# every field below can come from a database someone else wrote: control characters (terminal escape sequences,
# characters XML cannot hold) are shown as \xNN, HTML is escaped, and markdown fences outgrow their content
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(value) -> str:
  """`value` as text without control characters (newlines and tabs stay)."""
  return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))


def esc(value) -> str: return html.escape(clean(value))


def _fenced(text: str, info: str = "") -> list[str]:
  """A markdown code block that `text` cannot close: the fence is longer than any run of backticks in it."""
  longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
  fence = "`" * max(3, longest + 1)
  return [fence + info, text, fence]


@dataclass
class Summary:
  replay: dict
  outcomes: list[dict]
  expect_no_change: bool = False
  allow_incompatible: bool = False
  capture_runs: list = field(default_factory=list)   # the runs the replayed captures come from
  fail_on_drift: bool = False
  max_cost_increase: Optional[float] = None   # a fraction: changed captures whose cost grows more than this fail
  # what the reader asked to see (the verdict always covers every outcome): statuses, kinds, a location substring
  view: dict = field(default_factory=dict)
  show_all: bool = False
  accepted: set = field(default_factory=set)   # (kind, location, fingerprint) of changes a reviewer accepted
  # a merge of shards (replay/shards.py) without these shard numbers
  missing_shards: list = field(default_factory=list)
  explanations: dict = field(default_factory=dict)     # capture id -> the rule attribution of `--why` (replay/why.py)
  # the gate's measure of which changed lines ran (replay/coverage_check.py Guard.to_json)
  guard: Optional[dict] = None
  rerun_failures: list = field(default_factory=list)   # end-to-end reruns that failed twice (replay/rerun.py)
  rerun_incompatible: list = field(default_factory=list)   # the base raised on the program twice: it cannot run it

  @staticmethod
  def from_row(replay: dict, outcomes: list[dict], capture_runs: Optional[list] = None) -> "Summary":
    """The summary of a stored replay under the policy it ran with."""
    try: policy = json.loads(replay.get("policy") or "{}")
    except ValueError: policy = {}
    if not isinstance(policy, dict): policy = {}
    guard = policy.get("guard") if isinstance(policy.get("guard"), dict) else None
    failures = policy.get("rerun_failures") if isinstance(policy.get("rerun_failures"), list) else []
    incompatible = policy.get("rerun_incompatible") if isinstance(policy.get("rerun_incompatible"), list) else []
    return Summary(replay, outcomes, bool(policy.get("expect_no_change")), bool(policy.get("allow_incompatible")),
                   list(capture_runs or []),
                   bool(policy.get("fail_on_drift")), _fraction(policy.get("max_cost_increase")), guard=guard,
                   rerun_failures=[clean(f) for f in failures], rerun_incompatible=[clean(f) for f in incompatible])

  def capture_problem(self) -> Optional[str]:
    """How a captured command failed, if one did: the captures then describe only part of the program."""
    for run in self.capture_runs:
      if isinstance(run.get("lost"), int) and run["lost"] > 0:
        return f"{run['lost']} captures of run {run['id']} could not be stored"
      code = run.get("exit_code")
      if isinstance(code, int) and code < 0:
        return f"the captured command of run {run['id']} was killed by signal {-code}"
      if isinstance(code, int) and code > 0: return f"the captured command of run {run['id']} exited with code {code}"
    return None

  def missing(self) -> int:
    """Selected captures without an outcome: the replay was interrupted (0 when it stopped early on purpose)."""
    selected = self.replay.get("selected")
    if not isinstance(selected, int): return 0
    try: policy = json.loads(self.replay.get("policy") or "{}")
    except ValueError: policy = {}
    if isinstance(policy, dict) and policy.get("stopped_early"): return 0   # --max-changed stopped it on purpose
    return max(0, selected - sum(1 for o in self.outcomes if o["status"] != "removed"))   # removed: the base's captures

  def mark_accepted(self) -> None:
    """Tag the outcomes a reviewer accepted, so that every format shows it."""
    for o in self.outcomes: o["accepted"] = self.is_accepted(o)

  def __post_init__(self):
    # a status this harness does not know (a hand-edited database) counts as an error, with the reason saying so
    self.outcomes = [o if o["status"] in STATUSES
                     else {**o, "status": "error", "reason": f"unknown status {clean(o['status'])!r}; "
                                                        + (o.get("reason") or "")} for o in self.outcomes]

  @property
  def counts(self) -> dict[str, dict[str, int]]:
    out = {k: {s: 0 for s in STATUSES} for k in KINDS}
    for o in self.outcomes: out.setdefault(o["kind"], {s: 0 for s in STATUSES})[o["status"]] += 1
    return out

  def totals(self) -> dict[str, int]:
    return {s: sum(c[s] for c in self.counts.values()) for s in STATUSES}

  def verdict(self) -> tuple[int, str]:
    """(exit code, one-line verdict) under the policy of DESIGN.md; a replay that did not finish is INCOMPLETE."""
    code, line = self._policy_verdict()
    if (problem := self.capture_problem()):
      return EXIT_HARNESS, f"FAIL: {problem}, so its captures are incomplete; the replay of what was captured: {line}"
    if self.rerun_failures:
      return EXIT_HARNESS, f"FAIL: {self.rerun_failures[0]}; the end-to-end comparison is incomplete; so far: {line}"
    if self.rerun_incompatible and not self.allow_incompatible:
      return EXIT_HARNESS, f"FAIL: {self.rerun_incompatible[0]} (--allow-incompatible lets this through); {line}"
    if self.missing_shards:
      return (EXIT_HARNESS,
              f"INCOMPLETE: shard{'s' if len(self.missing_shards) > 1 else ''} "
              f"{', '.join(map(str, self.missing_shards))} missing from the merge; the shards given: {line}")
    if (missing := self.missing()):
      n = len(self.outcomes)
      return (EXIT_HARNESS,
              f"INCOMPLETE: replayed {n} of {n + missing} selected captures (the replay did not finish); "
              f"so far: {line}")
    return code, line

  def _policy_verdict(self) -> tuple[int, str]:
    t = self.totals()
    n = len(self.outcomes)
    if n == 0: return EXIT_HARNESS, "FAIL: nothing was replayed"
    if t["mismatch"]: return EXIT_MISMATCH, f"FAIL: {t['mismatch']} of {n} captures produce different outputs"
    if t["error"] or (t["incompatible"] and not self.allow_incompatible):
      allowed = (" (--allow-incompatible lets incompatible captures through, not errors)" if self.allow_incompatible
                 and t["error"] else "")
      return (EXIT_HARNESS,
              f"FAIL: {t['error']} replay errors and {t['incompatible']} incompatible captures of {n}{allowed}")
    if (unguarded := self.unguarded_line()) is not None: return EXIT_CHANGED, unguarded
    if self.max_cost_increase is not None and (over := [g for o, g in self.slower() if g > self.max_cost_increase
                                                        and not self.is_accepted(o)]):
      return EXIT_CHANGED, (f"FAIL: {len(over)} of {n} captures cost more than --max-cost-increase "
                            f"{self.max_cost_increase * 100:g}% allows "
                            f"(up to {_pct(max(over))})")
    if self.fail_on_drift and (d := self.drift()):
      return (EXIT_MISMATCH,
              f"FAIL: {d['captures']} of {n} captures drift within tolerance (at most {d['max_ulp']} ulp), and "
              f"--fail-on-drift was given")
    changes = sum(t[s] for s in CHANGES)
    accepted = changes - (unaccepted := self.unaccepted_changes())
    note = f" ({accepted} accepted)" if accepted else ""
    what = _changes_text(t)
    if unaccepted and self.expect_no_change:
      return (EXIT_CHANGED,
              f"FAIL: {unaccepted} captures changed kernels{' not accepted' if accepted else ''} ({what}), but this "
              f"change promised no kernel change")
    if changes: return EXIT_OK, f"OK: {changes} of {n} captures changed kernels ({what}){note}; outputs are the same"
    extra = f" ({t['incompatible']} incompatible allowed)" if t["incompatible"] else ""
    return EXIT_OK, f"OK: all {n} captures replay the same{extra}"

  def unguarded_line(self) -> Optional[str]:
    """The verdict when too few changed lines ran in the captures' computations (and that was not allowed)."""
    g = self.guard
    if not g or g.get("allowed") or not g.get("unguarded"): return None
    percent, limit = g.get("percent"), g.get("threshold", 100.0)
    if not isinstance(percent, (int, float)) or not isinstance(limit, (int, float)) or percent >= limit: return None
    from replay.coverage_check import describe
    return (f"FAIL: {percent:g}% of the changed executable lines run in a capture's computation, fewer than the "
            f"{limit:g}% required "
            f"([tool.replay] changed-lines-guarded; --allow-unguarded or [allow-unguarded] lets it through); "
            + clean(describe(g)))

  def drift(self) -> Optional[dict]:
    """Outputs that are not the same bits but within tolerance: {captures, elements, max_ulp, max_rel_err, examples}."""
    drifting = [(o, m) for o in self.outcomes if o["status"] == "same"
                and isinstance((m := _metrics(o.get("metrics"))).get("drift"), int)
                and m["drift"] > 0]
    if not drifting: return None
    return {"captures": len(drifting), "elements": sum(m["drift"] for _, m in drifting),
            "max_ulp": max(int(m.get("max_ulp", 0) or 0) for _, m in drifting),
            "max_rel_err": max(float(m.get("drift_max_rel_err", 0.0) or 0.0) for _, m in drifting),
            "examples": [f"capture {o['capture_id']} @ {clean(o['location'])}" for o, _ in drifting[:3]]}

  def slower(self) -> list[tuple[dict, float]]:
    """Changed captures whose static cost (kernels) or kernel count (schedules) grew, with the growth as a fraction."""
    out = []
    for o in self.outcomes:
      grew = _metrics(o.get("metrics")).get("slower")
      if o["status"] == "changed" and isinstance(grew, (int, float)) and grew > 0: out.append((o, float(grew)))
    return out

  def slower_line(self) -> Optional[str]:
    slower = self.slower()
    if not slower: return None
    worst = max(slower, key=lambda item: item[1])
    return (f"slower: {len(slower)} changed captures cost more than the base's (static cost of kernels, number of "
            f"kernels of schedules); "
            f"the most: {_pct(worst[1])} at capture {worst[0]['capture_id']} @ {clean(worst[0]['location'])}")

  def drift_line(self) -> Optional[str]:
    d = self.drift()
    if d is None: return None
    return (f"drift: {d['captures']} captures ({d['elements']} elements) give other bits within tolerance, at most "
            f"{d['max_ulp']} ulp "
            f"(max rel err {d['max_rel_err']:.3g}); e.g. {'; '.join(d['examples'])}")

  def summary_lines(self) -> list[str]:
    """Everything reported about the replay as a whole: notes, slower kernels, drift."""
    guard = None
    if self.guard is not None:
      from replay.coverage_check import describe
      guard = "guard: " + clean(describe(self.guard)) + (" (allowed)" if self.guard.get("allowed")
                                                         and self.guard.get("unguarded") else "")
    return self.notes() + [line for line in (guard, self.slower_line(), self.drift_line()) if line]

  def notes(self) -> list[str]:
    """What the replay found about the whole run rather than one capture (flag defaults, end-to-end reruns)."""
    try: notes = json.loads(self.replay.get("notes") or "[]")
    except ValueError: return [clean(self.replay.get("notes"))]
    return [clean(n) for n in notes] if isinstance(notes, list) else [clean(notes)]

  def interesting(self) -> list[dict]:
    return [o for o in self.outcomes if o["status"] != "same"]

  def is_accepted(self, o: dict) -> bool:
    if o["status"] != "changed" or not self.accepted: return False
    from replay.accept import key
    return key(o) in self.accepted

  def unaccepted_changes(self) -> int:
    return sum(1 for o in self.outcomes if o["status"] in CHANGES and not self.is_accepted(o))

  def shown(self) -> list[dict]:
    """The outcomes the report details: the interesting ones, or those the view's filters select."""
    statuses, kinds, where = self.view.get("statuses"), self.view.get("kinds"), self.view.get("location")
    pool = self.outcomes if statuses else self.interesting()
    return [o for o in pool if (not statuses or o["status"] in statuses) and (not kinds or o["kind"] in kinds)
            and (not where or where in str(o["location"]))]

  def groups(self) -> list[list[dict]]:
    """Shown outcomes with identical details grouped, most severe first (mismatch, error, incompatible, changed,
    nondeterministic, same), larger groups first within a status."""
    by_detail: dict[tuple, list[dict]] = {}
    for o in self.shown(): by_detail.setdefault((o["status"], o["kind"], _detail(o)), []).append(o)
    return sorted(by_detail.values(), key=lambda g: (SEVERITY_ORDER.index(g[0]["status"]), -len(g), g[0]["capture_id"]))

  def hotspots(self, limit: int = 5) -> list[str]:
    """Where the differences are: the locations, and the kernels by name, with the most non-same outcomes."""
    lines = []
    by_location = Counter(str(o["location"]) for o in self.shown() if o["status"] != "same")
    if len(by_location) > 1:
      lines.append("by location: " + "; ".join(f"{clean(loc)} ({n})" for loc, n in by_location.most_common(limit))
                   + (f"; and {len(by_location) - limit} more" if len(by_location) > limit else ""))
    by_kernel = Counter(str(o["name"]) for o in self.shown() if o["kind"] == "kernel" and o["status"] != "same")
    if len(by_kernel) > 1:
      lines.append("by kernel: " + "; ".join(f"{clean(name)} ({n})" for name, n in by_kernel.most_common(limit))
                   + (f"; and {len(by_kernel) - limit} more" if len(by_kernel) > limit else ""))
    return lines


def _title(s: Summary) -> str:
  r = s.replay
  base = f"base {r.get('base_ref') or 'working tree'}" + (f" ({str(r['base_commit'])[:10]})" if r.get("base_commit")
                                                          else "")
  if r.get("id") is None:
    which, shard = f"merged replay of {r.get('shard') or 'several shards'}", ""   # shard: "3 of 4 shards"
  else: which, shard = f"replay {r['id']}", (f" (shard {r['shard']})" if r.get("shard") else "")
  return clean(f"{which}{shard}: captures of run {r.get('capture_run_id')} against {base}")


def _changes_text(t: dict[str, int]) -> str:
  return ", ".join(f"{t[s]} {s}" for s in CHANGES if t[s])


def _pct(fraction: float) -> str: return "+inf%" if fraction == float("inf") else f"+{fraction * 100:.0f}%"


def _fraction(value) -> Optional[float]:
  return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _status(o: dict) -> str:
  """The status as reports show it: a changed capture that costs more says so, an accepted one too."""
  grew = _metrics(o.get("metrics")).get("slower") if o["status"] == "changed" else None
  tags = ([f"slower {_pct(grew)}"] if isinstance(grew, (int, float)) and grew > 0
          else []) + (["accepted"] if o.get("accepted") else [])
  return f"{o['status']} ({', '.join(tags)})" if tags else o["status"]


def _heading(o: dict) -> str:
  return clean(f"capture {o['capture_id']} [{o['kind']}] {_status(o)}: {o['name']} @ {o['location']}")


def _table_rows(s: Summary) -> list[list]:
  rows = []
  for kind, c in s.counts.items():
    total = sum(c.values())
    if total or kind in KINDS: rows.append([clean(kind), total] + [c[st] for st in STATUSES])
  return rows


def _kinds(s: Summary) -> list[str]:
  """The known kinds, then any other kind the outcomes name (reported, not dropped)."""
  return list(KINDS) + sorted({o["kind"] for o in s.outcomes} - set(KINDS), key=str)


def _shown_detail(o: dict) -> str:
  """The detail as reports show it: a mismatch first names the kernel that changed (replay/attribution.py)."""
  produced_by = _metrics(o.get("metrics")).get("first_changed")
  detail = _detail(o)
  return clean(produced_by) + ("\n\n" + detail if detail else "") if isinstance(produced_by,
                                                                                str) and produced_by else detail


def _detail(o: dict) -> str:
  return clean(o.get("diff") or o.get("reason") or "")


def _group_heading(group: list[dict]) -> str:
  first = group[0]
  if len(group) == 1: return _heading(first)
  ids = ", ".join(str(o["capture_id"]) for o in group[:8]) + (f", ... ({len(group) - 8} more)" if len(group) > 8
                                                              else "")
  locations = sorted({str(o["location"]) for o in group})
  where = "; ".join(locations[:3]) + (f"; and {len(locations) - 3} more locations" if len(locations) > 3 else "")
  return clean(f"{len(group)} captures [{first['kind']}] {_status(first)} with the same difference: {first['name']} @ "
               f"{where} (captures {ids})")


def _more(s: Summary, shown_groups: int) -> Optional[str]:
  groups = s.groups()
  if len(groups) <= shown_groups: return None
  rest = groups[shown_groups:]
  return (f"... {len(rest)} more groups of differences ({sum(len(g) for g in rest)} captures) are not shown; "
          f"`replay report --all` shows every one (--status, --kind, --location select)")


def reduce_command(s: Summary, group: list[dict]) -> Optional[str]:
  """The `replay reduce` command for a group whose first capture's outputs mismatch (or schedule changed) at the
  replay's base: the way from the group to a small standalone test."""
  first, base = group[0], s.replay.get("base_commit")
  if not base or not ((first["kind"] == "exec" and first["status"] == "mismatch")
                      or (first["kind"] == "schedule" and first["status"] == "changed")): return None
  return f"replay reduce {first['capture_id']} --base {clean(str(base))[:12]}"


def render_group(group: list[dict], max_lines: Optional[int] = 40) -> str:
  """One group of identical differences as text: its heading, then its detail (cut after `max_lines`)."""
  lines = _shown_detail(group[0]).splitlines()
  if max_lines is not None and len(lines) > max_lines:
    lines = lines[:max_lines] + [f"... ({len(lines) - max_lines} more lines; `replay show {group[0]['capture_id']}` "
                                 f"shows all)"]
  return "\n".join([f"--- {_group_heading(group)}", *lines])


def render_text(s: Summary, max_diffs: int = 10, max_lines: int = 40) -> str:
  out = [_title(s), tabulate(_table_rows(s), headers=["kind", "total", *STATUSES], tablefmt="simple")]
  out += [f"note: {n}" for n in s.summary_lines()] + s.hotspots()
  groups = s.groups() if s.show_all else s.groups()[:max_diffs]
  for group in groups:
    out.append("\n" + render_group(group, None if s.show_all else max_lines))
    if (why := s.explanations.get(group[0]["capture_id"])): out.append("why: " + clean(why))
    if (command := reduce_command(s, group)): out.append(f"reduce to a standalone test: {command}")
  if (more := _more(s, len(groups))): out.append("\n" + more)
  out.append("\n" + s.verdict()[1])
  return "\n".join(out)


def render_markdown(s: Summary, max_diffs: int = 10) -> str:
  rows = [[esc(cell) if isinstance(cell, str) else cell for cell in row] for row in _table_rows(s)]
  out = [f"### {esc(_title(s))}", "", tabulate(rows, headers=["kind", "total", *STATUSES], tablefmt="github"), ""]
  if s.summary_lines() or s.hotspots(): out += [f"- {esc(n)}" for n in s.summary_lines() + s.hotspots()] + [""]
  groups = s.groups() if s.show_all else s.groups()[:max_diffs]
  for group in groups:
    command = reduce_command(s, group)
    out += [f"<details><summary><b>{esc(_status(group[0]))}</b> {esc(_group_heading(group))}</summary>", "",
            *_fenced(_shown_detail(group[0]), "diff"), *([f"Reduce it to a standalone test: `{command}`"]
                                                          if command else []), "</details>", ""]
  if (more := _more(s, len(groups))): out += [esc(more), ""]
  out.append(f"**{s.verdict()[1]}**")
  return "\n".join(out)


def _metrics(raw) -> dict:
  """Stored metrics as a dict; text that is not a JSON object is kept under "unparsed" instead of failing the report."""
  if not isinstance(raw, str): return raw if isinstance(raw, dict) else {}
  try: value = json.loads(raw or "{}")
  except ValueError: return {"unparsed": clean(raw)}
  return value if isinstance(value, dict) else {"unparsed": clean(raw)}


def render_json(s: Summary) -> str:
  code, verdict = s.verdict()
  doc = {"schema": JSON_SCHEMA,
         "replay": {**{k: s.replay.get(k) for k in ("id", "capture_run_id", "base_ref", "base_commit", "head_commit",
                                                                           "started", "finished", "jobs", "selected",
                                                                           "shard")},
                                           "policy": _metrics(s.replay.get("policy"))},
         "capture_runs": [{"id": r.get("id"), "exit_code": r.get("exit_code")} for r in s.capture_runs],
         "counts": s.counts, "totals": s.totals(), "exit_code": code, "verdict": verdict, "notes": s.notes(),
         "drift": s.drift(), "slower": [{"capture_id": o["capture_id"], "growth": g} for o, g in s.slower()],
         "outcomes": [{"capture_id": o["capture_id"], "kind": o["kind"], "name": o["name"], "location": o["location"],
                       "status": o["status"],
                       "reason": o.get("reason") or "", "diff": o.get("diff") or "",
                       "metrics": _metrics(o.get("metrics")),
                       "seconds": o.get("seconds") or 0.0, "accepted": bool(o.get("accepted"))} for o in s.outcomes]}
  return json.dumps(doc, indent=2, sort_keys=True)


def render_junit(s: Summary) -> str:
  suites = ET.Element("testsuites", name="replay")
  if s.summary_lines():
    props = ET.SubElement(ET.SubElement(suites, "testsuite", name="replay.notes", tests="0", failures="0", errors="0"),
                          "properties")
    for n in s.summary_lines(): ET.SubElement(props, "property", name="note", value=n)
  for kind in _kinds(s):
    group = [o for o in s.outcomes if o["kind"] == kind]
    kind = clean(kind)
    suite = ET.SubElement(suites, "testsuite", name=f"replay.{kind}", tests=str(len(group)),
                          failures=str(sum(o["status"] in ("mismatch",)
                                           or (o["status"] in CHANGES and s.expect_no_change) for o in group)),
                          errors=str(sum(o["status"] in ("error", "incompatible") for o in group)))
    for o in group:
      case = ET.SubElement(suite, "testcase", classname=f"replay.{kind}",
                           name=clean(f"{o['capture_id']} {o['name']} @ {o['location']}"),
                           time=f"{o.get('seconds') or 0.0:.3f}")
      if o["status"] == "mismatch" or (o["status"] in CHANGES and s.expect_no_change):
        ET.SubElement(case, "failure", message=o["status"]).text = _shown_detail(o)
      elif o["status"] in ("error", "incompatible"):
        ET.SubElement(case, "error", message=o["status"]).text = _shown_detail(o)
      elif o["status"] in CHANGES:
        ET.SubElement(case, "system-out").text = _shown_detail(o)
  return ET.tostring(suites, encoding="unicode")


def _diff_sections(diff_text: str) -> list[tuple[str, list[str]]]:
  """A detail split at each file header of its unified diffs (`--- base kernel 3`): (title, lines); text before the
  first header (the summary of what changed) is its own section with an empty title."""
  sections: list[tuple[str, list[str]]] = [("", [])]
  lines = diff_text.splitlines()
  i = 0
  while i < len(lines):
    line = lines[i]
    if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
      sections.append((f"{line[4:]} / {lines[i + 1][4:]}", []))
      i += 2
      continue
    sections[-1][1].append(line)
    i += 1
  return [(title, body) for title, body in sections if title or any(b.strip() for b in body)]


def _side_by_side(lines: list[str]) -> str:
  """Unified diff lines as a two-column table with line numbers: base on the left, captured on the right; each
  hunk is its own table, so separate hunks never run together."""
  tables, left, right = [], [], []
  def flush():
    if left or right:
      tables.append(difflib.HtmlDiff(wrapcolumn=100).make_table(left, right, "base (-)", "captured (+)"))
    left.clear(); right.clear()
  for line in lines:
    if line.startswith("@@"): flush(); continue
    if line.startswith("-"): left.append(line[1:])
    elif line.startswith("+"): right.append(line[1:])
    else:
      text = line[1:] if line.startswith(" ") else line
      left.append(text); right.append(text)
  flush()
  return "".join(tables)


def _detail_html(o: dict) -> str:
  detail = _shown_detail(o)
  if o["status"] != "changed" or not o.get("diff"):
    # mismatches list elements as `-  [i] base` / `+  [i] captured` lines: color them like a diff
    rows = []
    for line in detail.splitlines():
      cls = ("minus" if line.startswith("-") else "plus" if line.startswith("+") else "head"
             if line.startswith("output ") else "")
      rows.append(f"<span class='{cls}'>{esc(line)}</span>" if cls else esc(line))
    return f"<pre class='detail {esc(o['status'])}'>" + "\n".join(rows) + "</pre>"
  out = []
  for title, body in _diff_sections(detail):
    if not title: out.append(f"<pre class='summary'>{esc(chr(10).join(body))}</pre>")
    else: out.append(f"<h4>{esc(title)}</h4>{_side_by_side(body)}")
  return "".join(out)


def render_html(s: Summary) -> str:
  rows = "".join(f"<tr><td>{esc(k)}</td>" + "".join(f"<td>{esc(v)}</td>" for v in vals) + "</tr>"
                 for k, *vals in _table_rows(s))
  code, verdict = s.verdict()
  groups = s.groups()
  toc, sections = [], []
  for n, group in enumerate(groups):
    first = group[0]
    anchor = f"g{n}"
    toc.append(f"<li class='{esc(first['status'])}'><a href='#{anchor}'>{esc(_status(first))}</a> "
               f"[{esc(first['kind'])}] {esc(first['name'])}"
               + (f" &times;{len(group)}" if len(group) > 1 else "") + f" <small>{esc(first['location'])}</small></li>")
    why = s.explanations.get(first["capture_id"])
    why_html = f"<h4>why</h4><pre class='why'>{esc(why)}</pre>" if why else ""
    if (command := reduce_command(s, group)):
      why_html += f"<p class='reduce'>Reduce it to a standalone test: <code>{esc(command)}</code></p>"
    sections.append(f"<section id='{anchor}' "
                    f"class='{esc(first['status'])}'><h3>{esc(_group_heading(group))}</h3>{why_html}"
                    f"{_detail_html(first)}</section>")
  notes = "".join(f"<li>{esc(n)}</li>" for n in s.summary_lines() + s.hotspots())
  style = ("body{font-family:sans-serif;margin:1em 2em} "
           "table.diff{font-family:monospace;font-size:12px;margin-bottom:.5em} .diff_add{background:#cfc}"
           " .diff_chg{background:#ffa} .diff_sub{background:#fcc} td,th{padding:2px 8px} .verdict{padding:.5em "
           "1em;font-weight:bold;border-radius:4px}"
           " .verdict.ok{background:#dfd;color:#060} .verdict.fail{background:#fdd;color:#900} "
           "pre.detail{background:#f6f6f6;padding:.5em}"
           " .minus{color:#a00} .plus{color:#070} .head{font-weight:bold} li.mismatch a,li.error "
           "a{color:#a00;font-weight:bold}"
           " section{border-top:1px solid #ccc;margin-top:1em} pre.summary{background:#eef;padding:.5em} "
           "pre.why{background:#ffe;padding:.5em}")
  verdict_class = "ok" if code == EXIT_OK else "fail"
  return (f"<!doctype html><html><head><meta "
          f"charset='utf-8'><title>{esc(_title(s))}</title><style>{style}</style></head><body>"
          f"<h1>{esc(_title(s))}</h1><p class='verdict {verdict_class}' id='verdict'>{html.escape(verdict)}</p>"
          f"<table border=1><tr><th>kind</th><th>total</th>{''.join(f'<th>{x}</th>' for x in STATUSES)}</tr>"
          f"{rows}</table>"
          + (f"<ul class='notes'>{notes}</ul>" if notes else "")
          + (f"<h2>Contents</h2><ol class='toc'>{''.join(toc)}</ol>" if toc
             else "") + "".join(sections) + "</body></html>")


_COLORS = {"red": "31", "green": "32", "yellow": "33", "cyan": "36", "bold": "1"}


def colorize(text: str) -> str:
  """Terminal colors for a text report: removed lines red, added green, hunk headers cyan, the verdict bold in green
  (OK) or red (FAIL, INCOMPLETE). The CLI applies it only on a terminal and never with NO_COLOR set."""
  def paint(line: str, color: str) -> str: return f"\x1b[{_COLORS[color]}m{line}\x1b[0m"
  out = []
  for line in text.splitlines():
    if line.startswith(("OK:", "FAIL:", "INCOMPLETE:")):
      out.append(paint(paint(line, "green" if line.startswith("OK") else "red"), "bold"))
    elif line.startswith("--- ") and not line.startswith("--- base"): out.append(paint(line, "bold"))
    elif line.startswith("@@"): out.append(paint(line, "cyan"))
    elif line.startswith("-") and not line.startswith("---"): out.append(paint(line, "red"))
    elif line.startswith("+") and not line.startswith("+++"): out.append(paint(line, "green"))
    elif line.startswith(("note:", "by location:", "by kernel:")): out.append(paint(line, "yellow"))
    else: out.append(line)
  return "\n".join(out)


RENDERERS = {"text": render_text, "markdown": render_markdown, "json": render_json, "junit": render_junit,
             "html": render_html}


def _when(t) -> str: return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if isinstance(t, (int, float)) else "-"


def _command(argv_json) -> str:
  try: argv = json.loads(argv_json or "[]")
  except ValueError: return clean(argv_json)[:50]
  if not isinstance(argv, list): return "?"
  text = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(map(str, argv)))
  return clean(text if len(text) <= 50 else text[:47] + "...")


def _cell(value, width: int) -> str:
  """A text column of a row as the database holds it, which may be NULL or not text in a damaged file."""
  return "-" if value is None else str(value)[:width]


def _clock(when) -> str:
  try: return time.strftime("%H:%M:%S", time.localtime(when))
  except (TypeError, ValueError, OverflowError, OSError): return "-"


def captures_table(captures: list[dict], limit: int) -> str:
  """`replay list`: the captures (at most `limit`, 0: all)."""
  rows = [[c["id"], c["run_id"], c["kind"], _cell(c["name"], 48), _cell(c["location"], 60), _clock(c["time"])]
          for c in (captures if limit == 0 else captures[:limit])]
  text = clean(tabulate(rows, headers=["id", "run", "kind", "name", "location", "time"]))
  return text + (f"\n... {len(captures) - limit} more (--limit 0 shows all)" if limit and len(captures) > limit else "")


def runs_table(runs: list[dict], replays: list[dict], limit: int) -> str:
  """`replay runs`: capture runs (command, commit, how it ended, captures) and replays (base, verdict), newest first."""
  shown = runs if limit == 0 else runs[:limit]
  rows = [[r["id"], _when(r.get("started")), _command(r.get("argv")),
           (r.get("git_commit") or "-")[:10] + ("+dirty" if r.get("git_dirty") else ""),
           "-" if r.get("exit_code") is None else r["exit_code"],
           " ".join(f"{r['counts'].get(k, 0)}{k[0]}" for k in KINDS),
           f"rerun of {r['rerun_of']} ({clean(r.get('tree') or '')[:24]})" if r.get("rerun_of") else ""] for r in shown]
  out = [clean(tabulate(rows, headers=["run", "started", "command", "commit", "exit", "captures (s k e)", ""]))]
  if len(runs) > len(shown): out.append(f"... {len(runs) - len(shown)} more runs (--limit 0 shows all)")
  shown = replays if limit == 0 else replays[:limit]
  rows = [[r["id"], _when(r.get("started")), r.get("capture_run_id") or "-",
           clean(r.get("base_ref") or "working tree")[:24]
           + (f" ({r['base_commit'][:10]})" if r.get("base_commit") else ""), r["outcomes"],
           clean(r.get("verdict") or "(did not finish)")[:70]]
          for r in shown]
  out.append("\n" + clean(tabulate(rows, headers=["replay", "started", "run", "base", "outcomes", "verdict"])))
  if len(replays) > len(shown): out.append(f"... {len(replays) - len(shown)} more replays (--limit 0 shows all)")
  return "\n".join(out)


def write_reports(s: Summary, junit_path: Optional[str] = None, html_path: Optional[str] = None,
                  markdown_appended_to: Optional[str] = None) -> None:
  """The gate's report files: JUnit XML, the HTML page, and markdown appended to a file (GITHUB_STEP_SUMMARY)."""
  for path, fmt in ((junit_path, "junit"), (html_path, "html")):
    if path:
      with open(path, "w") as f: f.write(render(s, fmt))
  if markdown_appended_to:
    with open(markdown_appended_to, "a") as f: f.write(render(s, "markdown") + "\n")


def render(s: Summary, fmt: str) -> str:
  if fmt not in RENDERERS: raise ValueError(f"unknown report format {fmt!r}; choose one of {', '.join(FORMATS)}")
  return RENDERERS[fmt](s)
