"""Outcome statuses: the names, which are changes, and how serious each is.
The one place they are defined; the runner, the merging of extra checks (outcomes.py) and every report use it.
"""
from __future__ import annotations

# in table order
STATUSES = ("same", "changed", "added", "removed", "mismatch", "error", "incompatible", "nondeterministic")
# a scheduling change (kernel AST or source; a realize, schedule or kernel only one end-to-end run took)
CHANGES = ("changed", "added", "removed")
# most serious first: reports list differences in this order, and a capture that two checks judge differently takes
# the more serious status. Outputs that differ are the worst finding; then the harness could not tell (error,
# incompatible); then changes; noise last.
SEVERITY_ORDER = ("mismatch", "error", "incompatible", "changed", "added", "removed", "nondeterministic", "same")
_RANK = {status: len(SEVERITY_ORDER) - i for i, status in enumerate(SEVERITY_ORDER)}


def severity(status: str) -> int:
  """Higher is more serious; a status this harness does not know counts as an error."""
  return _RANK.get(status, _RANK["error"])


def more_serious(a: str, b: str) -> bool: return severity(a) > severity(b)

