"""The capture hook: the one place the compiler calls out to the replay harness.

A capture point costs one flag check when `CAPTURE_PROCESS_REPLAY` is off. When it is on, the
harness's `replay.capture` module is imported lazily (the compiler never imports it otherwise) and
records the point's inputs and outputs once the captured call returns.
"""
from __future__ import annotations
from typing import Any
from scheduler.helpers import CAPTURE_PROCESS_REPLAY, collection_paused


class _NoCapture:
  def __enter__(self): return self
  def __exit__(self, *exc): return False
  def set_output(self, output: Any) -> None: pass


_NO_CAPTURE = _NoCapture()

def capture_point(kind: str, *inputs: Any, **meta: Any):
  """Context manager around one captured call:
  `with capture_point("schedule", sink) as cap: ...; cap.set_output(out)`."""
  if not CAPTURE_PROCESS_REPLAY: return _NO_CAPTURE
  if not _POINT: _import_harness()
  return _POINT[0](kind, inputs, meta)


# the harness's capture point and frame finder, imported on first use (an import statement costs a microsecond)
_POINT: list = []
_FRAME: list = []


def _import_harness() -> None:
  """Import the harness's capture module, with the garbage collector paused: the import makes some two thousand objects
  that all live on, so collections during it free nothing and only bring the program's next collections closer."""
  with collection_paused():
    from replay.capture import CapturePoint, code_frame
  if not _POINT: _POINT.append(CapturePoint)
  if not _FRAME: _FRAME.append(code_frame)   # one a test put in place stays


def origin(start: Any = None) -> Any:
  """Where the program is: (file, line, function) of the first frame outside the compiler and the harness, searched
  from `start` (a frame) or else from the caller outwards, or None; formatted only when a capture names it."""
  if not _FRAME: _import_harness()
  return _FRAME[0](start)
