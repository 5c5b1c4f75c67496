"""Accepted changes (insta-style review): a reviewer marks kernel changes as expected, and the gate then passes
them while still failing mismatches and any change nobody accepted.

A change is identified by its kind, its location and a fingerprint of its diff, not by capture id or commit: a new
capture of the same program at the same change shows the same diff again, and so is still accepted; a different
diff (the change evolved) needs a new review, and so does the same diff against another base (an acceptance holds
for the base it was made against). Acceptances live in the database and can be
exported to a small JSON file committed with the change (`replay-accepted.json` at the repository root is read by
every replay; `REPLAY_ACCEPTED` names another file).
"""
from __future__ import annotations
import hashlib, json, os, pathlib
from typing import Iterable, Optional

DEFAULT_FILE = "replay-accepted.json"
FORMAT = "replay-accepted/1"


class AcceptFileError(ValueError):
  """The accepted-changes file cannot be read."""


def fingerprint(outcome: dict) -> str:
  return hashlib.sha256((outcome.get("diff") or "").encode()).hexdigest()[:20]


def key(outcome: dict) -> tuple[str, str, str]:
  return (str(outcome["kind"]), str(outcome["location"]), fingerprint(outcome))


def entries(outcomes: Iterable[dict], head_commit: Optional[str] = None,
            base_commit: Optional[str] = None) -> list[dict]:
  """Acceptance records for the changed outcomes among `outcomes` (mismatches and errors cannot be accepted), scoped
  to the base of the replay they come from."""
  return [{"kind": o["kind"], "location": o["location"], "fingerprint": fingerprint(o), "name": o.get("name", ""),
           "head_commit": head_commit,
           "base_commit": base_commit} for o in outcomes if o["status"] == "changed"]


def applies(entry: dict, base_commit: Optional[str]) -> bool:
  """Whether an acceptance holds for a replay against `base_commit`: made against that base (or recorded without
  one)."""
  return not entry.get("base_commit") or entry.get("base_commit") == base_commit


def default_path(root: Optional[pathlib.Path] = None) -> pathlib.Path:
  return pathlib.Path(os.environ.get("REPLAY_ACCEPTED") or ((root or pathlib.Path.cwd()) / DEFAULT_FILE))


def read_file(path: pathlib.Path) -> list[dict]:
  """The entries of an accepted-changes file; a missing file has none."""
  if not path.exists(): return []
  try: doc = json.loads(path.read_text())
  except (OSError, ValueError) as e: raise AcceptFileError(f"cannot read accepted changes from {path}: {e}") from None
  items = doc.get("accepted") if isinstance(doc, dict) else None
  if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(items, list):
    raise AcceptFileError(f"{path} is not an accepted-changes file (format {FORMAT!r} with a list 'accepted')")
  out = []
  for item in items:
    if not (isinstance(item, dict) and all(isinstance(item.get(k), str) for k in ("kind", "location", "fingerprint"))
            and isinstance(item.get("base_commit", ""), (str, type(None)))):
      raise AcceptFileError(f"{path}: every accepted change needs string kind, location and fingerprint (and "
                            f"base_commit, if any), "
                            f"got {str(item)[:80]}")
    out.append(item)
  return out


def write_file(path: pathlib.Path, items: list[dict]) -> None:
  """The entries, sorted and without duplicates, so that the committed file changes only where acceptances do."""
  unique = {(e["kind"], e["location"], e["fingerprint"], e.get("base_commit") or ""):
            {k: e.get(k) or "" for k in ("kind", "location", "fingerprint", "name", "base_commit")} for e in items}
  path.write_text(json.dumps({"format": FORMAT, "accepted": [unique[k] for k in sorted(unique)]}, indent=1) + "\n")


def accepted_keys(stored: list[dict], path: Optional[pathlib.Path] = None,
                  base_commit: Optional[str] = None) -> set[tuple[str, str, str]]:
  """The keys of the acceptances (stored, and in the file) that hold for a replay against `base_commit`."""
  items = stored + (read_file(path) if path is not None else [])
  return {(str(e["kind"]), str(e["location"]), str(e["fingerprint"])) for e in items if applies(e, base_commit)}
