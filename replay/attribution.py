"""From "outputs differ" to "this kernel changed": each mismatching realize of a replay names the first changed
kernel that produced it (in the outcome's metrics, `first_changed`; reports show it above the difference).

Runs after every check of a replay has merged its outcomes (replay/outcomes.py). A realize's kernels are captured
at its location between the previous realize there and itself (a kernel compiled earlier, by another realize, was
captured there instead): the first of them whose outcome is `changed` or `added` is named, with the head of its
diff, at the top of the mismatch's detail. When none of them changed, a changed schedule of the realize is named;
else the detail says that no kernel of this realize changed (the difference is in what runs them: buffers, order,
the runtime).
"""
from __future__ import annotations
import json
from db import Store

CHANGED = ("changed", "added")
DIFF_LINES = 12


def _realize_window(run_captures: list[dict], exec_capture: dict) -> list[dict]:
  """The captures of a realize: same run and location, after the previous realize at that location."""
  window: list[dict] = []
  for c in run_captures:
    if c["id"] >= exec_capture["id"]: break
    if c["location"] != exec_capture["location"]: continue
    if c["kind"] == "exec": window = []
    else: window.append(c)
  return window


def _pointer(outcome: dict, what: str) -> str:
  diff = (outcome.get("diff") or outcome.get("reason") or "").splitlines()
  head = diff[:DIFF_LINES] + ([f"... (`replay show {outcome['capture_id']}` shows the whole diff)"]
                              if len(diff) > DIFF_LINES else [])
  return "\n".join([f"{what}: capture {outcome['capture_id']} [{outcome['kind']}] {outcome['status']}: "
                    f"{outcome['name']}", *head])


def name_changed_kernels(store: Store, replay_id: int) -> int:
  """Prefix the detail of every mismatching exec outcome of the replay with the kernel (or schedule) that changed;
  returns how many outcomes were annotated."""
  outcomes = store.outcomes(replay_id)
  mismatches = [o for o in outcomes if o["status"] == "mismatch" and o["kind"] == "exec"]
  if not mismatches: return 0
  by_capture = {o["capture_id"]: o for o in outcomes}
  captures = {c["id"]: c for c in store.captures(ids=[o["capture_id"] for o in mismatches])}
  runs = {run_id: store.captures(run_ids=[run_id]) for run_id in {c["run_id"] for c in captures.values()}}
  for o in mismatches:
    capture = captures.get(o["capture_id"])
    if capture is None: continue
    window = [by_capture[c["id"]] for c in _realize_window(runs[capture["run_id"]], capture) if c["id"] in by_capture]
    kernel = next((w for w in window if w["kind"] == "kernel" and w["status"] in CHANGED), None)
    schedule = next((w for w in window if w["kind"] == "schedule" and w["status"] in CHANGED), None)
    if kernel is not None: line = _pointer(kernel, "first changed kernel of this realize")
    elif schedule is not None: line = _pointer(schedule, "no kernel source of this realize changed, its schedule did")
    else:
      line = ("no kernel or schedule captured for this realize changed (a kernel compiled earlier, or what runs the "
              "kernels, differs)")
    try: metrics = json.loads(o.get("metrics") or "{}")
    except ValueError: metrics = {}
    # in the metrics, not the diff: realizes with the same difference still group in reports
    store.update_outcome(o["id"],
                         metrics=json.dumps({**(metrics if isinstance(metrics, dict) else {}), "first_changed": line}))
  return len(mismatches)
