"""The seam is real: a second system under test, the toy compiler in tests/replay/toy_sut (its own IR, frontend and
contract module, nothing of `scheduler/`), goes through capture, replay, diff and report with the unchanged harness."""
import json, os, pathlib, shutil, sys
import pytest
from tests.replay.conftest import cli, git, edit, commit_on_a

TOY = pathlib.Path(__file__).resolve().parent / "toy_sut"


@pytest.fixture(scope="module")
def toy_repo(tmp_path_factory):
  root = tmp_path_factory.mktemp("toy")
  shutil.copytree(TOY, root, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
  git(root, "init", "-q", "-b", "main")
  git(root, "config", "user.email", "t@example.com"); git(root, "config", "user.name", "t")
  git(root, "add", "-A"); git(root, "commit", "-qm", "toy A")
  return root


def capture(root, db, env_extra=None):
  proc = cli("capture", "--", sys.executable, "prog.py", db=db, cwd=root, env_extra=env_extra)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert "captured 3 schedule, 3 kernel, 3 exec" in proc.stdout, proc.stdout
  return proc


def table(stdout: str) -> dict:
  rows = {}
  for line in stdout.splitlines():
    parts = line.split()
    if parts and parts[0] in ("schedule", "kernel", "exec") and len(parts) > 3 and parts[1].isdigit():
      rows[parts[0]] = dict(zip(("total", "same", "changed", "added", "removed", "mismatch", "error", "incompatible"),
                                map(int, parts[1:])))
  return rows


def test_capture_and_replay_of_the_toy_compiler_are_the_same(toy_repo, tmp_path):
  git(toy_repo, "checkout", "-q", "main")
  db = tmp_path / "r.db"
  capture(toy_repo, db, env_extra={"TOY_UNROLL": "4"})   # a flag of the toy, recorded and applied again on replay
  proc = cli("run", db=db, cwd=toy_repo)
  assert proc.returncode == 0 and "all 9 captures replay the same" in proc.stdout, proc.stdout + proc.stderr
  shown = cli("show", "2", db=db, cwd=toy_repo)
  assert (shown.returncode == 0 and "flags TOY_UNROLL=4" in shown.stdout
          and "PARAM 'float32' 0" in shown.stdout), shown.stdout
  assert "#pragma unroll(4)" in shown.stdout and "location prog.py:" in shown.stdout
  assert cli("diff", "--base", "main", db=db, cwd=toy_repo).returncode == 0


def test_a_changed_kernel_of_the_toy_is_changed_and_fails_a_no_change_promise(toy_repo, tmp_path):
  commit_on_a(toy_repo, "toy-render", lambda r: edit(r, "toyc/ir.py", 'f"({names[node.src[0]]}*{names[node.src[1]]})"',
                                                      'f"({names[node.src[1]]}*{names[node.src[0]]})"'))
  db = tmp_path / "r.db"
  capture(toy_repo, db)
  proc = cli("diff", "--base", "main", db=db, cwd=toy_repo)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  rows = table(proc.stdout)
  assert (rows["kernel"]["changed"] == 2 and rows["kernel"]["same"] == 1 and rows["exec"]["same"] == 3
          and rows["schedule"]["same"] == 3), proc.stdout
  assert "-out[i] = ((p0[i]*2.0)+1.0);" in proc.stdout and "+out[i] = ((2.0*p0[i])+1.0);" in proc.stdout, proc.stdout
  assert cli("diff", "--base", "main", "--expect-no-change", db=db, cwd=toy_repo).returncode == 1
  doc = json.loads(cli("report", "--format", "json", db=db, cwd=toy_repo).stdout)
  assert sorted(o["status"] for o in doc["outcomes"] if o["kind"] == "kernel") == ["changed", "changed", "same"]


def test_wrong_arithmetic_in_the_toy_is_a_mismatch_in_every_report(toy_repo, tmp_path):
  commit_on_a(toy_repo, "toy-add", lambda r: edit(r, "toyc/ir.py", "values[n] = values[n.src[0]] + values[n.src[1]]",
                                                   "values[n] = values[n.src[0]] + values[n.src[1]] + 1"))
  db = tmp_path / "r.db"
  capture(toy_repo, db)
  proc = cli("diff", "--base", "main", db=db, cwd=toy_repo)
  assert proc.returncode == 3, proc.stdout + proc.stderr
  rows = table(proc.stdout)
  assert rows["exec"]["mismatch"] == 2 and rows["exec"]["same"] == 1 and rows["kernel"]["same"] == 3, proc.stdout
  assert "prog.py:" in proc.stdout and "elements differ" in proc.stdout
  for fmt in ("markdown", "junit", "html"):
    out = tmp_path / f"report.{fmt}"
    assert cli("report", "--format", fmt, "--output", str(out), db=db, cwd=toy_repo).returncode == 3
    assert "mismatch" in out.read_text()
