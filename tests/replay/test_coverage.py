"""`replay coverage` and the gate's warning: changed lines of the system under test that no capture runs."""
import sys
import pytest
from replay.coverage_check import ranges, describe
from tests.replay.conftest import cli, capture_workloads, commit_on_a, edit
from scheduler.device import find_c_compiler

NEVER_CALLED = "\n\ndef never_called_helper(x):\n  y = x + 1\n  return y * 2\n"


def test_ranges_and_descriptions():
  assert ranges([3, 4, 5, 9, 11, 12]) == "3-5, 9, 11-12" and ranges([]) == ""
  assert "touches no line" in describe({}, {})
  assert "every changed line" in describe({}, {"a.py": {1, 2}})
  assert describe({"a.py": [4, 5]}, {"a.py": {4, 5, 6}}).startswith("this change is not exercised by any capture: 2 changed lines")


@pytest.mark.slow
@pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler")
def test_coverage_lists_changed_lines_no_replay_runs_and_the_gate_warns(repo, tmp_path):
  def change(r):
    (r / "scheduler" / "helpers.py").write_text((r / "scheduler" / "helpers.py").read_text() + NEVER_CALLED)
    edit(r, "runtimes/cpu.py", '  if op is Ops.NEG: return f"(-{s[0]})"', '  if op is Ops.NEG: return f"(-({s[0]}))"')
  commit_on_a(repo, "coverage-change", change)
  db = tmp_path / "r.db"
  capture_workloads(db, "ref_add_const", "ref_softmax", "--no-variants", cwd=repo)
  proc = cli("coverage", "--base", "main", db=db, cwd=repo)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  lines = proc.stdout.splitlines()
  assert lines[0].startswith("this change is not exercised by any capture") and "scheduler/helpers.py:" in lines[0]
  assert not any("runtimes/cpu.py" in line for line in lines), proc.stdout   # the softmax replay renders a NEG
  gate = cli("gate", "--base", "main", "--", sys.executable, "-m", "scripts.workloads", "--only", "ref_add_const", "--no-variants",
             db=tmp_path / "g.db", cwd=repo)
  assert "replay gate: this change is not exercised by any capture" in gate.stderr, gate.stderr
  quiet = cli("gate", "--base", "main", "--no-coverage", "--", sys.executable, "-m", "scripts.workloads", "--only", "ref_add_const",
              "--no-variants", db=tmp_path / "q.db", cwd=repo)
  assert "not exercised" not in quiet.stderr
