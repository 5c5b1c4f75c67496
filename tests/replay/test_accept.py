"""Accepting expected kernel changes: the gate passes accepted changes (also from a committed file and for a new
capture of the same change), still fails changes nobody accepted and never accepts a mismatch; review walks them."""
import json
import pytest
from db import Store
from tests.replay.conftest import cli, capture_workloads, commit_on_a, edit, git, NO_REALIZE_EXPAND
from tests.replay.test_revisions_e2e import WORKLOADS
from scheduler.device import find_c_compiler

pytestmark = [pytest.mark.slow, pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler")]


def test_accepted_changes_pass_a_no_change_promise_and_survive_a_new_capture(repo, tmp_path):
  commit_on_a(repo, "accept-expand", lambda r: edit(r, *NO_REALIZE_EXPAND))
  db = tmp_path / "r.db"
  env = {"REPLAY_ACCEPTED": str(tmp_path / "accepted.json")}
  capture_workloads(db, *WORKLOADS, cwd=repo)
  first = cli("diff", "--base", "main", "--expect-no-change", db=db, cwd=repo, env_extra=env)
  assert first.returncode == 1, first.stdout
  proc = cli("accept", db=db, cwd=repo, env_extra=env)
  assert proc.returncode == 0 and proc.stdout.startswith("accepted "), proc.stdout + proc.stderr
  again = cli("diff", "--base", "main", "--expect-no-change", db=db, cwd=repo, env_extra=env)
  assert again.returncode == 0 and "accepted)" in again.stdout, again.stdout
  # a new capture of the same change shows the same diffs: still accepted
  capture_workloads(db, *WORKLOADS, cwd=repo)
  assert cli("diff", "--base", "main", "--expect-no-change", db=db, cwd=repo, env_extra=env).returncode == 0
  doc = json.loads(cli("report", "--format", "json", db=db, cwd=repo, env_extra=env).stdout)
  assert any(o["accepted"] for o in doc["outcomes"]) and not any(o["accepted"]
                                                                 and o["status"] != "changed" for o in doc["outcomes"])
  # exported to a file, the acceptances work from a fresh database too
  assert cli("accept", "--export", db=db, cwd=repo, env_extra=env).returncode == 0
  saved = json.loads((tmp_path / "accepted.json").read_text())
  assert saved["format"] == "replay-accepted/1" and saved["accepted"]
  fresh = tmp_path / "fresh.db"
  capture_workloads(fresh, *WORKLOADS, cwd=repo)
  assert cli("diff", "--base", "main", "--expect-no-change", db=fresh, cwd=repo, env_extra=env).returncode == 0
  assert all(e["base_commit"] == git(repo, "rev-parse", "main") for e in saved["accepted"])
  # scoped to the base: the same differences against another base need their own review
  git(repo, "branch", "-f", "other-base", "main"); git(repo, "checkout", "-q", "other-base")
  (repo / "NOTES.md").write_text("another base\n")
  git(repo, "add", "NOTES.md")
  git(repo, "commit", "-qm", "another base")
  git(repo, "checkout", "-q", "accept-expand")
  elsewhere = cli("diff", "--base", "other-base", "--expect-no-change", db=fresh, cwd=repo, env_extra=env)
  assert elsewhere.returncode == 1 and "accepted)" not in elsewhere.stdout, elsewhere.stdout
  # --export writes only the acceptances of the replay at hand: a stale one in the database is not committed
  s = Store(str(db))
  s.accept([{"kind": "schedule", "location": "a reverted experiment", "fingerprint": "0" * 20,
             "base_commit": saved["accepted"][0]["base_commit"]}])
  assert cli("diff", "--base", "main", db=db, cwd=repo, env_extra=env).returncode == 0
  assert cli("accept", "--export", db=db, cwd=repo, env_extra=env).returncode == 0
  again_saved = json.loads((tmp_path / "accepted.json").read_text())
  assert not any(e["location"] == "a reverted experiment" for e in again_saved["accepted"]) and again_saved["accepted"]
  # a broken file is a clear usage error
  (tmp_path / "accepted.json").write_text("{not json")
  bad = cli("report", db=fresh, cwd=repo, env_extra=env)
  assert bad.returncode == 2 and "cannot read accepted changes" in bad.stderr


def test_review_accepts_one_group_at_a_time_and_mismatches_cannot_be_accepted(repo, tmp_path):
  commit_on_a(repo, "review-mul", lambda r: edit(r, "runtimes/cpu.py", '  if op is Ops.CAST: return f"({ct})({s[0]})"',
              '  if op is Ops.MUL and dtypes.is_float(dtype): return f"({ct})({s[0]}*{s[1]}*1.001f)"\n  if op is '
              'Ops.CAST: return f"({ct})({s[0]})"'))
  db = tmp_path / "r.db"
  env = {"REPLAY_ACCEPTED": str(tmp_path / "none.json")}
  capture_workloads(db, *WORKLOADS, cwd=repo)
  assert cli("diff", "--base", "main", db=db, cwd=repo, env_extra=env).returncode == 3
  refused = cli("accept", "--status", "mismatch", db=db, cwd=repo, env_extra=env)
  assert refused.returncode == 2 and "only changes can be accepted" in refused.stderr
  import os, subprocess, sys
  from tests.conftest import REPO
  run_env = {**os.environ, "PYTHONPATH": str(REPO), "REPLAY_DB": str(db), **env}
  proc = subprocess.run([sys.executable, "-m", "replay", "review"], cwd=repo, env=run_env, input="d\na\n" + "s\n" * 50,
                        capture_output=True,
                        text=True, timeout=120)
  assert (proc.returncode == 0 and "[1/" in proc.stdout
          and "accepted " in proc.stdout.splitlines()[-1]), proc.stdout + proc.stderr
  report = cli("report", db=db, cwd=repo, env_extra=env)
  # accepted changes are marked; the mismatch still fails
  assert report.returncode == 3 and "(accepted)" in report.stdout


@pytest.mark.parametrize("text", ["[]", "7", "null", '"accepted"', '{"format": "replay-accepted/1", "accepted": [1]}',
                                  '{"format": "replay-accepted/1", "accepted": {"kind": "x"}}',
                                  '{"format": "other", "accepted": []}'])
def test_a_malformed_accepted_changes_file_is_a_one_line_error(tmp_path, text):
  from replay.accept import read_file, AcceptFileError
  path = tmp_path / "replay-accepted.json"
  path.write_text(text)
  with pytest.raises(AcceptFileError) as e: read_file(path)
  assert str(path) in str(e.value) and "\n" not in str(e.value)
