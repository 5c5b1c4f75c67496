"""Is a change guarded: the probes of changed lines (replay/probes.py), `replay coverage`, and the gate failing on
changed lines that no capture's computation runs."""
import json, os, subprocess, sys, textwrap
import pytest
from replay import probes
from replay.coverage_check import ranges, describe, Guard
from tests.replay.conftest import cli, capture_workloads, commit_on_a, edit, git
from scheduler.device import find_c_compiler

NEVER_CALLED = "\n\ndef never_called_helper(x):\n  y = x + 1\n  return y * 2\n"
MODULE = textwrap.dedent('''
  """doc"""
  import math
  TABLE = {
    "a": lambda x: x + 1,
    "b": 2,
  }
  LIMIT = 10

  def f(x, y=3):
    """f's doc
    more"""
    # comment
    z = x + y
    if z > LIMIT:
      return z * 2
    elif z < 0:
      return -z

    return [i for i in range(z)]

  class C:
    k = 5
    def m(self): return self.k
''')


def test_ranges_and_descriptions():
  assert ranges([3, 4, 5, 9, 11, 12]) == "3-5, 9, 11-12" and ranges([]) == ""
  assert "touches no executable line" in describe(None) and "touches no executable line" in describe({"executable": 0})
  assert "every changed executable line" in describe(Guard({"a.py": probes.FilePlan([1, 2], [])},
                                                           {"a.py": {1, 2}}).to_json())
  doc = Guard({"a.py": probes.FilePlan([4, 5, 6], [9])}, {"a.py": {6}}).to_json()
  assert (doc["percent"] == 25.0 and describe(doc).startswith("unguarded: 3 of 4 changed executable lines")
          and "a.py:4-5, 9" in describe(doc))
  assert "1 of them run only while their module is imported" in describe(doc)


def test_the_plan_sorts_lines_into_runtime_import_only_and_not_code():
  plan = probes.plan_file(MODULE, set(range(1, 30)))
  # an import (run when the module loads), the lambda of a table entry, a def line, function-body statements, a method
  assert plan.runtime == [3, 5, 10, 14, 15, 16, 17, 18, 20, 24]
  # the rest of the table, constants, the class body run only at import; docstrings, comments, blank lines are not code
  assert plan.import_only == [4, 6, 8, 22, 23]   # (7 closes the table: no code)


def test_probes_fire_when_the_code_runs_not_when_the_module_is_imported():
  code, loads = probes.instrument(MODULE.encode(), "/x/mod.py", "mod.py", {3, 5, 6, 10, 14, 16, 17, 18, 24})
  assert loads == {3}   # a changed import counts as run when the module loads
  hits = []
  namespace = {probes.PROBE_NAME: lambda path, lines: hits.append(lines)}
  exec(code, namespace)
  assert hits == []   # defining the table and the functions runs no probe
  namespace["f"](1)
  # the call, its first statement and the elif it reaches; not the return it skips
  assert hits == [(10,), (14,), (17,)]
  hits.clear()
  namespace["TABLE"]["a"](1); namespace["C"]().m()
  assert hits == [(5,), (24,)]
  # a one-line `if c: return x` runs when its condition is tested, not only when it returns
  one_line = "def g(op):\n  if op == 1: return 'one'\n  if op == 2: return 'two'\n  return 'other'\n"
  hits.clear()
  exec(probes.instrument(one_line.encode(), "/x/g.py", "g.py", {2, 3})[0], namespace)
  namespace["g"](3)
  assert hits == [(2,), (3,)]


def test_installed_probes_record_lines_that_run_in_every_process(tmp_path):
  pkg = tmp_path / "sutpkg"
  pkg.mkdir()
  (pkg / "__init__.py").write_text("")
  (pkg / "mod.py").write_text(MODULE)
  (pkg / "other.py").write_text("from sutpkg.mod import f\nVALUE = f(1)\ndef g(): return f(20)\n")
  plan = {"sutpkg/mod.py": probes.plan_file(MODULE, {10, 14, 16, 17, 24})}
  probes.write_plan(plan, tmp_path, ("sutpkg",), tmp_path / "plan.json")
  (tmp_path / "hits").mkdir()
  env = {**os.environ, probes.PLAN_ENV: str(tmp_path / "plan.json"), probes.HITS_ENV: str(tmp_path / "hits"),
         "PYTHONPATH": os.pathsep.join([str(tmp_path), os.getcwd()])}
  script = "from replay import probes; probes.install()\nimport sutpkg.other\nsutpkg.other.g()\nimport os; os._exit(0)"
  subprocess.run([sys.executable, "-c", script], env=env, check=True, cwd=tmp_path)
  # f(1) at the import of sutpkg.other does not count; g() -> f(20) afterwards does, even though the process _exits
  assert probes.hits(tmp_path / "hits") == {"sutpkg/mod.py": {10, 14, 16}}
  assert (not list(pkg.glob("__pycache__/mod*.pyc"))
          or all(b"__replay_probe__" not in p.read_bytes() for p in pkg.glob("__pycache__/mod*")))


@pytest.mark.slow
@pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler")
def test_coverage_lists_changed_lines_no_replay_runs(repo, tmp_path):
  def change(r):
    (r / "scheduler" / "helpers.py").write_text((r / "scheduler" / "helpers.py").read_text() + NEVER_CALLED)
    edit(r, "runtimes/cpu.py", '  if op is Ops.NEG: return f"(-{s[0]})"', '  if op is Ops.NEG: return f"(-({s[0]}))"')
  commit_on_a(repo, "coverage-change", change)
  db = tmp_path / "r.db"
  capture_workloads(db, "ref_add_const", "ref_softmax", "--no-variants", cwd=repo)
  proc = cli("coverage", "--base", "main", db=db, cwd=repo)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  lines = proc.stdout.splitlines()
  assert (lines[0].startswith("unguarded: 3 of 4 changed executable lines")
          and "scheduler/helpers.py:" in lines[0]), proc.stdout
  assert not any("runtimes/cpu.py" in line for line in lines), proc.stdout   # the softmax replay renders a NEG


GATE_CMD = ["--", sys.executable, "-m", "scripts.workloads", "--only", "mlp_sgd", "--no-variants"]


@pytest.mark.slow
@pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler")
def test_the_gate_fails_on_unguarded_lines_unless_allowed(repo, tmp_path):
  def plant(root):
    helpers = root / "scheduler" / "helpers.py"
    helpers.write_text(helpers.read_text() + NEVER_CALLED)
  commit_on_a(repo, "unguarded", plant)
  proc = cli("gate", "--base", "main", *GATE_CMD, db=tmp_path / "g.db", cwd=repo)
  assert proc.returncode == 1, proc.stdout + proc.stderr
  assert ("FAIL: 0% of the changed executable lines run in a capture's computation" in proc.stdout
          and "scheduler/helpers.py:" in proc.stdout)
  allowed = cli("gate", "--base", "main", "--allow-unguarded", *GATE_CMD, db=tmp_path / "a.db", cwd=repo)
  assert (allowed.returncode == 0 and "guard: unguarded: 3 of 3" in allowed.stdout
          and "(allowed)" in allowed.stdout), allowed.stdout
  marker = cli("gate", "--base", "main", *GATE_CMD, db=tmp_path / "m.db", cwd=repo,
               env_extra={"PR_TITLE": "helpers [allow-unguarded]"})
  assert marker.returncode == 0, marker.stdout + marker.stderr
  # the threshold comes from [tool.replay]
  pyproject = repo / "pyproject.toml"
  pyproject.write_text(pyproject.read_text().replace('sut = ["scheduler", "runtimes"]',
                                                     'sut = ["scheduler", "runtimes"]\nchanged-lines-guarded = 0'))
  git(repo, "commit", "-qam", "no threshold")
  assert cli("gate", "--base", "main", *GATE_CMD, db=tmp_path / "t.db", cwd=repo).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler")
def test_a_gradient_table_entry_is_guarded_by_the_command_that_runs_it_and_a_constant_is_not(repo, tmp_path):
  # the entry's lambda runs when mlp_sgd computes gradients: the change is guarded (and end to end it mismatches)
  commit_on_a(repo, "mul-grad",
              lambda r: edit(r, "scheduler/gradient.py", "Ops.MUL: lambda g, out: (out.src[1] * g, out.src[0] * g),",
                                               "Ops.MUL: lambda g, out: (out.src[0] * g, out.src[1] * g),"))
  proc = cli("gate", "--base", "main", *GATE_CMD, db=tmp_path / "g.db", cwd=repo)
  assert proc.returncode == 3 and "guard: every changed executable line" in proc.stdout, proc.stdout + proc.stderr
  # a module-level constant runs only at import: not guarded by any capture, whatever uses it
  commit_on_a(repo, "threshold",
              lambda r: edit(r, "scheduler/codegen/lowerer.py", "UPCAST_MIN_WORK = 1 << 20",
                             "UPCAST_MIN_WORK = 1 << 21"))
  proc = cli("gate", "--base", "main", *GATE_CMD, db=tmp_path / "c.db", cwd=repo)
  assert (proc.returncode == 1
          and "1 of them run only while their module is imported" in proc.stdout), proc.stdout + proc.stderr


def test_error_paths_are_not_guarded_and_a_table_entry_naming_a_function_runs_with_it():
  source = textwrap.dedent('''
    def fold(x):
      if x < 0: raise ValueError("negative")
      if x > 100:
        raise ValueError("too big")
      return x + 1

    def unused(x): return x

    RULES = [
      ("fold", fold),
      ("unused", unused),
      ("constant", 3),
    ]
  ''')
  plan = probes.plan_file(source, set(range(1, 15)))
  # `if ...: raise` is probed at its test; a lone raise is exempt
  assert 3 in plan.runtime and 5 not in plan.runtime + plan.import_only
  assert {11, 12} <= set(plan.runtime) and 13 in plan.import_only
  code, _ = probes.instrument(source.encode(), "/x/r.py", "r.py", {11, 12, 13})
  hits = []
  namespace = {probes.PROBE_NAME: lambda path, lines: hits.append(lines)}
  exec(code, namespace)
  namespace["RULES"][0][1](5)
  assert hits == [(11,)]   # the entry naming `fold` ran with it; the one naming `unused` did not


@pytest.mark.slow
@pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler")
def test_refactors_stay_silent_restating_a_flag_renaming_a_rule_and_rewording_an_error(repo, tmp_path):
  def refactor(r):
    edit(r, "scheduler/helpers.py", 'FUSE_ARANGE = ContextVar("FUSE_ARANGE", 0)',
         'FUSE_ARANGE = ContextVar("FUSE_ARANGE", int(False))')
    text = (r / "scheduler" / "symbolic.py").read_text()
    (r / "scheduler" / "symbolic.py").write_text(text.replace("_fold_nested", "_fold_repeated_op"))
    edit(r, "scheduler/shape/view.py", 'raise ValueError(f"invalid shrink {arg} for {self.shape}")',
         'raise ValueError(f"shrink {arg} does not fit {self.shape}")')
  commit_on_a(repo, "refactors", refactor)
  proc = cli("gate", "--base", "main", *GATE_CMD, db=tmp_path / "g.db", cwd=repo)
  assert (proc.returncode == 0
          and "guard: every changed executable line" in proc.stdout), proc.stdout[-3000:] + proc.stderr[-2000:]
