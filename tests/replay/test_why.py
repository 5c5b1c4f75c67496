"""`replay show N --why` on a planted fusion-rule change names the rule's line and the node it decided on."""
import json
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
  assert "step 2" in text and "base: scheduler/y.py:5 on MUL" in text and "here: scheduler/z.py:7" in text and "before it" in text
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
  assert "scheduler/sched_grouping.py:" in base_line and "realize" in base_line, proc.stdout
  kernel = next(o["capture_id"] for o in doc["outcomes"] if o["kind"] == "kernel")
  refused = cli("show", str(kernel), "--why", db=db, cwd=repo)
  assert refused.returncode == 2 and "--why explains schedules" in refused.stderr
  # the same attribution in the reports, per changed group
  page = tmp_path / "why.html"
  assert cli("report", "--why", "--format", "html", "--output", str(page), db=db, cwd=repo).returncode == 0
  html = page.read_text()
  assert "<pre class='why'>" in html and "scheduler/sched_grouping.py:" in html.split("<pre class='why'>", 1)[1].split("</pre>", 1)[0]
  text = cli("report", "--why", db=db, cwd=repo).stdout
  assert "why: first difference at step" in text
