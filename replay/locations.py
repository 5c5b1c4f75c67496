"""Named regions of a program: `with replay_location("decoder"):` makes every capture taken inside name that
region in its location (nested regions join with " / "), so a report says which part of a program a kernel or
a mismatch belongs to, and `--rerun` pairs captures of two runs region by region.

Cheap and dependency-free on purpose: programs import it whether or not capture is on.
"""
from __future__ import annotations
import contextlib, contextvars
from typing import Iterator, Optional

_REGIONS: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("replay_regions", default=())


@contextlib.contextmanager
def replay_location(name: str) -> Iterator[None]:
  """Label the captures taken inside this block (per thread and per asyncio task)."""
  if not isinstance(name, str) or not name.strip():
    raise ValueError(f"replay_location needs a non-empty name, got {name!r}")
  token = _REGIONS.set(_REGIONS.get() + (" ".join(name.split()),))   # one line, whatever the caller passed
  try: yield
  finally: _REGIONS.reset(token)


def current_region() -> Optional[str]:
  regions = _REGIONS.get()
  return " / ".join(regions) if regions else None
