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
  return tuple(sorted((o["capture_id"], o["status"], hashlib.sha256((o.get("diff") or o.get("reason") or "").encode()).hexdigest()[:16])
                      for o in outcomes))


@dataclass
class Step:
  sha: str
  differs: bool
  summary: str


def first_change(commits: list[str], probe: Callable[[str], tuple[Signature, str]], good: Signature,
                 on_step: Callable[[Step], None] = lambda step: None) -> tuple[int, list[Step]]:
  """The index in `commits` (oldest first, good excluded, bad last) of the first commit whose signature differs from
  `good`, assuming that once it differs it stays different (the usual bisect assumption); len(commits) if none does."""
  steps: list[Step] = []
  lo, hi = 0, len(commits)   # the answer lies in [lo, hi]
  while lo < hi:
    mid = (lo + hi) // 2
    sig, summary = probe(commits[mid])
    step = Step(commits[mid], sig != good, summary)
    steps.append(step)
    on_step(step)
    if step.differs: hi = mid
    else: lo = mid + 1
  return lo, steps
