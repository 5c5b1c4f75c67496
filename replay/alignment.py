"""Pairing the captures of two runs of one command (used by replay/rerun.py): sequence alignment, not position.

Two runs of a program at two revisions take the same captures in the same order, except where the change adds or
removes a realize, a schedule or a kernel. Pairing by position would then compare every later capture with its
neighbour's counterpart. Instead, per location (a workload step, a test, a line of user code), the two sequences of
captures are aligned on their signatures (kind and name: a schedule's kernel count and kinds, a kernel's name, a
realize's output dtypes and shapes) as a diff aligns lines. Stretches that do not align pair capture by capture
within a kind (a kernel whose code changed still pairs with its old self); what is left over has no counterpart:
`added` when only the current run has it, `removed` when only the base's run does.
"""
from __future__ import annotations
import difflib
from collections import defaultdict
from typing import Optional

Pair = tuple[Optional[dict], Optional[dict]]


def signature(capture: dict) -> tuple[str, str]:
  return (str(capture["kind"]), str(capture["name"]))


def _by_location(captures: list[dict]) -> dict[str, list[dict]]:
  groups: dict[str, list[dict]] = defaultdict(list)
  for c in sorted(captures, key=lambda c: c["id"]): groups[str(c["location"])].append(c)
  return groups


def _pair_within_kinds(mine: list[dict], theirs: list[dict]) -> list[Pair]:
  """An unaligned stretch: the i-th capture of a kind on one side pairs with the i-th of that kind on the other."""
  pairs: list[Pair] = []
  by_kind: dict[str, list[dict]] = defaultdict(list)
  for c in theirs: by_kind[c["kind"]].append(c)
  taken: dict[str, int] = defaultdict(int)
  for c in mine:
    kind = c["kind"]
    if taken[kind] < len(by_kind[kind]):
      pairs.append((c, by_kind[kind][taken[kind]]))
      taken[kind] += 1
    else: pairs.append((c, None))
  pairs += [(None, c) for kind, rest in by_kind.items() for c in rest[taken[kind]:]]
  return pairs


def align_sequences(mine: list[dict], theirs: list[dict]) -> list[Pair]:
  """Two ordered sequences of captures (one location) as pairs; either side of a pair may be None."""
  matcher = difflib.SequenceMatcher(None, [signature(c) for c in mine], [signature(c) for c in theirs], autojunk=False)
  pairs: list[Pair] = []
  for op, a0, a1, b0, b1 in matcher.get_opcodes():
    if op == "equal": pairs += list(zip(mine[a0:a1], theirs[b0:b1]))
    else: pairs += _pair_within_kinds(mine[a0:a1], theirs[b0:b1])
  return pairs


def align(mine: list[dict], theirs: list[dict]) -> list[Pair]:
  """The captures of two runs paired per location: (mine, theirs), (mine, None) for one only this run took, and
  (None, theirs) for one only the other run took. Every capture appears in exactly one pair."""
  a, b = _by_location(mine), _by_location(theirs)
  pairs: list[Pair] = []
  for location in list(a) + [loc for loc in b if loc not in a]:
    pairs += align_sequences(a.get(location, []), b.get(location, []))
  return pairs
