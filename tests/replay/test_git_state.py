"""The run's git state: asked of git, and answered from the cache only while nothing git read changed."""
import os, subprocess
import pytest
from replay import git_state as gs

GIT = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]


@pytest.fixture
def repo(tmp_path, monkeypatch):
  monkeypatch.delenv("REPLAY_CACHE_DIR", raising=False)   # the cache goes into each work tree's .replay/
  monkeypatch.setattr(gs, "RACY_SECONDS", 0.0)   # files made just now count as settled (one test sets it back)
  for name in gs._GIT_ENV: monkeypatch.delenv(name, raising=False)
  work = tmp_path / "work"
  work.mkdir()
  subprocess.run([*GIT, "init", "-q"], cwd=work, check=True)
  (work / "a.txt").write_text("1\n")
  (work / "sub").mkdir()
  (work / "sub" / "b.txt").write_text("b\n")
  subprocess.run([*GIT, "add", "."], cwd=work, check=True)
  subprocess.run([*GIT, "commit", "-q", "-m", "x"], cwd=work, check=True)
  return work


def _ask(cwd) -> tuple[gs.GitQuery, tuple]:
  query = gs.GitQuery(str(cwd))
  return query, query.result(wait=True)


def test_the_second_run_is_answered_from_the_cache_without_git(repo):
  head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
  first, answer = _ask(repo)
  assert first.proc is not None and answer == (head, 0) == gs.git_state(str(repo))
  second, again = _ask(repo / "sub")   # from a folder inside the work tree too
  assert second.proc is None and again == answer


@pytest.mark.parametrize("change", ["edit", "same_size_and_mtime", "delete", "chmod", "stage", "commit", "checkout",
                                    "config"])
def test_any_change_git_would_see_asks_git_again(repo, change):
  _ask(repo)
  a = repo / "a.txt"
  if change == "edit": a.write_text("22\n")
  elif change == "same_size_and_mtime":   # only the change time tells this edit apart
    st = os.stat(a)
    a.write_text("2\n")
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))
  elif change == "delete": a.unlink()
  elif change == "chmod": a.chmod(0o755)
  elif change == "stage":
    (repo / "new.txt").write_text("n\n")
    subprocess.run([*GIT, "add", "new.txt"], cwd=repo, check=True)
  elif change == "commit": subprocess.run([*GIT, "commit", "-q", "--allow-empty", "-m", "y"], cwd=repo, check=True)
  elif change == "checkout": subprocess.run(["git", "checkout", "-q", "-b", "other"], cwd=repo, check=True)
  elif change == "config": subprocess.run(["git", "config", "core.fileMode", "false"], cwd=repo, check=True)
  query, answer = _ask(repo)
  assert query.proc is not None, "answered from a cache that no longer holds"
  assert answer == gs.git_state(str(repo))
  if change in ("edit", "same_size_and_mtime", "delete", "chmod", "stage"): assert answer[1] == 1
  # and the new answer is cached in turn
  cached, again = _ask(repo)
  assert cached.proc is None and again == answer


def test_files_git_does_not_track_change_nothing(repo):
  _ask(repo)
  (repo / "untracked.txt").write_text("x\n")
  query, answer = _ask(repo)
  assert query.proc is None and answer[1] == 0


def test_an_answer_given_while_files_were_changing_is_not_kept(repo, monkeypatch):
  monkeypatch.setattr(gs, "RACY_SECONDS", 3600.0)   # every file changed within the margin: git may have raced an edit
  for _ in range(2): assert _ask(repo)[0].proc is not None
  assert not os.path.exists(gs.Repository.around(str(repo)).cache_path)


def test_repositories_git_finds_by_more_than_their_files_are_always_asked(repo, monkeypatch, tmp_path):
  monkeypatch.setenv("GIT_DIR", str(repo / ".git"))
  assert gs.Repository.around(str(repo)) is None
  monkeypatch.delenv("GIT_DIR")
  subprocess.run(["git", "config", "include.path", str(tmp_path / "more.cfg")], cwd=repo, check=True)
  for _ in range(2): assert _ask(repo)[0].proc is not None   # config includes: not watched, so never cached
  assert gs.Repository.around(str(tmp_path)) is None   # outside any repository
  assert gs.GitQuery(str(tmp_path)).result(wait=True) == (None, None)


def _git_finds_a_repository(folder) -> bool:
  return subprocess.run(["git", "rev-parse", "--git-dir"], cwd=folder, capture_output=True).returncode == 0


def test_outside_every_repository_no_git_is_started(tmp_path, monkeypatch):
  for name in gs._GIT_ENV: monkeypatch.delenv(name, raising=False)
  plain = tmp_path / "plain" / "deeper"
  plain.mkdir(parents=True)
  if _git_finds_a_repository(plain): pytest.skip("the temporary folder lies inside a git repository")
  query, answer = _ask(plain)
  assert query.proc is None and answer == (None, None) == gs.git_state(str(plain))


def test_folders_git_takes_for_a_git_directory_are_asked_of_git(repo, tmp_path, monkeypatch):
  head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
  bare = tmp_path / "bare.git"
  subprocess.run([*GIT, "clone", "-q", "--bare", str(repo), str(bare)], check=True)
  for folder in (bare, bare / "refs", repo / ".git" / "refs"):   # a bare repository, folders inside git directories
    assert _git_finds_a_repository(folder) and not gs.outside_repositories(str(folder))
    assert gs.GitQuery(str(folder)).proc is not None
  monkeypatch.setenv("GIT_DIR", str(repo / ".git"))   # a variable git finds the repository by, from anywhere
  elsewhere = tmp_path / "elsewhere"
  elsewhere.mkdir()
  query, answer = _ask(elsewhere)
  assert query.proc is not None and answer[0] == head


def test_a_submodule_keeps_the_repository_out_of_the_cache():
  listed = b"100644 " + b"0" * 40 + b" 0\ta.txt\x00160000 " + b"1" * 40 + b" 0\tlib\x00"
  assert gs._tracked_paths(listed) is None
  assert gs._tracked_paths(listed.split(b"\x00")[0] + b"\x00") == ["a.txt"]


def test_a_linked_work_tree_has_a_cache_of_its_own(repo, tmp_path):
  linked = tmp_path / "linked"
  subprocess.run(["git", "worktree", "add", "-q", "--detach", str(linked)], cwd=repo, check=True)
  main, other = gs.Repository.around(str(repo)), gs.Repository.around(str(linked))
  assert other.root == str(linked) and os.path.samefile(other.common_dir, repo / ".git")
  assert main.cache_path != other.cache_path
  _ask(linked)
  query, answer = _ask(linked)
  assert query.proc is None and answer == gs.git_state(str(linked))
  (linked / "a.txt").write_text("changed\n")
  assert _ask(linked)[1][1] == 1 and _ask(repo)[1][1] == 0


def test_a_damaged_cache_is_asked_around(repo):
  _ask(repo)
  path = gs.Repository.around(str(repo)).cache_path
  for damage in ("not json", "[]", '{"version": 1, "root": "%s", "answer": 3}' % repo):
    with open(path, "w") as fh: fh.write(damage)
    query, answer = _ask(repo)
    assert query.proc is not None and answer == gs.git_state(str(repo))


def test_a_cache_lookup_that_fails_unforeseen_asks_git(repo, monkeypatch):
  _ask(repo)
  def broken(self, cache): raise AttributeError("'list' object has no attribute 'items'")
  monkeypatch.setattr(gs.Repository, "cached_answer", broken)
  query, answer = _ask(repo)
  assert query.proc is not None and answer == gs.git_state(str(repo))


def test_a_repository_with_more_files_than_a_check_is_worth_is_always_asked(repo, monkeypatch):
  monkeypatch.setattr(gs, "MAX_CACHED_FILES", 1)   # the fixture's repository tracks two
  for _ in range(2): assert _ask(repo)[0].proc is not None
