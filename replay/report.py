"""Reports of a replay: the verdict policy and every output format (text, markdown, json, junit, html).

All output of the command line about outcomes goes through here.
"""
from __future__ import annotations
import difflib, html, json, re
from typing import Optional
from dataclasses import dataclass, field
from xml.etree import ElementTree as ET
from tabulate import tabulate

STATUSES = ("same", "changed", "mismatch", "error", "incompatible", "nondeterministic")
KINDS = ("schedule", "kernel", "exec")
EXIT_OK, EXIT_CHANGED, EXIT_USAGE, EXIT_MISMATCH, EXIT_HARNESS = 0, 1, 2, 3, 4
FORMATS = ("text", "markdown", "json", "junit", "html")


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

  @staticmethod
  def from_row(replay: dict, outcomes: list[dict], capture_runs: Optional[list] = None) -> "Summary":
    """The summary of a stored replay under the policy it ran with."""
    try: policy = json.loads(replay.get("policy") or "{}")
    except ValueError: policy = {}
    if not isinstance(policy, dict): policy = {}
    return Summary(replay, outcomes, bool(policy.get("expect_no_change")), bool(policy.get("allow_incompatible")), list(capture_runs or []),
                   bool(policy.get("fail_on_drift")), _fraction(policy.get("max_cost_increase")))

  def capture_problem(self) -> Optional[str]:
    """How a captured command failed, if one did: the captures then describe only part of the program."""
    for run in self.capture_runs:
      code = run.get("exit_code")
      if isinstance(code, int) and code < 0: return f"the captured command of run {run['id']} was killed by signal {-code}"
      if isinstance(code, int) and code > 0: return f"the captured command of run {run['id']} exited with code {code}"
    return None

  def missing(self) -> int:
    """Selected captures without an outcome: the replay was interrupted (0 when it stopped early on purpose)."""
    selected = self.replay.get("selected")
    if not isinstance(selected, int): return 0
    try: policy = json.loads(self.replay.get("policy") or "{}")
    except ValueError: policy = {}
    cap = policy.get("max_changed") if isinstance(policy, dict) else None
    t = self.totals()
    if isinstance(cap, int) and cap > 0 and t["changed"] + t["mismatch"] >= cap: return 0   # --max-changed stopped it
    return max(0, selected - len(self.outcomes))

  def __post_init__(self):
    # a status this harness does not know (a hand-edited database) counts as an error, with the reason saying so
    self.outcomes = [o if o["status"] in STATUSES else {**o, "status": "error", "reason": f"unknown status {clean(o['status'])!r}; "
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
    if (missing := self.missing()):
      n = len(self.outcomes)
      return EXIT_HARNESS, f"INCOMPLETE: replayed {n} of {n + missing} selected captures (the replay did not finish); so far: {line}"
    return code, line

  def _policy_verdict(self) -> tuple[int, str]:
    t = self.totals()
    n = len(self.outcomes)
    if n == 0: return EXIT_HARNESS, "FAIL: nothing was replayed"
    if t["mismatch"]: return EXIT_MISMATCH, f"FAIL: {t['mismatch']} of {n} captures produce different outputs"
    if (t["error"] or t["incompatible"]) and not self.allow_incompatible:
      return EXIT_HARNESS, f"FAIL: {t['error']} replay errors and {t['incompatible']} incompatible captures of {n}"
    if self.max_cost_increase is not None and (over := [g for _, g in self.slower() if g > self.max_cost_increase]):
      return EXIT_CHANGED, (f"FAIL: {len(over)} of {n} captures cost more than --max-cost-increase {self.max_cost_increase * 100:g}% allows "
                            f"(up to {_pct(max(over))})")
    if self.fail_on_drift and (d := self.drift()):
      return EXIT_MISMATCH, f"FAIL: {d['captures']} of {n} captures drift within tolerance (at most {d['max_ulp']} ulp), and --fail-on-drift was given"
    if t["changed"] and self.expect_no_change: return EXIT_CHANGED, f"FAIL: {t['changed']} captures changed kernels, and no change was promised"
    if t["changed"]: return EXIT_OK, f"OK: {t['changed']} of {n} captures changed kernels; outputs are the same"
    extra = f" ({t['error'] + t['incompatible']} errors/incompatible allowed)" if t["error"] or t["incompatible"] else ""
    return EXIT_OK, f"OK: all {n} captures replay the same{extra}"

  def drift(self) -> Optional[dict]:
    """Outputs that are not the same bits but within tolerance: {captures, elements, max_ulp, max_rel_err, examples}."""
    drifting = [(o, m) for o in self.outcomes if o["status"] == "same" and isinstance((m := _metrics(o.get("metrics"))).get("drift"), int)
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
    return (f"slower: {len(slower)} changed captures cost more than the base's (static cost of kernels, number of kernels of schedules); "
            f"the most: {_pct(worst[1])} at capture {worst[0]['capture_id']} @ {clean(worst[0]['location'])}")

  def drift_line(self) -> Optional[str]:
    d = self.drift()
    if d is None: return None
    return (f"drift: {d['captures']} captures ({d['elements']} elements) give other bits within tolerance, at most {d['max_ulp']} ulp "
            f"(max rel err {d['max_rel_err']:.3g}); e.g. {'; '.join(d['examples'])}")

  def summary_lines(self) -> list[str]:
    """Everything reported about the replay as a whole: notes, slower kernels, drift."""
    return self.notes() + [line for line in (self.slower_line(), self.drift_line()) if line]

  def notes(self) -> list[str]:
    """What the replay found about the whole run rather than one capture (flag defaults, end-to-end reruns)."""
    try: notes = json.loads(self.replay.get("notes") or "[]")
    except ValueError: return [clean(self.replay.get("notes"))]
    return [clean(n) for n in notes] if isinstance(notes, list) else [clean(notes)]

  def interesting(self) -> list[dict]:
    return [o for o in self.outcomes if o["status"] != "same"]


def _title(s: Summary) -> str:
  r = s.replay
  base = f"base {r.get('base_ref') or 'working tree'}" + (f" ({str(r['base_commit'])[:10]})" if r.get("base_commit") else "")
  return clean(f"replay {r['id']}: captures of run {r.get('capture_run_id')} against {base}")


def _pct(fraction: float) -> str: return "+inf%" if fraction == float("inf") else f"+{fraction * 100:.0f}%"


def _fraction(value) -> Optional[float]:
  return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _status(o: dict) -> str:
  """The status as reports show it: a changed capture that costs more says so."""
  grew = _metrics(o.get("metrics")).get("slower") if o["status"] == "changed" else None
  return f"{o['status']} (slower {_pct(grew)})" if isinstance(grew, (int, float)) and grew > 0 else o["status"]


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


def _detail(o: dict) -> str:
  return clean(o.get("diff") or o.get("reason") or "")


def render_text(s: Summary, max_diffs: int = 5, max_lines: int = 40) -> str:
  out = [_title(s), tabulate(_table_rows(s), headers=["kind", "total", *STATUSES], tablefmt="simple")]
  out += [f"note: {n}" for n in s.summary_lines()]
  shown = s.interesting()[:max_diffs]
  for o in shown:
    out.append(f"\n--- {_heading(o)}")
    lines = _detail(o).splitlines()
    out.extend(lines[:max_lines] + ([f"... ({len(lines) - max_lines} more lines; replay show {o['capture_id']})"] if len(lines) > max_lines else []))
  if len(s.interesting()) > len(shown): out.append(f"\n... and {len(s.interesting()) - len(shown)} more; see replay report")
  out.append("\n" + s.verdict()[1])
  return "\n".join(out)


def render_markdown(s: Summary, max_diffs: int = 10) -> str:
  rows = [[esc(cell) if isinstance(cell, str) else cell for cell in row] for row in _table_rows(s)]
  out = [f"### {esc(_title(s))}", "", tabulate(rows, headers=["kind", "total", *STATUSES], tablefmt="github"), ""]
  if s.summary_lines(): out += [f"- {esc(n)}" for n in s.summary_lines()] + [""]
  for o in s.interesting()[:max_diffs]:
    out += [f"<details><summary>capture {esc(o['capture_id'])} [{esc(o['kind'])}] <b>{esc(_status(o))}</b>: {esc(o['name'])} @ "
            f"<code>{esc(o['location'])}</code></summary>", "", *_fenced(_detail(o), "diff"), "</details>", ""]
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
  doc = {"schema": "replay-report/1", "replay": {k: s.replay.get(k) for k in ("id", "capture_run_id", "base_ref", "base_commit", "head_commit",
                                                                                  "started", "finished", "jobs")},
         "counts": s.counts, "totals": s.totals(), "exit_code": code, "verdict": verdict, "notes": s.notes(),
         "drift": s.drift(), "slower": [{"capture_id": o["capture_id"], "growth": g} for o, g in s.slower()],
         "outcomes": [{"capture_id": o["capture_id"], "kind": o["kind"], "name": o["name"], "location": o["location"], "status": o["status"],
                       "reason": o.get("reason") or "", "diff": o.get("diff") or "", "metrics": _metrics(o.get("metrics")),
                       "seconds": o.get("seconds") or 0.0} for o in s.outcomes]}
  return json.dumps(doc, indent=2, sort_keys=True)


def render_junit(s: Summary) -> str:
  suites = ET.Element("testsuites", name="replay")
  if s.summary_lines():
    props = ET.SubElement(ET.SubElement(suites, "testsuite", name="replay.notes", tests="0", failures="0", errors="0"), "properties")
    for n in s.summary_lines(): ET.SubElement(props, "property", name="note", value=n)
  for kind in _kinds(s):
    group = [o for o in s.outcomes if o["kind"] == kind]
    kind = clean(kind)
    suite = ET.SubElement(suites, "testsuite", name=f"replay.{kind}", tests=str(len(group)),
                          failures=str(sum(o["status"] in ("mismatch",) or (o["status"] == "changed" and s.expect_no_change) for o in group)),
                          errors=str(sum(o["status"] in ("error", "incompatible") for o in group)))
    for o in group:
      case = ET.SubElement(suite, "testcase", classname=f"replay.{kind}", name=clean(f"{o['capture_id']} {o['name']} @ {o['location']}"),
                           time=f"{o.get('seconds') or 0.0:.3f}")
      if o["status"] == "mismatch" or (o["status"] == "changed" and s.expect_no_change):
        ET.SubElement(case, "failure", message=o["status"]).text = _detail(o)
      elif o["status"] in ("error", "incompatible"):
        ET.SubElement(case, "error", message=o["status"]).text = _detail(o)
      elif o["status"] == "changed":
        ET.SubElement(case, "system-out").text = _detail(o)
  return ET.tostring(suites, encoding="unicode")


def _side_by_side(diff_text: str) -> str:
  """A unified diff as a two-column table: base on the left, captured on the right."""
  left, right = [], []
  for line in diff_text.splitlines():
    if line.startswith(("---", "+++", "@@")): continue
    if line.startswith("-"): left.append(line[1:])
    elif line.startswith("+"): right.append(line[1:])
    else: left.append(line[1:] if line.startswith(" ") else line); right.append(line[1:] if line.startswith(" ") else line)
  return difflib.HtmlDiff(wrapcolumn=100).make_table(left, right, "base (-)", "captured (+)")


def render_html(s: Summary) -> str:
  rows = "".join(f"<tr><td>{esc(k)}</td>" + "".join(f"<td>{esc(v)}</td>" for v in vals) + "</tr>" for k, *vals in _table_rows(s))
  sections = []
  for o in s.interesting():
    body = _side_by_side(_detail(o)) if o.get("diff") and o["status"] == "changed" else f"<pre>{esc(_detail(o))}</pre>"
    sections.append(f"<h3>capture {esc(o['capture_id'])} [{esc(o['kind'])}] {esc(_status(o))}: {esc(o['name'])} "
                    f"<small>{esc(o['location'])}</small></h3>{body}")
  notes = f"<ul>{''.join(f'<li>{esc(n)}</li>' for n in s.summary_lines())}</ul>" if s.summary_lines() else ""
  style = ("body{font-family:sans-serif} table.diff{font-family:monospace;font-size:12px} .diff_add{background:#cfc} .diff_chg{background:#ffa}"
           " .diff_sub{background:#fcc} td,th{padding:2px 8px}")
  return (f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(_title(s))}</title><style>{style}</style></head><body>"
          f"<h1>{esc(_title(s))}</h1><table border=1><tr><th>kind</th><th>total</th>{''.join(f'<th>{x}</th>' for x in STATUSES)}</tr>{rows}</table>"
          f"{notes}<p><b>{html.escape(s.verdict()[1])}</b></p>{''.join(sections)}</body></html>")


RENDERERS = {"text": render_text, "markdown": render_markdown, "json": render_json, "junit": render_junit, "html": render_html}


def render(s: Summary, fmt: str) -> str:
  if fmt not in RENDERERS: raise ValueError(f"unknown report format {fmt!r}; choose one of {', '.join(FORMATS)}")
  return RENDERERS[fmt](s)
