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
    return (("bad",) if int(sha[1:]) >= first else ("good",)), "", True
  found = first_change(commits, probe, ("good",))
  assert found.first == first and len(found.steps) == len(probed) <= max(1, n.bit_length()) and not found.ambiguous


@pytest.mark.parametrize("broken, first, ambiguous",
                         [({3}, 5, []), ({4}, 5, ["c4", "c5"]), ({2, 3, 4}, 5, ["c2", "c3", "c4", "c5"]),
                                                      ({5}, 6, ["c5", "c6"]), ({0, 1}, 0, ["c0", "c1", "c2"]),
                                                      ({7}, 9, [])])
def test_commits_that_cannot_be_probed_are_skipped_and_named(broken, first, ambiguous):
  commits = [f"c{i}" for i in range(9)]
  def probe(sha):
    i = int(sha[1:])
    if i in broken: return (), "does not import", False
    return (("bad",) if i >= first else ("good",)), "", True
  found = first_change(commits, probe, ("good",))
  assert {s.sha for s in found.steps if s.skipped} <= {f"c{i}" for i in broken}
  if ambiguous: assert found.ambiguous == ambiguous
  else: assert found.first == first and not found.ambiguous


def test_signature_ignores_timing_and_order():
  a = [{"capture_id": 2, "status": "same", "diff": "", "seconds": 1.0},
       {"capture_id": 1, "status": "changed", "diff": "x", "seconds": 2.0}]
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
  assert ("first commit that changes the outcome:" in proc.stdout
          and "C: no realize before expand" in proc.stdout.split("first commit")[1])
  # it ends with the culprit and its change, never with a verdict line that reads like a pass
  tail = proc.stdout.split("first commit that changes the outcome:")[1]
  assert ("its change against its parent:" in tail and "scheduler/sched_grouping.py" in tail
          and "+  if False:" in tail), tail
  assert not proc.stdout.rstrip().splitlines()[-1].startswith("OK")
  assert "3 commits after main" in proc.stdout and proc.stdout.count("  differs") + proc.stdout.count("  as good") <= 2
  bad = cli("bisect", "--good", "history", "--bad", "main", db=db, cwd=repo)
  assert bad.returncode == 2 and "not a descendant" in bad.stderr


@pytest.mark.slow
@pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler")
def test_bisect_skips_a_commit_that_cannot_be_replayed_and_names_it(repo, tmp_path):
  commit_on_a(repo, "broken-middle", lambda r: edit(r, *NO_REALIZE_EXPAND), "C: no realize before expand")
  helpers = repo / "scheduler" / "helpers.py"
  text = helpers.read_text()
  helpers.write_text(text + "\ndef broken(:\n"); git(repo, "commit", "-qam", "X: a syntax error")
  helpers.write_text(text); git(repo, "commit", "-qam", "D: fixed again")
  db = tmp_path / "r.db"
  capture_workloads(db, *WORKLOADS, cwd=repo)
  proc = cli("bisect", "--good", "main", "--bad", "broken-middle", db=db, cwd=repo)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert ("  skipped" in proc.stdout
          and "X: a syntax error" in proc.stdout.split("skipped (could not be probed):")[1]), proc.stdout
  assert "C: no realize before expand" in proc.stdout.split("first commit that changes the outcome:")[1]
