"""Revisions: resolve a git revision, keep a cached `git worktree` of it, and build the overlay in
which the harness (`replay/`, `db/`) is the current one and the system under test comes from the
worktree. The system under test is `[tool.replay] sut` in pyproject.toml (default scheduler, runtimes).
"""
from __future__ import annotations
import contextlib, os, pathlib, re, shutil
from typing import Iterator, Optional
try: import fcntl
except ImportError: fcntl = None   # no POSIX locks (Windows): concurrent diffs of one new revision may race

HARNESS_PACKAGES = ("replay", "db")
DEFAULT_SUT = ("scheduler", "runtimes")


class RevisionError(RuntimeError):
  """A git operation failed: unknown revision, not a repository, worktree trouble."""


class UnknownRevision(RevisionError):
  """The revision names no commit of the repository (a usage mistake)."""


def git(*args: str, cwd: Optional[str] = None) -> str:
  import subprocess   # here: a capturing process imports this module and never runs git through it
  try: proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=120)
  except FileNotFoundError: raise RevisionError("git is not installed") from None
  if proc.returncode != 0:
    raise RevisionError(f"git {' '.join(args)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
  return proc.stdout.strip()


class NotARepository(UnknownRevision):
  """The command needs a git repository and is run outside one (a usage mistake)."""


def repo_root(start: Optional[str] = None) -> pathlib.Path:
  try: return pathlib.Path(git("rev-parse", "--show-toplevel", cwd=start))
  except RevisionError as e:
    if "not a git repository" not in str(e): raise
    where = os.path.abspath(start or os.getcwd())
    raise NotARepository(f"{where} is not in a git repository: run this command inside the repository of the compiler "
                         f"under test "
                         "(replay run, report, show and list need none)") from None


def harness_root() -> pathlib.Path:
  """The folder that holds this harness's packages (the current tree)."""
  return pathlib.Path(__file__).resolve().parents[1]


def resolve(rev: str, merge_base: bool = False, cwd: Optional[str] = None) -> str:
  try: sha = git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=cwd) if rev else ""
  except RevisionError: sha = ""
  if not sha: raise UnknownRevision(f"unknown revision {rev!r} (not a branch, tag or commit of this repository)")
  if merge_base: sha = git("merge-base", "HEAD", sha, cwd=cwd)
  return sha


_PACKAGE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def project_root(start: Optional[pathlib.Path] = None) -> pathlib.Path:
  """The project whose compiler is under test: the nearest folder above `start` (the working directory) whose
  pyproject.toml has a [tool.replay] table, else the harness's own folder."""
  here = (start or pathlib.Path.cwd()).resolve()
  for folder in (here, *here.parents):
    if (candidate := folder / "pyproject.toml").is_file():
      try:
        if "[tool.replay]" in candidate.read_text(errors="replace"): return folder
      except OSError: pass
  return harness_root()


def sut_packages(root: Optional[pathlib.Path] = None) -> tuple[str, ...]:
  """`[tool.replay] sut` of the project's pyproject.toml: plain top-level package names (no paths, no dots)."""
  path = (root or project_root()) / "pyproject.toml"
  if not path.exists(): return DEFAULT_SUT
  text = path.read_text()
  # the usual one-line list is read without a TOML parser (importing tomllib cost every capturing process a few
  # milliseconds); any other form goes through tomllib
  sut = _one_line_sut(text)
  if sut is None:
    try:
      import tomllib
      sut = tomllib.loads(text).get("tool", {}).get("replay", {}).get("sut")
    except ImportError:  # Python 3.10: the first table's one-line list, whatever else the file holds
      sut = _one_line_sut(text, whole_file=False)
  names = tuple(sut) if sut else DEFAULT_SUT
  bad = [n for n in names if not isinstance(n, str) or not _PACKAGE_NAME.match(n) or n in HARNESS_PACKAGES]
  if bad:
    raise RevisionError(f"[tool.replay] sut in {path} must list plain package names other than replay and db; "
                        f"got {bad}")
  return names


_QUOTED_NAME = r"""(?:"[A-Za-z0-9_]+"|'[A-Za-z0-9_]+')"""
_SUT_KEY = re.compile(r"""\s*(["']?)sut\1\s*=""")
_ONE_LINE_LIST = re.compile(rf"\s*\[\s*({_QUOTED_NAME}(?:\s*,\s*{_QUOTED_NAME})*)?\s*,?\s*\]\s*(?:#.*)?\Z")


def _one_line_sut(text: str, whole_file: bool = True) -> Optional[list[str]]:
  """`sut` of the `[tool.replay]` table when it is a list of quoted names on one line, else None (tomllib decides
  those, and reports what is wrong with them). With `whole_file`, also None unless the file is plain enough to be read
  line by line: one such table, no multi-line strings, no dotted `tool.` keys, `sut` given once."""
  lines = text.splitlines()
  headers = [i for i, line in enumerate(lines) if line.lstrip().startswith("[")]
  tables = [i for i in headers if lines[i].strip() == "[tool.replay]"]
  if not tables: return None
  if whole_file and (len(tables) > 1 or "'''" in text or '"""' in text
                     or any(line.lstrip().startswith(("tool.", "tool =", "tool=")) for line in lines)): return None
  end = next((i for i in headers if i > tables[0]), len(lines))
  found = None
  for line in lines[tables[0] + 1:end]:
    if (key := _SUT_KEY.match(line)) is None: continue
    listed = _ONE_LINE_LIST.match(line, key.end())
    if listed is None or found is not None: return None
    found = [name.strip().strip("\"'") for name in (listed.group(1) or "").split(",") if name.strip()]
    if not whole_file: break
  return found


def cache_root(root: pathlib.Path) -> pathlib.Path:
  return pathlib.Path(os.getenv("REPLAY_CACHE_DIR") or (root / ".replay"))


def _valid_worktree(path: pathlib.Path, sha: str) -> bool:
  """A complete checkout of `sha`: at that commit, with nothing missing or changed (a kill mid-checkout fails this)."""
  if not (path / ".git").exists(): return False
  try:
    return git("rev-parse", "HEAD", cwd=str(path)) == sha and git("status", "--porcelain", "--untracked-files=no",
                                                                  cwd=str(path)) == ""
  except RevisionError: return False


@contextlib.contextmanager
def _cache_lock(root: pathlib.Path) -> Iterator[None]:
  """Held while worktrees and overlays are made or removed: `git worktree prune` in one process would otherwise
  delete the half-registered worktree another process is adding, and two processes would fight over links."""
  folder = cache_root(root)
  folder.mkdir(parents=True, exist_ok=True)
  with open(folder / ".trees.lock", "a") as handle:
    if fcntl is not None: fcntl.flock(handle, fcntl.LOCK_EX)
    try: yield
    finally:
      if fcntl is not None: fcntl.flock(handle, fcntl.LOCK_UN)


def worktree(sha: str, root: pathlib.Path) -> pathlib.Path:
  """A detached worktree of `sha`, made once and reused. It is built under a private name and moved into place
  when complete, so a killed `replay diff` never leaves (or uses) a half-made one; concurrent ones take turns."""
  path = cache_root(root) / "worktrees" / sha
  if _valid_worktree(path, sha): return path
  with _cache_lock(root): return _make_worktree(sha, root, path)


def _make_worktree(sha: str, root: pathlib.Path, path: pathlib.Path) -> pathlib.Path:
  if _valid_worktree(path, sha): return path   # another process made it while this one waited
  path.parent.mkdir(parents=True, exist_ok=True)
  git("worktree", "prune", cwd=str(root))
  building = path.parent / f".{sha}.{os.getpid()}"
  if building.exists(): shutil.rmtree(building)
  git("worktree", "add", "--detach", "--force", str(building), sha, cwd=str(root))
  if path.exists() and not _valid_worktree(path, sha):
    try: git("worktree", "remove", "--force", str(path), cwd=str(root))
    except RevisionError: shutil.rmtree(path, ignore_errors=True)
    git("worktree", "prune", cwd=str(root))
  try: git("worktree", "move", str(building), str(path), cwd=str(root))
  except RevisionError:   # another process finished first: use its worktree, drop ours
    git("worktree", "remove", "--force", str(building), cwd=str(root))
    if not _valid_worktree(path, sha): raise
  return path


def overlay(sha: str, root: pathlib.Path) -> pathlib.Path:
  """A folder whose packages are: the system under test from the worktree of `sha`, the harness from here."""
  tree = worktree(sha, root)
  with _cache_lock(root): return _make_overlay(sha, root, tree)


def _make_overlay(sha: str, root: pathlib.Path, tree: pathlib.Path) -> pathlib.Path:
  path = cache_root(root) / "overlays" / sha
  path.mkdir(parents=True, exist_ok=True)
  links = {pkg: tree / pkg for pkg in sut_packages()} | {pkg: harness_root() / pkg for pkg in HARNESS_PACKAGES}
  for name, target in links.items():
    link = path / name
    if link.is_symlink() or link.exists():
      if link.is_symlink() and pathlib.Path(os.readlink(link)) == target: continue
      link.unlink() if link.is_symlink() else shutil.rmtree(link)
    if target.exists(): link.symlink_to(target, target_is_directory=True)
  return path


def cached_trees(root: pathlib.Path) -> list[pathlib.Path]:
  """The worktrees and overlays the harness keeps under the cache folder."""
  base = cache_root(root)
  return sorted(p for folder in ("worktrees", "overlays")
                if (base / folder).is_dir() for p in (base / folder).iterdir())


def remove_cached_trees(root: pathlib.Path) -> int:
  """Remove every cached worktree and overlay (they are made again on demand); returns how many went."""
  with _cache_lock(root): return _remove_trees(root, cached_trees(root))


def _remove_trees(root: pathlib.Path, trees: list[pathlib.Path]) -> int:
  for path in trees:
    if path.parent.name == "worktrees":
      try: git("worktree", "remove", "--force", str(path), cwd=str(root))
      except RevisionError: shutil.rmtree(path, ignore_errors=True)
    elif path.is_dir() and not path.is_symlink(): shutil.rmtree(path, ignore_errors=True)
    else: path.unlink(missing_ok=True)
  try: git("worktree", "prune", cwd=str(root))
  except RevisionError: pass
  return len(trees)
