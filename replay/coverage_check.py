"""Is the change guarded? Changed lines of the system under test against the lines the captures' computations ran.

A change that no capture runs cannot be caught by a replay. Changed lines come from `git diff -U0 REV` (the working
tree against the base) restricted to the system under test; which of them ran comes from the probes of
replay/probes.py, placed in the captured command's processes by the gate (`replay gate`) or in the replay workers
by `replay coverage`. A line that runs only while its module is imported (a table entry, a constant) is not
guarded: nothing tells which computation uses it.

The gate fails (exit 1) when less than `[tool.replay] changed-lines-guarded` percent (default 100) of the changed
executable lines ran, unless `--allow-unguarded` is given or the head commit message (or PR_TITLE) says
`[allow-unguarded]`; the lines are listed either way.
"""
from __future__ import annotations
import pathlib, re
from dataclasses import dataclass, field
from typing import Optional
from replay import probes, revisions

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")
DEFAULT_THRESHOLD = 100.0
ALLOW_MARKER = "[allow-unguarded]"


def changed_lines(base_sha: str, root: pathlib.Path, packages: tuple[str, ...]) -> dict[str, set[int]]:
  """Lines of the working tree's Python files in `packages` that differ from `base_sha` (added or modified)."""
  text = revisions.git("diff", "-U0", "--no-color", "--no-ext-diff", base_sha, "--", *[f"{p}/*.py" for p in packages],
                       cwd=str(root))
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


def threshold(root: Optional[pathlib.Path] = None) -> float:
  """`[tool.replay] changed-lines-guarded` of pyproject.toml: the percent of changed executable lines that must run."""
  path = (root or revisions.harness_root()) / "pyproject.toml"
  try:
    import tomllib
    value = tomllib.loads(path.read_text()).get("tool", {}).get("replay", {}).get("changed-lines-guarded",
                                                                                  DEFAULT_THRESHOLD)
  except (ImportError, OSError, ValueError): return DEFAULT_THRESHOLD
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:
    raise revisions.RevisionError(f"[tool.replay] changed-lines-guarded in {path} must be a percentage from 0 to 100; "
                                  f"got {value!r}")
  return float(value)


@dataclass
class Guard:
  """The changed lines of a change, sorted by the probes' plan, and those that ran."""
  plans: dict[str, probes.FilePlan] = field(default_factory=dict)
  ran: dict[str, set[int]] = field(default_factory=dict)

  def unguarded(self) -> dict[str, list[int]]:
    """Changed executable lines no capture's computation ran (import-only lines included)."""
    out = {}
    for path, p in self.plans.items():
      missed = sorted(set(l for l in p.runtime if l not in self.ran.get(path, set())) | set(p.import_only))
      if missed: out[path] = missed
    return out

  def executable(self) -> int: return sum(len(p.runtime) + len(p.import_only) for p in self.plans.values())

  def percent(self) -> float:
    total = self.executable()
    return 100.0 if not total else 100.0 * (total - sum(len(v) for v in self.unguarded().values())) / total

  def import_only(self) -> dict[str, list[int]]:
    return {path: p.import_only for path, p in self.plans.items() if p.import_only}

  def flags(self) -> set[str]: return {name for p in self.plans.values() for name in p.flags.values()}

  def settle_flags(self, unchanged: set[str]) -> None:
    """A changed line that defines a flag whose default is the same at the base (a restatement) changes nothing a
    capture could see: it is no longer counted. A flag whose default did change stays unguarded."""
    for p in self.plans.values():
      settled = {line for line, name in p.flags.items() if name in unchanged}
      p.import_only = [line for line in p.import_only if line not in settled]
      p.flags = {line: name for line, name in p.flags.items() if line not in settled}

  def to_json(self) -> dict:
    return {"executable": self.executable(), "percent": round(self.percent(), 2), "unguarded": self.unguarded(),
            "import_only": self.import_only()}

  def report(self) -> str:
    """`replay coverage`: the summary line, then the unguarded lines per file."""
    files = [f"  {path}: {ranges(lines)}" for path, lines in self.unguarded().items()]
    return "\n".join([describe(self.to_json())] + files)


def measure_plan(base_sha: str, root: pathlib.Path) -> Guard:
  """The plan of a change: its changed lines, sorted (nothing has run yet)."""
  return Guard(probes.plan(changed_lines(base_sha, root, revisions.sut_packages()), root))


def ranges(lines: list[int]) -> str:
  """[3, 4, 5, 9] -> '3-5, 9'."""
  parts, start = [], None
  for i, n in enumerate(lines):
    if start is None: start = n
    if i + 1 == len(lines) or lines[i + 1] != n + 1:
      parts.append(str(start) if start == n else f"{start}-{n}")
      start = None
  return ", ".join(parts)


def describe(doc: Optional[dict], limit: int = 6) -> str:
  """One line about a guard (its `to_json`), as reports print it."""
  if not doc or not doc.get("executable"): return "the change touches no executable line of the system under test"
  unguarded, imported = doc.get("unguarded") or {}, doc.get("import_only") or {}
  total = doc["executable"]
  if not unguarded:
    return f"every changed executable line of the system under test ({total}) runs in a capture's computation"
  missed = sum(len(v) for v in unguarded.values())
  listed = [f"{path}:{ranges(list(lines))}" for path, lines in list(unguarded.items())[:limit]]
  more = f"; and {len(unguarded) - limit} more files" if len(unguarded) > limit else ""
  at_import = sum(len(v) for v in imported.values())
  why = f" ({at_import} of them run only while their module is imported)" if at_import else ""
  return (f"unguarded: {missed} of {total} changed executable lines of the system under test run in no capture's "
          f"computation{why}: "
          + "; ".join(listed) + more)
