"""Helpers for harness tests: a private database per test and a way to run the CLI as a user would."""
import os, pathlib, shutil, subprocess, sys
import pytest
from tests.conftest import REPO


@pytest.fixture
def replay_db(tmp_path, monkeypatch):
  path = tmp_path / "replay.db"
  monkeypatch.setenv("REPLAY_DB", str(path))
  import replay.capture as capture
  monkeypatch.setattr(capture, "SINK", capture._Sink())
  return path


def cli(*args: str, db=None, cwd=REPO, env_extra=None, timeout=600) -> subprocess.CompletedProcess:
  env = {**os.environ, "PYTHONPATH": str(REPO), **({"REPLAY_DB": str(db)} if db else {}), **(env_extra or {})}
  env.pop("PYTEST_CURRENT_TEST", None)
  env.pop("CAPTURE_PROCESS_REPLAY", None)
  return subprocess.run([sys.executable, "-m", "replay", *args], cwd=cwd, env=env, capture_output=True, text=True,
                        timeout=timeout)


def capture_workloads(db, *names: str, cwd=REPO) -> subprocess.CompletedProcess:
  proc = cli("capture", "--", sys.executable, "-m", "scripts.workloads", "--only", *names, db=db, cwd=cwd)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  return proc


def git(root, *args):
  return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
  root = tmp_path_factory.mktemp("project")
  files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
  for f in files:
    if not (REPO / f).exists(): continue
    (root / f).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(REPO / f, root / f)
  git(root, "init", "-q", "-b", "main")
  git(root, "config", "user.email", "t@example.com"); git(root, "config", "user.name", "t")
  git(root, "add", "-A"); git(root, "commit", "-qm", "A")
  return root


def edit(root: pathlib.Path, path: str, old: str, new: str):
  p = root / path
  text = p.read_text()
  assert old in text, f"{old!r} not in {path}"
  p.write_text(text.replace(old, new, 1))


def commit_on_a(root, branch: str, change, message: str = "") -> str:
  git(root, "checkout", "-q", "-B", branch, git(root, "rev-list", "--max-parents=0", "HEAD"))
  change(root)
  git(root, "add", "-A"); git(root, "commit", "-qm", message or branch)
  return git(root, "rev-parse", "HEAD")




def rename_view_module(root: pathlib.Path) -> None:
  """A head that renames a compiler module: captures made there name a module the base does not have."""
  git(root, "mv", "scheduler/shape/view.py", "scheduler/shape/views.py")
  # tracked files only: cached worktrees of other revisions stay as they are
  for name in git(root, "ls-files", "*.py").split():
    if "scheduler.shape.view import" in (text := (p := root / name).read_text()):
      p.write_text(text.replace("scheduler.shape.view import", "scheduler.shape.views import"))


def bump_contract(root: pathlib.Path) -> None:
  """A head whose replay contract changed meaning (version 2, reading only 2): the base cannot replay its captures."""
  edit(root, "scheduler/contract.py", "VERSION = 1\nREADS = frozenset({1})", "VERSION = 2\nREADS = frozenset({2})")


# a fusion-rule change: an elementwise op is no longer realized before an expand (S39)
NO_REALIZE_EXPAND = ("scheduler/sched_grouping.py",
                     "if resolve(prod(t.shape) < prod(view.shape)) and not DONT_REALIZE_EXPAND:",
                     "if False:")
