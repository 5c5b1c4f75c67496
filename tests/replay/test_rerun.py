"""End-to-end mode (`replay diff --rerun`) and flag defaults, across revisions of a throw-away repository: a frontend
bug the captured graph already contains, a changed flag default, an unchanged head, and a nondeterministic program."""
import json, sys, textwrap
import pytest
from db import Store
from tests.replay.conftest import cli, capture_workloads, git, edit, commit_on_a
from tests.replay.test_revisions_e2e import statuses
from scheduler.device import find_c_compiler

pytestmark = [pytest.mark.slow, pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler")]
# relu lets small negative values through: a frontend bug, already in the graph that head captures
LEAKY_RELU = ("scheduler/tensor/elementwise.py", '"relu": lambda x: (x > 0).where(x, 0),',
              '"relu": lambda x: (x > -0.05).where(x, 0),')


def test_a_frontend_bug_is_invisible_to_replay_and_a_mismatch_end_to_end(repo, tmp_path):
  commit_on_a(repo, "leaky-relu", lambda r: edit(r, *LEAKY_RELU))
  db = tmp_path / "r.db"
  capture_workloads(db, "mlp_sgd", cwd=repo)
  plain = cli("diff", "--base", "main", db=db, cwd=repo)
  assert plain.returncode == 0, plain.stdout + plain.stderr   # the base replays head's graph: nothing to see
  proc = cli("diff", "--base", "main", "--rerun", db=db, cwd=repo)
  assert proc.returncode == 3, proc.stdout + proc.stderr
  st = statuses(proc.stdout)
  assert st["exec"]["mismatch"] >= 1 and st["schedule"]["changed"] >= 1, proc.stdout
  assert "end to end (the command run with the base" in proc.stdout and "elements differ" in proc.stdout
  assert "rerun end to end" in proc.stdout and "nondeterministic" in proc.stdout
  s = Store(str(db))
  runs = list(s.db.query("SELECT id, rerun_of, tree, exit_code FROM runs ORDER BY id"))
  assert [r["rerun_of"] for r in runs] == [None, runs[0]["id"],
                                           runs[0]["id"]] and all(r["exit_code"] == 0 for r in runs)
  assert s.latest_run_id() == runs[0]["id"]   # reruns never become "the latest run"
  # the json report carries the notes and the same verdict
  rep = cli("report", "--format", "json", db=db, cwd=repo)
  doc = json.loads(rep.stdout)
  assert rep.returncode == 3 and any("rerun end to end" in n for n in doc["notes"])


def test_an_unchanged_head_is_same_end_to_end(repo, tmp_path):
  git(repo, "checkout", "-q", "main")
  db = tmp_path / "r.db"
  capture_workloads(db, "mlp_sgd", "ref_add_const", cwd=repo)
  proc = cli("diff", "--base", "main", "--rerun", db=db, cwd=repo)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  st = statuses(proc.stdout)
  assert all(v["same"] == v["total"] > 0 for v in st.values()), proc.stdout


def test_a_nondeterministic_program_is_reported_as_such_not_as_a_regression(repo, tmp_path):
  git(repo, "checkout", "-q", "main")
  (tmp_path / "noisy.py").write_text(textwrap.dedent("""
    import numpy as np
    from scheduler import Tensor
    x = Tensor(np.random.default_rng().random(8).astype(np.float32))
    print((x * 2 + 1).realize().numpy())
  """))
  db = tmp_path / "r.db"
  assert cli("capture", "--", sys.executable, str(tmp_path / "noisy.py"), db=db, cwd=repo).returncode == 0
  proc = cli("diff", "--base", "main", "--rerun", db=db, cwd=repo)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  out = proc.stdout.splitlines()
  row = next(l for l in out if l.startswith("exec"))
  assert row.split()[-1] != "0" and "two runs of the same code already differ" in proc.stdout, proc.stdout


def test_a_changed_flag_default_is_reported_and_replayed_with_the_base_default(repo, tmp_path):
  # head stops splitting big reduces by default; the captures record SPLIT_REDUCEOP=0 and a plain replay reapplies it
  commit_on_a(repo, "no-split",
              lambda r: edit(r, "scheduler/helpers.py", 'SPLIT_REDUCEOP = ContextVar("SPLIT_REDUCEOP", 1)',
                                               'SPLIT_REDUCEOP = ContextVar("SPLIT_REDUCEOP", 0)'))
  db = tmp_path / "r.db"
  code = "from scheduler import Tensor\nprint(Tensor.ones(1 << 18).contiguous().realize().sum().item())"
  assert cli("capture", "--", sys.executable, "-c", code, db=db, cwd=repo).returncode == 0
  proc = cli("diff", "--base", "main", db=db, cwd=repo)
  assert "SPLIT_REDUCEOP: 1 in the base, 0 in the captured run" in proc.stdout, proc.stdout + proc.stderr
  st = statuses(proc.stdout)
  assert (st["schedule"]["changed"] >= 1
          and "with the base's flag defaults (SPLIT_REDUCEOP=1)" in proc.stdout), proc.stdout
  for fmt, text in (("markdown", "SPLIT_REDUCEOP"), ("html", "SPLIT_REDUCEOP"), ("junit", "SPLIT_REDUCEOP")):
    assert text in cli("report", "--format", fmt, db=db, cwd=repo).stdout


# an optimizer that realizes the gradients before its update: one more realize (a schedule, its kernels) per step
REALIZE_GRADS = ("scheduler/nn/optim.py", "    return [*self._update(grads), *self.params, *self.buffers]",
                 "    Tensor.realize(*grads)\n    return [*self._update(grads), *self.params, *self.buffers]")


def test_a_change_that_adds_a_realize_is_a_scheduling_change_not_a_mismatch(repo, tmp_path):
  commit_on_a(repo, "realize-grads", lambda r: edit(r, *REALIZE_GRADS))
  db = tmp_path / "r.db"
  capture_workloads(db, "mlp_sgd", cwd=repo)
  proc = cli("diff", "--base", "main", "--rerun", db=db, cwd=repo)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  st = statuses(proc.stdout)
  assert sum(row["mismatch"] + row["error"] for row in st.values()) == 0, proc.stdout
  # each of the 5 steps (on the 6 configurations of the workload) realizes the 4 gradients once more
  assert st["exec"]["added"] == 30 and st["schedule"]["added"] == 30, proc.stdout
  assert "captures added and" in proc.stdout and "added" in proc.stdout.splitlines()[-1], proc.stdout
  added = cli("report", "--status", "added", "--kind", "exec", db=db, cwd=repo).stdout
  assert "[exec] added" in added and "realize float[32, 16] float[32] float[4, 32] float[4]" in added, added
  assert "a realize, schedule or kernel the change added" in added
  # the realize that follows pairs with its true counterpart: the step's update is the same, its schedule smaller
  assert st["exec"]["same"] == st["exec"]["total"] - 30
  promised = cli("diff", "--base", "main", "--rerun", "--expect-no-change", db=db, cwd=repo)
  assert promised.returncode == 1 and "promised no kernel change" in promised.stdout, promised.stdout


FLAKY = textwrap.dedent("""
  import os, signal, sys
  from scheduler import Tensor
  counter, fail_on = sys.argv[1], {int(n) for n in sys.argv[2].split(",") if n}
  n = int(open(counter).read()) + 1 if os.path.exists(counter) else 1
  open(counter, "w").write(str(n))
  print((Tensor([1.0, 2.0]) * 2).realize().numpy())
  if n in fail_on: os.kill(os.getpid(), signal.SIGBUS)   # as a run whose memory-mapped file another process truncated
""")


@pytest.mark.parametrize("fail_on, code", [("2", 0), ("2,3", 4)])
def test_a_rerun_that_crashes_is_retried_once_and_never_makes_captures_nondeterministic(repo, tmp_path, fail_on, code):
  git(repo, "checkout", "-q", "main")
  (tmp_path / "flaky.py").write_text(FLAKY)
  db = tmp_path / "r.db"
  cmd = [sys.executable, str(tmp_path / "flaky.py"), str(tmp_path / "count"), fail_on]
  assert cli("capture", "--", *cmd, db=db, cwd=repo).returncode == 0
  proc = cli("diff", "--base", "main", "--rerun", db=db, cwd=repo)
  assert proc.returncode == code, proc.stdout + proc.stderr
  assert "nondeterministic" not in proc.stdout.split("\n", 3)[3], proc.stdout   # (beyond the table's header)
  assert "running it once more" in proc.stderr
  if code:
    assert "failed twice with main" in proc.stdout and "end-to-end comparison is incomplete" in proc.stdout, proc.stdout


def test_a_program_the_base_cannot_run_is_incompatible_not_a_crash(repo, tmp_path):
  # head adds a Tensor method and the program calls it: the base raises AttributeError, the same way twice
  commit_on_a(repo, "new-method",
              lambda r: edit(r, "scheduler/tensor/elementwise.py", "  def hardtanh(self, min_val=-1, max_val=1):",
                                                 "  def twice(self): return self * 2\n\n  def hardtanh(self, "
                                                 "min_val=-1, max_val=1):"))
  program = repo / "uses_new.py"   # in the tree, so that it imports the tree's compiler
  program.write_text("from scheduler import Tensor\nprint((Tensor([1.0, 2.0]) + 1).realize().numpy())\n"
                     "print(Tensor([1.0, 2.0]).twice().realize().numpy())\n")
  db = tmp_path / "r.db"
  captured = cli("capture", "--", sys.executable, str(program), db=db, cwd=repo)
  assert captured.returncode == 0, captured.stderr
  proc = cli("diff", "--base", "main", "--rerun", db=db, cwd=repo)
  assert (proc.returncode == 4 and "the base cannot run this program" in proc.stdout
          and "--allow-incompatible lets this through" in proc.stdout), proc.stdout
  allowed = cli("diff", "--base", "main", "--rerun", "--allow-incompatible", db=db, cwd=repo)
  assert allowed.returncode == 0, allowed.stdout + allowed.stderr
  st = statuses(allowed.stdout)
  assert (st["exec"]["added"] >= 1 and st["exec"]["same"] >= 1
          and "nondeterministic" not in allowed.stdout.split("\n", 3)[3])
