"""`replay coverage --base REV`: which lines of the system under test a change touches, and which of those no
capture executes when the captures are replayed. A change that no capture runs cannot be caught by a replay, so
the gate warns about it ("this change is not exercised by any capture").

Changed lines come from `git diff -U0 REV` (the working tree against the base) restricted to the SUT packages;
executed lines from coverage.py, which each replay worker starts when `REPLAY_COVERAGE_DIR` is set and saves
when it exits; this module combines the workers' data files.
"""
from __future__ import annotations
import os, pathlib, re
from typing import Optional
from replay import revisions

COVERAGE_ENV = "REPLAY_COVERAGE_DIR"
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


def changed_lines(base_sha: str, root: pathlib.Path, packages: tuple[str, ...]) -> dict[str, set[int]]:
  """Lines of the working tree's Python files in `packages` that differ from `base_sha` (added or modified)."""
  text = revisions.git("diff", "-U0", "--no-color", "--no-ext-diff", base_sha, "--", *[f"{p}/*.py" for p in packages], cwd=str(root))
  out: dict[str, set[int]] = {}
  current: Optional[str] = None
  for line in text.splitlines():
    if line.startswith("+++ "):
      path = line[4:].strip()
      current = path[2:] if path.startswith("b/") else None   # /dev/null: a deleted file has no lines left to run
    elif current and (m := _HUNK.match(line)):
      start, count = int(m.group(1)), int(m.group(2) or 1)
      if count: out.setdefault(current, set()).update(range(start, start + count))
  return out


def start_in_worker() -> None:
  """Called by a replay worker at start: measure the SUT's lines if the runner asked for coverage."""
  folder = os.environ.get(COVERAGE_ENV)
  if not folder: return
  import atexit, coverage
  root = os.environ.get("REPLAY_SUT_ROOT") or os.getcwd()
  packages = [p for p in os.environ.get("REPLAY_SUT", "").split(",") if p]
  cov = coverage.Coverage(data_file=os.path.join(folder, ".coverage"), data_suffix=True, branch=False,
                          include=[os.path.join(os.path.realpath(root), p, "*") for p in packages] or None)
  cov.start()

  def save():
    cov.stop()
    cov.save()
  atexit.register(save)


def executed_lines(folder: str, root: pathlib.Path) -> dict[str, set[int]]:
  """Executed lines per file (paths relative to `root`) from the data files the workers left in `folder`."""
  import coverage
  cov = coverage.Coverage(data_file=os.path.join(folder, ".coverage"))
  try: cov.combine([folder], keep=False)
  except coverage.exceptions.NoDataError: return {}
  data = cov.get_data()
  out: dict[str, set[int]] = {}
  real_root = os.path.realpath(root)
  for measured in data.measured_files():
    rel = os.path.relpath(os.path.realpath(measured), real_root)
    if not rel.startswith(".."): out[rel] = set(data.lines(measured) or [])
  return out


def unexercised(changed: dict[str, set[int]], executed: dict[str, set[int]], root: pathlib.Path) -> dict[str, list[int]]:
  """Changed lines that could run (coverage.py calls them statements) but that no capture ran."""
  import coverage
  out: dict[str, list[int]] = {}
  for path, lines in sorted(changed.items()):
    full = root / path
    if not full.exists(): continue
    try: statements = set(coverage.Coverage().analysis2(str(full))[1])
    except Exception: statements = set(lines)   # cannot be parsed: count every changed line
    missed = sorted((lines & statements) - executed.get(path, set()))
    if missed: out[path] = missed
  return out


def ranges(lines: list[int]) -> str:
  """[3, 4, 5, 9] -> '3-5, 9'."""
  parts, start = [], None
  for i, n in enumerate(lines):
    if start is None: start = n
    if i + 1 == len(lines) or lines[i + 1] != n + 1:
      parts.append(str(start) if start == n else f"{start}-{n}")
      start = None
  return ", ".join(parts)


def describe(missed: dict[str, list[int]], changed: dict[str, set[int]], limit: int = 6) -> str:
  if not changed: return "the change touches no line of the system under test"
  total = sum(len(v) for v in changed.values())
  if not missed: return f"every changed line of the system under test that can run ({total} changed lines) is executed by some capture"
  listed = [f"{path}:{ranges(lines)}" for path, lines in list(missed.items())[:limit]]
  more = f"; and {len(missed) - limit} more files" if len(missed) > limit else ""
  return (f"this change is not exercised by any capture: {sum(len(v) for v in missed.values())} changed lines run in no replay: "
          + "; ".join(listed) + more)
