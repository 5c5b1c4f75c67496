"""`replay bisect`: find the first commit at which the outcome of a set of captures changes.

The captures stay fixed (what some program did at one revision); each probe replays them against one commit of the
range, reusing the cached worktree of that commit, and reduces the outcomes to a signature (each capture's status and
a fingerprint of its diff). The good end's signature is the reference; a binary search over the first-parent
commits of good..bad finds the first commit whose signature differs from it.
"""
from __future__ import annotations
import hashlib
from dataclasses import dataclass
from typing import Callable

Signature = tuple


def signature(outcomes: list[dict]) -> Signature:
  """What a replay of the captures says, independent of timing: (capture id, status, diff fingerprint) per capture."""
  return tuple(sorted((o["capture_id"], o["status"],
                       hashlib.sha256((o.get("diff") or o.get("reason") or "").encode()).hexdigest()[:16])
                      for o in outcomes))


@dataclass
class Step:
  sha: str
  differs: bool
  summary: str
  skipped: bool = False   # the commit could not be probed (nothing it replays is loadable): `git bisect skip`


@dataclass
class Found:
  """Where the outcome first changes: `commits[first]` (len(commits) when no commit changes it); with skipped commits
  just before it, the change may be in any of `ambiguous` (those skipped commits, then `commits[first]`)."""
  first: int
  steps: list[Step]
  ambiguous: list[str]

  @property
  def skipped(self) -> list[str]: return [s.sha for s in self.steps if s.skipped]


def first_change(commits: list[str], probe: Callable[[str], tuple[Signature, str, bool]], good: Signature,
                 on_step: Callable[[Step], None] = lambda step: None) -> Found:
  """The first commit in `commits` (oldest first, good excluded, bad last) whose signature differs from `good`,
  assuming that once it differs it stays different (the usual bisect assumption). `probe` returns (signature,
  summary, probed); a commit that cannot be probed is skipped and the search goes on with its neighbours."""
  steps: list[Step] = []
  skipped: set[int] = set()
  lo, hi = 0, len(commits)   # the answer lies in [lo, hi]
  while lo < hi:
    candidates = [i for i in range(lo, hi) if i not in skipped]
    if not candidates: break
    mid = candidates[len(candidates) // 2]
    sig, summary, probed = probe(commits[mid])
    step = Step(commits[mid], probed and sig != good, summary, skipped=not probed)
    steps.append(step)
    on_step(step)
    if step.skipped: skipped.add(mid)
    elif step.differs: hi = mid
    else: lo = mid + 1
  ambiguous = [commits[i] for i in range(lo, hi)] + ([commits[hi]] if hi < len(commits) else []) if lo < hi else []
  return Found(hi if lo < hi else lo, steps, ambiguous)
