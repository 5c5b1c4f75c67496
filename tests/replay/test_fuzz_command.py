"""`replay fuzz` against revisions with a bug planted in the lowering (the C renderer), in the view algebra and in
the Tensor frontend: each reports a difference, and --save writes the programs that show it."""
import pytest
from tests.replay.conftest import cli, edit, commit_on_a
from scheduler.device import find_c_compiler

pytestmark = [pytest.mark.slow, pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler")]

PLANTS = {
  "lowering": ("runtimes/cpu.py", 'Ops.CMPLT: "<",', 'Ops.CMPLT: "<=",'),
  "view-algebra": ("scheduler/shape/view.py",
                   "return View.create(top.shape, strides, offset, tuple((0, 0) for _ in top.shape)) if top.shape else "
                   "None",
                   "return View.create(top.shape, strides, offset, tuple((0, 0) for _ in top.shape))"),
  "frontend": ("scheduler/tensor/movement.py", "for a in flipped: mask[a] = True",
               "for a in flipped[:1]: mask[a] = True"),
}


@pytest.mark.parametrize("where", sorted(PLANTS))
def test_a_planted_bug_at_the_base_is_a_difference(repo, tmp_path, where):
  path, old, new = PLANTS[where]
  commit_on_a(repo, f"bug-{where}", lambda root: edit(root, path, old, new))
  from tests.replay.conftest import git
  git(repo, "checkout", "-q", "main")
  save = tmp_path / "found"
  proc = cli("fuzz", "--base", f"bug-{where}", "--count", "60", "--seed", "5", "--save", str(save),
             db=tmp_path / "r.db", cwd=repo)
  assert proc.returncode in (1, 3), proc.stdout[-3000:] + proc.stderr[-2000:]
  assert "fuzz:5:" in proc.stdout
  assert list(save.glob("test_fuzz_5_*.py")), proc.stderr


def test_the_same_tree_as_base_is_all_same(repo, tmp_path):
  from tests.replay.conftest import git
  git(repo, "checkout", "-q", "main")
  proc = cli("fuzz", "--base", "main", "--count", "15", "--seed", "2", db=tmp_path / "r.db", cwd=repo)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
  bad = cli("fuzz", "--base", "no-such-revision", "--count", "2", db=tmp_path / "r.db", cwd=repo)
  assert bad.returncode == 2 and "no-such-revision" in bad.stderr
