"""Flag defaults: a change of a compiler flag's default is invisible to a plain replay, because every capture
records the flag values it ran with and the replay applies them again. This module compares the defaults the
captured run had with those of the base's compiler (a worker reports them) and builds the extra replays: each
affected capture once more with the base's defaults, which is what the base really does when nobody sets the flag.
"""
from __future__ import annotations
import json
from typing import Optional
from replay.serialize import NON_COMPILER_FLAGS


def recorded_defaults(runs: list[dict]) -> dict[str, int]:
  """The flag defaults the capture runs recorded (older runs recorded none)."""
  out: dict[str, int] = {}
  for run in runs:
    try: defaults = json.loads(run.get("flag_defaults") or "{}")
    except ValueError: continue
    if isinstance(defaults, dict): out.update({str(k): v for k, v in defaults.items() if isinstance(v, int)})
  return out


def differing(captured: dict[str, int], base: Optional[dict]) -> list[tuple[str, Optional[int], Optional[int]]]:
  """(flag, base default, captured default) for every compiler flag whose default differs; None: the side lacks it."""
  if not captured or not isinstance(base, dict): return []
  names = sorted((set(captured) | set(base)) - NON_COMPILER_FLAGS)
  return [(n, base.get(n), captured.get(n)) for n in names if base.get(n) != captured.get(n)]


def describe(diffs: list[tuple[str, Optional[int], Optional[int]]]) -> str:
  parts = []
  for name, base, head in diffs:
    if base is None: parts.append(f"{name} is new (default {head}; the base has no such flag)")
    elif head is None: parts.append(f"{name} is gone (the base's default was {base})")
    else: parts.append(f"{name}: {base} in the base, {head} in the captured run")
  return "compiler flag defaults differ: " + "; ".join(parts)


def with_base_defaults(captures: list[dict], diffs: list[tuple[str, Optional[int], Optional[int]]]) -> list[dict]:
  """Copies of the captures that ran with a flag at its (captured) default, that flag set to the base's default."""
  changed = {name: (base, head) for name, base, head in diffs if base is not None and head is not None}
  out = []
  for cap in captures:
    try: flags = json.loads(cap.get("flags") or "{}")
    except ValueError: continue
    if not isinstance(flags, dict): continue
    override = {name: base for name, (base, head) in changed.items() if flags.get(name) == head}
    if override: out.append({**cap, "flags": json.dumps({**flags, **override}, sort_keys=True), "override": override})
  return out
