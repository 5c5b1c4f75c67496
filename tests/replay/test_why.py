"""`replay show N --why` on a planted fusion-rule change names the rule's id, its line and the node it decided on."""
import json, tempfile
import numpy as np
import pytest
from replay.why import first_difference, explain
from tests.replay.conftest import cli, capture_workloads, commit_on_a, edit, NO_REALIZE_EXPAND
from scheduler.device import find_c_compiler


def entry(file, line, node, result="realize"): return {"file": file, "line": line, "node": node, "result": result}


def test_traces_compare_by_rule_file_node_and_result_not_by_line():
  a = [entry("scheduler/x.py", 10, "ADD"), entry("scheduler/y.py", 5, "MUL", "CONST")]
  moved = [entry("scheduler/x.py", 12, "ADD"), entry("scheduler/y.py", 5, "MUL", "CONST")]
  assert first_difference(a, moved) is None and "same 2 rewrites" in explain(a, moved)
  other = [entry("scheduler/x.py", 10, "ADD"), entry("scheduler/z.py", 7, "MUL", "CONST")]
  assert first_difference(a, other) == 1
  text = explain(a, other)
  assert ("step 2" in text and "base: scheduler/y.py:5 on MUL" in text and "here: scheduler/z.py:7" in text
          and "before it" in text)
  assert first_difference(a, a[:1]) == 1 and "the trace ends here" in explain(a, a[:1])


@pytest.mark.slow
@pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler")
def test_why_names_the_realize_rule_a_fusion_change_disabled(repo, tmp_path):
  commit_on_a(repo, "why-expand", lambda r: edit(r, *NO_REALIZE_EXPAND))
  db = tmp_path / "r.db"
  capture_workloads(db, "ref_expand_of_expr", "--no-variants", cwd=repo)
  assert cli("diff", "--base", "main", db=db, cwd=repo).returncode == 0
  doc = json.loads(cli("report", "--format", "json", db=db, cwd=repo).stdout)
  changed = [o["capture_id"] for o in doc["outcomes"] if o["kind"] == "schedule" and o["status"] == "changed"]
  assert changed
  proc = cli("show", str(changed[0]), "--why", db=db, cwd=repo)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  base_line = next(l for l in proc.stdout.splitlines() if l.strip().startswith("base:"))
  assert ("rule S39 (realize before expand), scheduler/sched_grouping.py:" in base_line
          and "realize" in base_line), proc.stdout
  kernel = next(o["capture_id"] for o in doc["outcomes"] if o["kind"] == "kernel")
  refused = cli("show", str(kernel), "--why", db=db, cwd=repo)
  assert refused.returncode == 2 and "--why explains schedules" in refused.stderr
  # the same attribution in the reports, per changed group
  page = tmp_path / "why.html"
  assert cli("report", "--why", "--format", "html", "--output", str(page), db=db, cwd=repo).returncode == 0
  html = page.read_text()
  assert "<pre class='why'>" in html and "scheduler/sched_grouping.py:" in html.split("<pre class='why'>",
                                                                                      1)[1].split("</pre>", 1)[0]
  text = cli("report", "--why", db=db, cwd=repo).stdout
  assert "why: first difference at step" in text


# ***** each family of S14-S31, disabled in turn: the trace names the rule by id *****

def _buffer():
  from scheduler import Tensor
  return Tensor(np.arange(16, dtype=np.float32).reshape(4, 4)).realize()


def _disk_bytes():
  from scheduler import Tensor, dtypes
  with tempfile.NamedTemporaryFile(suffix=".disk", delete=False) as f: f.write(bytes(range(64)))
  return Tensor.empty(64, dtype=dtypes.uint8, device=f"DISK:{f.name}")


def _program(rule: str):
  """A program on which `rule` fires (the worked examples W23-W27 of SCHEDULER.md where there is one)."""
  from scheduler import Tensor, dtypes
  a = _buffer()
  return {
    "S14": lambda: Tensor.ones(0, 3) + a.sum(),
    "S15": lambda: a.detach() + 1,
    "S16": lambda: Tensor.ones(4, 0).sum(1) + 1,
    "S17": lambda: a[:, :1].expand(4, 8).sum(1),
    "S18": lambda: Tensor.ones(65536).contiguous().sum(),                               # W24
    "S19": lambda: Tensor.full((4, 4), 3.0).to("PYTHON"),                               # W23
    "S20": lambda: Tensor(a.lazydata.copy_to_device("CPU")) + 1,
    "S23": lambda: a.contiguous(),
    "S24": lambda: (a + 1).contiguous().contiguous(),
    "S25": lambda: _disk_bytes().bitcast(dtypes.float32).to("CPU"),                     # W27
    "S26": lambda: Tensor.full((2, 2), 3.0),
    "S27": lambda: a.reshape(4, 1, 4).expand(4, 3, 4).cast(dtypes.int32) + 1,          # W26
    "S28": lambda: a[1:3].to("PYTHON"),                                                 # W23
    "S29": lambda: a.reshape(4, 1, 4).expand(4, 3, 4).sqrt() + 1,                      # W26
    "S30": lambda: a.cast(dtypes.float64).reshape(4, 1, 4).expand(4, 3, 4) + 1,
    "S31": lambda: ((x := a + 1).T.contiguous(), x * 2),
  }[rule]()


RULE_FAMILIES = ["S14", "S15", "S16", "S17", "S18", "S19", "S20", "S23", "S24", "S25", "S26", "S27", "S28", "S29",
                 "S30", "S31"]


@pytest.mark.parametrize("rule", RULE_FAMILIES)
def test_why_names_each_simplification_rule_by_id_when_it_is_disabled(rule, monkeypatch):
  from scheduler import Context, UOp
  from scheduler import sched_simplify
  from scheduler.ops import PatternMatcher
  from replay.replayers import trace_schedule
  def trace() -> list[dict]:
    made = _program(rule)
    sink = UOp.sink(*[t.lazydata for t in (made if isinstance(made, tuple) else (made,))])
    with Context(CAST_AFTER_EXPAND=int(rule == "S30")): return trace_schedule({"graph": sink})
  base = trace()
  fired = [e for e in base if e["rule"].startswith(rule + " ")]
  assert fired and all(e["file"] == "scheduler/sched_simplify.py" for e in fired), base
  # the planted change: the head's compiler lacks the rule's patterns
  kept = [(p, fn) for p, fn in sched_simplify.tensor_rules.patterns
          if not getattr(fn, "rule", "").startswith(rule + " ")]
  monkeypatch.setattr(sched_simplify, "simplify_rules",
                      sched_simplify.merge_views + sched_simplify.symbolic_simple + PatternMatcher(kept))
  text = explain(base, trace())
  assert f"base: rule {fired[0]['rule']}, scheduler/sched_simplify.py:" in text, text
