"""`replay show N --why`: which rewrite rule made a schedule come out differently.

Both the base's compiler and the current one schedule the capture's graph once more with rewrite tracing on: every
pattern rule that fires (with its id, `S17 (broadcast reduce)`, and the file:line where the pattern is defined) and
every realize decision (with the rule and the line that made it) is recorded, in order. The first entry where the two
traces part names the rule: entries are compared by rule id, file, node and result, not by line, so code that merely
moved within a file does not count.
"""
from __future__ import annotations
from typing import Optional


def _same(a: dict, b: dict) -> bool:
  if a.get("failed") or b.get("failed"): return a.get("failed") == b.get("failed")
  if a.get("rule") and b.get("rule") and a["rule"] != b["rule"]:
    return False   # a trace from before rules had ids has none
  return (a["file"], a["node"], a["result"]) == (b["file"], b["node"], b["result"])


def first_difference(base: list[dict], head: list[dict]) -> Optional[int]:
  """The index of the first entry where the traces differ (the length of the shorter one if one is a prefix of
  the other), None when they are identical."""
  for i, (a, b) in enumerate(zip(base, head)):
    if not _same(a, b): return i
  return None if len(base) == len(head) else min(len(base), len(head))


def _entry(e: Optional[dict]) -> str:
  if e is None: return "(nothing: the trace ends here)"
  if e.get("failed"): return f"scheduling failed: {e['failed']}"
  action = e["result"] if e["result"] in ("realize", "release") else f"rewrote it to {e['result']}"
  rule = f"rule {e['rule']}, " if e.get("rule") else ""   # traces of revisions before rules were named have no ids
  return f"{rule}{e['file']}:{e['line']} on {e['node']}: {action}"


def explain(base: list[dict], head: list[dict], context: int = 2) -> str:
  """A few lines naming the first rule application that differs, with what both traces did just before."""
  i = first_difference(base, head)
  if i is None:
    return (f"both compilers apply the same {len(base)} rewrites and realize decisions: the difference comes from code "
            "outside the traced rules (lowering, rendering, or a pass that is not a pattern rule)")
  lines = [f"first difference at step {i + 1} (of {len(base)} in the base, {len(head)} here):",
           f"  base: {_entry(base[i] if i < len(base) else None)}",
           f"  here: {_entry(head[i] if i < len(head) else None)}"]
  if i: lines += ["before it, both did:"] + [f"  {_entry(e)}" for e in base[max(0, i - context):i]]
  return "\n".join(lines)
