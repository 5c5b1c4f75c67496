"""Helpers for harness tests: a private database per test and a way to run the CLI as a user would."""
import os, subprocess, sys
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
  return subprocess.run([sys.executable, "-m", "replay", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def capture_workloads(db, *names: str, cwd=REPO) -> subprocess.CompletedProcess:
  proc = cli("capture", "--", sys.executable, "-m", "scripts.workloads", "--only", *names, db=db, cwd=cwd)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  return proc
