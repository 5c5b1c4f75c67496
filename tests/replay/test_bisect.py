"""`replay bisect`: the search on its own, and end to end over a small history with one fusion-rule change."""
import pytest
from replay.bisect import first_change, signature
from tests.replay.conftest import cli, capture_workloads, git, edit, commit_on_a, NO_REALIZE_EXPAND
from tests.replay.test_revisions_e2e import WORKLOADS
from scheduler.device import find_c_compiler


@pytest.mark.parametrize("n, first", [(1, 0), (1, 1), (7, 0), (7, 3), (7, 6), (7, 7), (16, 9)])
def test_binary_search_finds_the_first_differing_commit_in_log_steps(n, first):
  commits = [f"c{i}" for i in range(n)]
  probed = []
  def probe(sha):
    probed.append(sha)
    return (("bad",) if int(sha[1:]) >= first else ("good",)), ""
  found, steps = first_change(commits, probe, ("good",))
  assert found == first and len(steps) == len(probed) <= max(1, n.bit_length())


def test_signature_ignores_timing_and_order():
  a = [{"capture_id": 2, "status": "same", "diff": "", "seconds": 1.0}, {"capture_id": 1, "status": "changed", "diff": "x", "seconds": 2.0}]
  b = [{**a[1], "seconds": 9.0}, {**a[0], "seconds": 0.1}]
  assert signature(a) == signature(b) and signature(a) != signature([{**a[0]}, {**a[1], "diff": "y"}])


@pytest.mark.slow
@pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler")
def test_bisect_names_the_commit_that_changed_the_kernels(repo, tmp_path):
  commit_on_a(repo, "history", lambda r: (r / "NOTES.md").write_text("one\n"), "B: notes")
  edit(repo, *NO_REALIZE_EXPAND); git(repo, "commit", "-qam", "C: no realize before expand")
  (repo / "NOTES.md").write_text("two\n"); git(repo, "commit", "-qam", "D: more notes")
  db = tmp_path / "r.db"
  capture_workloads(db, *WORKLOADS, cwd=repo)   # captured at D
  proc = cli("bisect", "--good", "main", "--bad", "history", db=db, cwd=repo)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert "first commit that changes the outcome:" in proc.stdout and "C: no realize before expand" in proc.stdout.split("first commit")[1]
  assert "3 commits after main" in proc.stdout and proc.stdout.count("  differs") + proc.stdout.count("  as good") <= 2
  bad = cli("bisect", "--good", "history", "--bad", "main", db=db, cwd=repo)
  assert bad.returncode == 2 and "not a descendant" in bad.stderr
