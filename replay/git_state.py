"""The git state a run records: (commit, whether tracked files differ from it) of the repository around the working
directory, asked of `git status`.

A capturing process asks while the program runs (`GitQuery`). Git costs a process of its own every run (about 2 ms of
CPU, a sixth of what capture adds to a process besides its captures), so its answer is kept in a cache with the state of
everything git read to give it: the repository's HEAD, refs, index and config, and the status of every tracked file. A
run that finds all of them as they were is answered from the cache, without git (checking them costs a quarter of it).

The cache is sound because every change to a file sets its change time (`ctime`) to the time of the change, and no
program can set it back: an answer is only kept when everything it depends on was last changed well before git started
(`RACY_SECONDS`), so whatever changes after git read it has a newer change time than the cache holds. A repository whose
state git also takes from elsewhere (a `GIT_*` variable that moves the repository or the config, config includes, a
separate work tree, submodules, the reftable format) is always asked of git. The cache is `git-state.json` in the
harness's cache folder of the repository (`replay/revisions.py`: REPLAY_CACHE_DIR, default `.replay/`).
"""
from __future__ import annotations
import json, os, pathlib, time
from typing import Any, Optional
from replay.revisions import cache_root

# --no-optional-locks: a status in the background must not take the index lock a git command of the user then misses
GIT_STATUS = ["git", "--no-optional-locks", "status", "--porcelain=v2", "--branch", "--untracked-files=no"]
GIT_TRACKED = ["git", "--no-optional-locks", "ls-files", "-z", "--stage"]
GIT_TIMEOUT = 10
RACY_SECONDS = 2.0
MAX_CACHED_FILES = 1000   # checking a file here costs about 2.6 us: beyond this many, git itself costs less
CACHE_VERSION = 1
# variables that move the repository, its work tree or index, or add config the files watched here do not hold
_GIT_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY",
            "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_CEILING_DIRECTORIES", "GIT_DISCOVERY_ACROSS_FILESYSTEM",
            "GIT_CONFIG", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_COUNT",
            "GIT_CONFIG_PARAMETERS", "GIT_NAMESPACE", "GIT_REPLACE_REF_BASE", "GIT_NO_REPLACE_OBJECTS")
_GITLINK = "160000"   # the mode of a submodule in the index: its state lives in a repository of its own


def git_state(cwd: Optional[str] = None) -> tuple[Optional[str], Optional[int]]:
  """(commit, whether tracked files differ from it) of the repository around `cwd`, or (None, None) outside one: one
  git process (`status --branch` names the commit), none outside every repository."""
  if outside_repositories(cwd): return None, None
  import subprocess
  try: status = subprocess.run(GIT_STATUS, cwd=cwd, capture_output=True, text=True, timeout=GIT_TIMEOUT)
  except (OSError, subprocess.SubprocessError): return None, None
  return git_answer(status.returncode, status.stdout)


def git_answer(returncode: int, stdout: str) -> tuple[Optional[str], Optional[int]]:
  if returncode != 0: return None, None
  lines = stdout.splitlines()
  commit = next((line.split()[2] for line in lines if line.startswith("# branch.oid ")), None)
  if commit is None or commit == "(initial)": return None, None
  return commit, int(any(not line.startswith("#") for line in lines))


class GitQuery:
  """`git_state` of the working directory, from the cache or asked of a git process that runs while the program goes
  on, its answer read once it exited: no thread of this process waits for it (a thread reading git's output took the
  interpreter from the program a few hundred times)."""
  def __init__(self, cwd: Optional[str] = None):
    self.started, self.started_ns = time.monotonic(), time.time_ns()
    self.proc, self.tracked = None, None
    try:
      self.repo = Repository.around(cwd)
      self.cache = self.repo.read_cache() if self.repo is not None else None
      self.answer = self.repo.cached_answer(self.cache) if self.repo is not None else None
    except Exception:   # the working directory is gone, or the cache is unreadable in a way not foreseen: git answers
      self.repo, self.cache, self.answer = None, None, None
    if self.answer is None and self.repo is None and outside_repositories(cwd): self.answer = (None, None)
    if self.answer is not None: return
    import subprocess   # here: a process that does not capture never starts one
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.DEVNULL, "stdin": subprocess.DEVNULL, "cwd": cwd}
    try: self.proc = subprocess.Popen(GIT_STATUS, text=True, **pipes)
    except OSError:
      self.answer = (None, None)
      return
    # the tracked files, when the index is not the one the cache listed them from
    if self.repo is not None and self.repo.paths_from(self.cache) is None:
      try: self.tracked = subprocess.Popen(GIT_TRACKED, **pipes)
      except OSError: pass   # answered all the same, not kept

  def result(self, wait: bool) -> Optional[tuple[Optional[str], Optional[int]]]:
    """The answer; None while git runs and `wait` is false. A git that outlives its timeout is stopped."""
    if self.answer is not None: return self.answer
    import subprocess
    if not wait and self.proc.poll() is None and time.monotonic() - self.started < GIT_TIMEOUT: return None
    left = lambda: max(0.0, GIT_TIMEOUT - (time.monotonic() - self.started))
    try:
      stdout, _ = self.proc.communicate(timeout=left())
      listed = self.tracked.communicate(timeout=left())[0] if self.tracked is not None else None
    except (OSError, subprocess.SubprocessError, ValueError):
      for proc in (self.proc, self.tracked):
        if proc is not None:
          proc.kill()
          proc.wait()
      self.answer = (None, None)
      return self.answer
    self.answer = git_answer(self.proc.returncode, stdout)
    if self.repo is not None and self.answer[0] is not None:
      listed_ok = listed is not None and self.tracked.returncode == 0
      paths = _tracked_paths(listed) if listed_ok else self.repo.paths_from(self.cache)
      try: self.repo.write_cache(self.answer, paths, self.started_ns)
      except (OSError, ValueError): pass   # the next run asks git again
    return self.answer


def outside_repositories(cwd: Optional[str] = None) -> bool:
  """Whether git would find no repository from `cwd`: no `GIT_*` variable that points it elsewhere, and neither a
  `.git` nor a folder that looks like a git directory itself (HEAD, objects and refs: a bare repository, or a folder
  inside `.git`) in `cwd` or above it. A program run outside any repository then starts no git process to be told so
  (starting one costs a large process more CPU than everything else capture sets up)."""
  if any(name in os.environ for name in _GIT_ENV): return False
  try: here = os.path.abspath(cwd or os.getcwd())
  except OSError: return False   # the working directory is gone: git says what it makes of that
  while True:
    if os.path.lexists(os.path.join(here, ".git")) or (
        os.path.exists(os.path.join(here, "HEAD")) and os.path.isdir(os.path.join(here, "objects"))
        and os.path.isdir(os.path.join(here, "refs"))): return False
    parent = os.path.dirname(here)
    if parent == here: return True
    here = parent


def _tracked_paths(listed: bytes) -> Optional[list[str]]:
  """The paths of `ls-files -z --stage` output, None when a submodule is among them."""
  paths = []
  for entry in listed.split(b"\0"):
    if not entry: continue
    info, _, path = entry.partition(b"\t")
    if info.split(b" ", 1)[0].decode() == _GITLINK: return None
    paths.append(os.fsdecode(path))
  return sorted(set(paths))   # a file in conflict is listed once per stage


def _stat(path: str) -> Optional[list[int]]:
  """What a change to the file changes: mode, inode, size, modification and change time; None for no file."""
  try: st = os.lstat(path)
  except OSError: return None
  return [st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


class Repository:
  """A repository found from a directory the way git finds it: its work tree, its git directory and the directory
  it shares refs and config with (a linked work tree's main repository)."""
  def __init__(self, root: str, git_dir: str, common_dir: str):
    self.root, self.git_dir, self.common_dir = root, git_dir, common_dir
    # one per work tree; a cache folder several repositories share holds the last one's (`root` tells them apart)
    self.cache_path = str(cache_root(pathlib.Path(root)) / "git-state.json")

  @staticmethod
  def around(cwd: Optional[str] = None) -> Optional["Repository"]:
    """The repository around `cwd`, None outside one or when git would not find it from the files alone."""
    if any(name in os.environ for name in _GIT_ENV): return None
    here = os.path.abspath(cwd or os.getcwd())
    while True:
      dot = os.path.join(here, ".git")
      if os.path.isdir(dot): git_dir = dot
      elif os.path.isfile(dot):   # a linked work tree: `gitdir: <path>`
        try:
          with open(dot, encoding="utf-8") as fh: line = fh.read().strip()
        except (OSError, UnicodeDecodeError): return None
        if not line.startswith("gitdir:"): return None
        git_dir = os.path.join(here, line[len("gitdir:"):].strip())
      else:
        parent = os.path.dirname(here)
        if parent == here: return None
        here = parent
        continue
      common_dir = git_dir
      try:
        with open(os.path.join(git_dir, "commondir"), encoding="utf-8") as fh:
          common_dir = os.path.join(git_dir, fh.read().strip())
      except FileNotFoundError: pass
      except (OSError, UnicodeDecodeError): return None
      if os.path.exists(os.path.join(common_dir, "reftable")): return None
      return Repository(here, git_dir, common_dir)

  def watched(self, read_config: bool = True) -> Optional[dict[str, Optional[list[int]]]]:
    """The state of the repository's own files a status reads (HEAD and the ref it names, the packed refs, the index,
    config and attributes), None when git reads more than these (config includes, a work tree set in config: read
    when the cache is written, and unchanged while their state is)."""
    home = os.path.expanduser("~")
    config_home = os.getenv("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    configs = [os.path.join(self.git_dir, "config"), os.path.join(self.common_dir, "config"),
               os.path.join(home, ".gitconfig"), os.path.join(config_home, "git", "config"), "/etc/gitconfig"]
    for path in set(configs) if read_config else ():
      try:
        with open(path, "rb") as fh: text = fh.read().lower()
      except FileNotFoundError: continue
      except OSError: return None
      if b"[include" in text or b"worktree" in text or b"bare = true" in text: return None
    files = [*configs, os.path.join(self.git_dir, "HEAD"), os.path.join(self.git_dir, "index"),
             os.path.join(self.common_dir, "packed-refs"), os.path.join(self.common_dir, "info", "attributes"),
             os.path.join(config_home, "git", "attributes")]
    try:
      with open(os.path.join(self.git_dir, "HEAD"), encoding="utf-8") as fh: head = fh.read().strip()
    except (OSError, UnicodeDecodeError): return None
    if head.startswith("ref:"): files.append(os.path.join(self.common_dir, head[len("ref:"):].strip()))
    return {path: _stat(path) for path in files}

  def read_cache(self) -> Optional[dict]:
    try:
      with open(self.cache_path, encoding="utf-8") as fh: cache = json.load(fh)
    except (OSError, ValueError): return None
    ok = isinstance(cache, dict) and cache.get("version") == CACHE_VERSION and cache.get("root") == self.root
    return cache if ok else None

  def paths_from(self, cache: Optional[dict]) -> Optional[list[str]]:
    """The tracked files the cache lists, when the index is the one they were listed from."""
    if cache is None: return None
    index = os.path.join(self.git_dir, "index")
    try: same = cache["watched"][index] == _stat(index) and isinstance(cache["files"], dict)
    except (KeyError, TypeError): return None
    return sorted(cache["files"]) if same else None

  def cached_answer(self, cache: Optional[dict]) -> Optional[tuple[str, int]]:
    """The cached answer when nothing it depends on changed since, else None."""
    if cache is None: return None
    try:
      if time.time_ns() < cache["written_ns"]: return None   # a clock set back proves nothing
      if self.watched(read_config=False) != cache["watched"]: return None
      for path, state in cache["files"].items():
        if _stat(os.path.join(self.root, path)) != state: return None
      commit, dirty = cache["answer"]
    except (KeyError, TypeError, ValueError): return None
    return (commit, dirty) if isinstance(commit, str) and dirty in (0, 1) else None

  def write_cache(self, answer: tuple[str, int], paths: Optional[list[str]], started_ns: int) -> None:
    """Keep `answer` with the state it was given in, when everything in it was last changed well before git
    started (`started_ns`): a change while git ran, or since, then has a change time the cache does not hold."""
    if paths is None or len(paths) > MAX_CACHED_FILES: return
    watched = self.watched()
    if watched is None: return
    files = {path: _stat(os.path.join(self.root, path)) for path in paths}
    settled = started_ns - int(RACY_SECONDS * 1e9)
    if any(state is not None and max(state[3], state[4]) >= settled for state in (*watched.values(), *files.values())):
      return
    os.makedirs(os.path.dirname(self.cache_path), exist_ok=True)
    cache: dict[str, Any] = {"version": CACHE_VERSION, "root": self.root, "answer": list(answer),
                             "written_ns": time.time_ns(), "watched": watched, "files": files}
    partial = f"{self.cache_path}.{os.getpid()}.tmp"
    with open(partial, "w", encoding="utf-8") as fh: json.dump(cache, fh)
    os.replace(partial, self.cache_path)
