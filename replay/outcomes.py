"""Folding the results of extra checks (the end-to-end rerun, the base's flag defaults) into a replay's stored
outcomes: one outcome per capture, whose status is the most serious finding and whose detail names every check
that found something."""
from __future__ import annotations
from typing import Iterable
from db import Store
from replay.statuses import more_serious



def merge(store: Store, replay_id: int, findings: Iterable[tuple[int, str, str]]) -> int:
  """Merge (capture id, status, detail) findings into the replay's outcomes; returns how many outcomes changed. A
  `removed` finding is about a capture of the base's run, which the replay did not select: it becomes an outcome."""
  by_capture = {o["capture_id"]: o for o in store.outcomes(replay_id)}
  changed, new_rows = 0, []
  for capture_id, status, detail in findings:
    row = by_capture.get(capture_id)
    if row is None and status == "removed":
      new_rows.append({"replay_id": replay_id, "capture_id": capture_id, "status": status, "reason": "", "diff": detail,
                       "metrics": "{}", "seconds": 0.0})
      continue
    if row is None or status == "same": continue
    worse = more_serious(status, row["status"])   # an outcome takes the most serious status any check found
    new_status = status if worse else row["status"]
    diff = "\n\n".join(part for part in (row.get("diff") or "", detail) if part)
    store.update_outcome(row["id"], status=new_status, diff=diff)
    row.update(status=new_status, diff=diff)
    changed += 1
  if new_rows: store.add_outcomes(new_rows)
  return changed + len(new_rows)
