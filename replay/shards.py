"""Scale-out: split a selection of captures into N shards that separate machines replay, and merge what the
shards found into one report with one verdict.

`replay run|diff --shard I/N` replays shard I of N (`select`); each shard stores its replay (with the shard and
the policy) in its own database, or writes a JSON report. `replay merge` reads those databases or JSON reports
(`load`), checks that they are the shards of one replay (same capture run, base, head and policy; every shard
once), and joins them (`merge`) into a `Summary` that renders and judges like any other replay. A CI matrix of
shard jobs followed by a merge job is in `.github/workflows/replay.yml`. Sits beside the runner; reads stores
through `db/` and reports through `replay/report.py`.
"""
from __future__ import annotations
import hashlib, json, pathlib, re
from dataclasses import dataclass, field
from typing import Optional
from replay import report as rpt


class ShardError(ValueError):
  """Shard specs or shard results that do not fit together (a usage mistake)."""


def parse(spec: str) -> tuple[int, int]:
  """'I/N' with 1 <= I <= N, as (I, N)."""
  m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", spec or "")
  if not m: raise ShardError(f"--shard must look like I/N (e.g. 2/4), got {spec!r}")
  index, count = int(m.group(1)), int(m.group(2))
  if not 1 <= index <= count: raise ShardError(f"--shard {spec}: I must be between 1 and N")
  return index, count


def select(captures: list[dict], index: int, count: int) -> list[dict]:
  """Shard `index` of `count`: every count-th capture in id order, starting at the index-th. Deterministic for one
  database and selection, disjoint across shards, together the whole selection, and balanced in kinds because
  captures of one program step sit next to each other."""
  ordered = sorted(captures, key=lambda c: c["id"])
  return ordered[index - 1::count]


@dataclass
class ShardResult:
  """What one shard replayed: its replay row (with policy, selected count and shard), outcomes and capture runs."""
  source: str
  replay: dict
  outcomes: list[dict]
  capture_runs: list[dict] = field(default_factory=list)
  accepted: list[dict] = field(default_factory=list)

  @property
  def shard(self) -> tuple[int, int]:
    raw = self.replay.get("shard")
    if not raw: return (1, 1)
    try: return parse(str(raw))
    except ShardError: raise ShardError(f"{self.source}: its replay has an unreadable shard {raw!r}") from None


def load(path: str, replay_id: Optional[int] = None) -> ShardResult:
  """A shard's result from a replay database (its latest replay, or `replay_id`) or from a JSON report."""
  file = pathlib.Path(path)
  if not file.is_file(): raise ShardError(f"{path}: no such file")
  with open(file, "rb") as handle: head = handle.read(16)
  if head.startswith(b"SQLite format 3"): return _load_store(path, replay_id)
  try: doc = json.loads(file.read_text())
  except (ValueError, UnicodeDecodeError) as e:
    raise ShardError(f"{path}: neither a replay database nor a JSON report ({e})") from None
  if not isinstance(doc, dict) or doc.get("schema") != rpt.JSON_SCHEMA:
    raise ShardError(f"{path}: not a JSON report of `replay` ({rpt.JSON_SCHEMA})")
  replay = dict(doc.get("replay")) if isinstance(doc.get("replay"), dict) else {}
  replay["notes"] = doc.get("notes") or []
  if isinstance(replay.get("policy"), dict): replay["policy"] = json.dumps(replay["policy"])
  if replay.get("policy") is not None and not isinstance(_normal(replay["policy"]), dict):
    raise ShardError(f"{path}: its replay's policy is not a JSON object ({str(replay['policy'])[:60]})")
  outcomes = [o for o in doc.get("outcomes") or [] if isinstance(o, dict)
              and {"capture_id", "kind", "status"} <= o.keys()]
  outcomes = [{**o, "metrics": json.dumps(o.get("metrics") or {}), "location": o.get("location", ""),
               "name": o.get("name", "")} for o in outcomes]
  runs = [r for r in doc.get("capture_runs") or [] if isinstance(r, dict)]
  return ShardResult(path, replay, outcomes, runs)


def _load_store(path: str, replay_id: Optional[int]) -> ShardResult:
  from db import Store
  store = Store(path, create=False)
  row = store.replay(replay_id)
  if row is None:
    raise ShardError(f"{path}: " + (f"no replay {replay_id}" if replay_id is not None else "no replay yet"))
  outcomes = store.outcomes(row["id"])
  run_ids = sorted({r for r in [row.get("capture_run_id")] if r is not None} | _run_ids(store, outcomes))
  return ShardResult(path, row, outcomes, [r for i in run_ids if (r := store.run(i)) is not None], store.accepted())


def _run_ids(store, outcomes: list[dict]) -> set[int]:
  ids = [o["capture_id"] for o in outcomes]
  if not ids: return set()
  return {c["run_id"] for c in store.captures(ids=ids)}


_SAME_ACROSS_SHARDS = ("capture_run_id", "base_commit", "head_commit", "policy")
# compared on their own (the selection), or added to a shard's policy by its run: not part of the policy comparison
_COMPARED_APART = ("selection", "stopped_early", "rerun_failures")


def fingerprint(capture_ids) -> str:
  """The identity of a selection of captures (their ids), as stored with every shard of it."""
  return hashlib.sha256(",".join(map(str, sorted(capture_ids))).encode()).hexdigest()[:20]


def selection(store, captures: list[dict]) -> dict:
  """What a replay's policy records about the selection it was made from: the database, the fingerprint, the size."""
  return {"database": store.identity(), "fingerprint": fingerprint(c["id"] for c in captures), "size": len(captures)}


def _selection_of(result: "ShardResult") -> Optional[dict]:
  policy = _normal(result.replay.get("policy"))
  return policy.get("selection") if isinstance(policy, dict) and isinstance(policy.get("selection"), dict) else None


def _check_one_selection(results: list["ShardResult"], count: int) -> None:
  """The shards come from one database and one selection, hold disjoint captures, and (all present and finished)
  cover the selection exactly once."""
  first, chosen = results[0], _selection_of(results[0])
  for other in results[1:]:
    theirs = _selection_of(other)
    for key, what in (("database", "databases"), ("fingerprint", "selections")):
      if (chosen or {}).get(key) != (theirs or {}).get(key):
        raise ShardError(f"{other.source} and {first.source} are not shards of one replay: they come from different "
                         f"{what}")
  owner: dict[int, str] = {}
  for r in results:
    for o in r.outcomes:
      if o.get("status") == "removed": continue   # a capture of the base's run, not of the selection
      if (seen := owner.setdefault(o["capture_id"], r.source)) != r.source:
        raise ShardError(f"{r.source} and {seen} both hold capture {o['capture_id']}: shards of one replay are "
                         "disjoint")
  finished = all(isinstance(r.replay.get("selected"), int)
                 and r.replay["selected"] == sum(o.get("status") != "removed" for o in r.outcomes)
                 for r in results)
  if chosen and len(results) == count and finished and (len(owner) != chosen.get("size")
                                                        or fingerprint(owner) != chosen.get("fingerprint")):
    raise ShardError(f"the shards hold {len(owner)} captures that are not the {chosen.get('size')} of the selection "
                     f"they were made from")


def merge(results: list[ShardResult]) -> rpt.Summary:
  """One summary of N shards: the outcomes of all, the policy they share, the notes of each (once)."""
  if not results: raise ShardError("no shard results to merge")
  first = results[0]
  counts = {r.shard[1] for r in results}
  if len(counts) > 1:
    raise ShardError(f"the shards split the captures differently: into {' and '.join(map(str, sorted(counts)))}")
  count = counts.pop()
  seen: dict[int, str] = {}
  for r in results:
    index = r.shard[0]
    if index in seen: raise ShardError(f"shard {index}/{count} is given twice ({seen[index]} and {r.source})")
    seen[index] = r.source
  _check_one_selection(results, count)
  for other in results[1:]:
    for key in _SAME_ACROSS_SHARDS:
      if _comparable(first.replay.get(key)) != _comparable(other.replay.get(key)):
        raise ShardError(f"{other.source} and {first.source} are not shards of one replay: their "
                         f"{key.replace('_', ' ')} differs "
                         f"({other.replay.get(key)!r} vs {first.replay.get(key)!r})")
  notes: list[str] = []
  for r in results:
    for note in _notes(r.replay):
      if note not in notes: notes.append(note)
  selected = [r.replay.get("selected") for r in results]
  merged_row = {**{k: first.replay.get(k) for k in ("capture_run_id", "base_ref", "base_commit", "head_commit",
                                                    "policy", "jobs")},
                "id": None, "started": min((r.replay.get("started") or 0 for r in results), default=None),
                "finished": max((r.replay.get("finished") or 0 for r in results), default=None),
                "selected": sum(selected) if all(isinstance(s, int) for s in selected) else None,
                "notes": json.dumps(notes), "shard": f"{len(results)} of {count} shards"}
  outcomes = sorted((o for r in results for o in r.outcomes), key=lambda o: o["capture_id"])
  runs = {run["id"]: run for r in results for run in r.capture_runs if "id" in run}
  summary = rpt.Summary.from_row(merged_row, outcomes, [runs[i] for i in sorted(runs)])
  summary.missing_shards = sorted(set(range(1, count + 1)) - set(seen))
  return summary


def _comparable(value):
  value = _normal(value)
  return {k: v for k, v in value.items() if k not in _COMPARED_APART} if isinstance(value, dict) else value


def _normal(value):
  """A field compared across shards; a policy is JSON text in a database and an object in a JSON report."""
  if isinstance(value, str) and value.startswith("{"):
    try: return json.loads(value)
    except ValueError: return value
  return value or None


def _notes(replay: dict) -> list[str]:
  raw = replay.get("notes")
  if isinstance(raw, list): return [str(n) for n in raw]
  try: value = json.loads(raw or "[]")
  except (TypeError, ValueError): return [str(raw)]
  return [str(n) for n in value] if isinstance(value, list) else [str(value)]
